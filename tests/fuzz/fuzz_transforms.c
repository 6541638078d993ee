/*
 * fuzz_transforms.c -- libFuzzer target for ak_topk_transform and the fused ak_topk: random
 * tables, cu_seqlens and positions, including negative and overflowing values. The transform must
 * succeed exactly when the page size and the cu_seqlens it uses are valid (the inputs in
 * tests/fuzz/must-reject are ones it must refuse). On success every output must be -1 or the slot
 * of a position of the row's own request (recomputed here from the definitions), and the fused
 * top-k must equal top-k followed by the transform; on failure nothing may be written. The
 * remaining bytes drive the block-table builder and the V4 combiner with the same properties.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "attnkit.h"

#define POISON 0x5a5a5a5a

typedef struct reader {
    const uint8_t *p;
    size_t n;
} reader;

static uint8_t rd_u8(reader *r) {
    if (r->n == 0) return 0;
    r->n--;
    return *r->p++;
}
static int32_t rd_i32raw(reader *r) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++)
        v |= (uint32_t)rd_u8(r) << (8 * i);
    return (int32_t)v;
}
/* Mostly small values, sometimes -1, any int32, or values near INT32_MAX. */
static int32_t rd_val(reader *r) {
    uint8_t sel = rd_u8(r);
    if (sel < 150) return rd_u8(r);
    if (sel < 190) return -1;
    if (sel < 225) return rd_i32raw(r);
    return INT32_MAX - rd_u8(r);
}
/* cu_seqlens: usually a valid prefix sum, sometimes raw values. */
static void rd_cu(reader *r, int32_t *cu, int64_t n, int raw) {
    int64_t acc = rd_u8(r) % 4;
    for (int64_t i = 0; i < n; i++) {
        if (raw) {
            cu[i] = rd_val(r);
        } else {
            cu[i] = (int32_t)acc;
            acc += rd_u8(r) % 9;
        }
    }
}

/* cu [n] starts at >= 0 and never decreases. */
static int cu_valid(const int32_t *cu, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (cu[i] < (i ? cu[i - 1] : 0)) return 0;
    return 1;
}

static ak_tensor t1(int32_t *p, int64_t n) {
    int64_t s[1] = {n};
    return ak_tensor_make(p, AK_DTYPE_I32, 1, s);
}
static ak_tensor t2(void *p, ak_dtype dt, int64_t a, int64_t b) {
    int64_t s[2] = {a, b};
    return ak_tensor_make(p, dt, 2, s);
}

/* Request of row t, from the definitions (-1: none). */
static int64_t owner(const int32_t *cuq, int64_t b, int64_t t) {
    if (cuq == NULL) return t < b ? t : -1;
    for (int64_t i = 0; i < b; i++)
        if (cuq[i] <= t && t < cuq[i + 1]) return i;
    return -1;
}

/* Whether v is a correct output for position pos of row t. */
static int valid_out(int kind, const int32_t *table, int64_t width, int32_t page,
                     const int32_t *cuq, const int32_t *cuk, int64_t b, int64_t t, int32_t pos,
                     int32_t v) {
    if (v == -1) return 1;
    if (pos < 0) return 0;
    int64_t r = kind == 0 && cuq == NULL ? t : owner(cuq, b, t);
    if (r < 0) return 0;
    if (kind == 0) return v == pos;
    if (kind == 2) return (int64_t)v == (int64_t)cuk[r] + pos && v < cuk[r + 1];
    if (pos / page >= width) return 0;
    int64_t e = table[r * width + pos / page];
    return e >= 0 && (int64_t)v == e * page + pos % page;
}

/* The builders and the V4 lists on the remaining bytes: a success must leave only -1 or
   in-range entries (and -1 past each request's pages or length); a failure writes nothing. */
static void fuzz_builders(ak_context *ctx, reader *rd) {
    static const int32_t pages[7] = {1, 2, 63, 64, 65, 256, 1024};
    int32_t page = pages[rd_u8(rd) % 7];
    int64_t b = rd_u8(rd) % 6, max_ctx = rd_u8(rd) % 40, mp = rd_u8(rd) % 41;
    int64_t pool_rows = rd_u8(rd) % 7;
    int32_t *r2t = calloc((size_t)(pool_rows * max_ctx + 1), 4), *ids = calloc((size_t)b + 1, 4),
            *lens = calloc((size_t)b + 1, 4), *bt = calloc((size_t)(b * mp + 1), 4);
    for (int64_t i = 0; i < pool_rows * max_ctx; i++) {
        int64_t row = i / max_ctx, pos = i % max_ctx;
        /* mostly page-contiguous slots so that some tables are accepted */
        r2t[i] =
            rd_u8(rd) < 200 ? (int32_t)((row * 7 + pos / page) * page + pos % page) : rd_val(rd);
    }
    for (int64_t i = 0; i < b; i++) {
        /* mostly in range, sometimes anything */
        ids[i] = rd_u8(rd) < 200 ? (int32_t)(rd_u8(rd) % (pool_rows + 1)) : rd_val(rd);
        lens[i] = rd_u8(rd) < 200 ? (int32_t)(rd_u8(rd) % (max_ctx + 1)) : rd_val(rd);
    }
    for (int64_t i = 0; i < b * mp; i++)
        bt[i] = POISON;
    ak_tensor tr = t2(r2t, AK_DTYPE_I32, pool_rows, max_ctx), ti = t1(ids, b), tl = t1(lens, b),
              tb = t2(bt, AK_DTYPE_I32, b, mp);
    ak_status s = ak_block_table_build(ctx, &tr, &ti, NULL, &tl, page, &tb);
    for (int64_t i = 0; i < b * mp; i++) {
        int64_t need = lens[i / mp] <= 0 ? 0 : ((int64_t)lens[i / mp] + page - 1) / page;
        if (s != AK_OK ? bt[i] != POISON : (i % mp < need ? bt[i] < 0 : bt[i] != -1)) abort();
    }

    /* V4 combiner: any seq_lens and cu_seqlens_q, overflowing ones included */
    int32_t ratio = (int32_t[]){0, 4, 128}[rd_u8(rd) % 3];
    int32_t topk = ratio ? rd_u8(rd) % 40 : 0, c_max = rd_val(rd), window = rd_u8(rd) % 130 + 1;
    int64_t rows = rd_u8(rd) % 12, w = topk + window + rd_u8(rd) % 3;
    int32_t *cuq = calloc((size_t)b + 1, 4), *raw = calloc((size_t)(rows * topk + 1), 4);
    int32_t *idx = calloc((size_t)(rows * w + 1), 4), *len = calloc((size_t)rows + 1, 4);
    rd_cu(rd, cuq, b + 1, rd_u8(rd) < 30);
    for (int64_t i = 0; i < rows * topk; i++)
        raw[i] = rd_val(rd);
    for (int64_t i = 0; i < rows * w; i++)
        idx[i] = POISON;
    ak_tensor traw = t2(raw, AK_DTYPE_I32, rows, topk), tq = t1(cuq, b + 1),
              tidx = t2(idx, AK_DTYPE_I32, rows, w), tlen = t1(len, rows);
    s = ak_dsv4_combine_indices(ctx, ratio == 4 ? &traw : NULL, &tl, &tq, ratio, topk, c_max,
                                window, &tidx, &tlen, NULL);
    if (s == AK_OK) {
        int64_t total = (int64_t)b * (ratio ? c_max : 0);
        for (int64_t r = 0; r < b; r++) {
            int64_t q = cuq[r + 1] - cuq[r];
            total += lens[r] < q + window - 1 ? lens[r] : q + window - 1;
        }
        for (int64_t t = 0; t < rows; t++) {
            if (len[t] < 0 || len[t] > w) abort();
            for (int64_t j = 0; j < w; j++) {
                int32_t v = idx[t * w + j];
                if (j >= len[t] ? v != -1 : (v != -1 && (v < 0 || v >= total))) abort();
            }
        }
    } else {
        for (int64_t i = 0; i < rows * w; i++)
            if (idx[i] != POISON) abort();
    }
    free(r2t), free(ids), free(lens), free(bt), free(cuq), free(raw), free(idx), free(len);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    reader rd = {data, size};
    static const int32_t pages[7] = {1, 2, 63, 64, 65, 256, 1024};
    int kind = rd_u8(&rd) % 3;
    int32_t page = pages[rd_u8(&rd) % 7];
    if (rd_u8(&rd) == 255) page = (int32_t)rd_i32raw(&rd); /* bad page sizes too */
    int64_t b = rd_u8(&rd) % 9, width = rd_u8(&rd) % 12, rows = rd_u8(&rd) % 16;
    int64_t k = rd_u8(&rd) % 24 + 1;
    uint8_t flags = rd_u8(&rd);
    int use_q = flags & 1, raw_cu = (flags >> 1) & 1, alias = (flags >> 2) & 1;

    int32_t *table = calloc((size_t)(b * width + 1), 4), *cuq = calloc((size_t)b + 1, 4),
            *cuk = calloc((size_t)b + 1, 4), *idx = calloc((size_t)(rows * k + 1), 4),
            *out = calloc((size_t)(rows * k + 1), 4);
    for (int64_t i = 0; i < b * width; i++)
        table[i] = rd_val(&rd);
    rd_cu(&rd, cuq, b + 1, raw_cu);
    rd_cu(&rd, cuk, b + 1, raw_cu);
    for (int64_t i = 0; i < rows * k; i++) {
        idx[i] = rd_val(&rd);
        if (rd.n && rd_u8(&rd) < 40) idx[i] = (int32_t)(rd_u8(&rd) * (int64_t)page / 8);
    }

    ak_context *ctx = NULL;
    ak_context_options o = {AK_BACKEND_CPU, 2, 0, NULL};
    if (ak_context_create(&o, &ctx) != AK_OK) abort();
    ak_tensor tt = t2(table, AK_DTYPE_I32, b, width), tq = t1(cuq, b + 1), tk = t1(cuk, b + 1),
              ti = t2(idx, AK_DTYPE_I32, rows, k),
              to = t2(alias ? idx : out, AK_DTYPE_I32, rows, k);
    ak_transform tf = {(ak_index_transform)kind, &tt, page, use_q ? &tq : NULL, &tk};
    int32_t *keep = malloc((size_t)(rows * k + 1) * 4);
    memcpy(keep, idx, (size_t)(rows * k) * 4);
    for (int64_t i = 0; i < rows * k && !alias; i++)
        out[i] = POISON;
    ak_status s = ak_topk_transform(ctx, &tf, &ti, &to);
    const int32_t *res = alias ? idx : out;
    /* accepted exactly when the page size and the cu_seqlens the transform uses are valid */
    int expect_ok = (kind != 1 || (page >= 1 && page <= 1024)) &&
                    (!use_q || cu_valid(cuq, b + 1)) && (kind != 2 || cu_valid(cuk, b + 1));
    if ((s == AK_OK) != expect_ok) abort();
    for (int64_t i = 0; i < rows * k; i++) {
        if (s != AK_OK) {
            if (res[i] != (alias ? keep[i] : POISON)) abort(); /* written on failure */
        } else if (!valid_out(kind, table, width, page, use_q ? cuq : NULL, cuk, b, i / k, keep[i],
                              res[i])) {
            abort();
        }
    }

    /* fused top-k == top-k then transform, positions distinct and in range */
    if (s == AK_OK && rows > 0) {
        int64_t lw = rd_u8(&rd) % 48 + 1;
        float *logits = malloc((size_t)(rows * lw) * 4);
        int32_t *lens = malloc((size_t)rows * 4), *pos = malloc((size_t)(rows * k) * 4),
                *fused = malloc((size_t)(rows * k) * 4), *after = malloc((size_t)(rows * k) * 4);
        for (int64_t i = 0; i < rows * lw; i++) {
            uint8_t v = rd_u8(&rd);
            logits[i] = v == 255   ? NAN
                        : v == 254 ? INFINITY
                        : v == 253 ? -INFINITY
                                   : (float)(v % 16);
        }
        for (int64_t i = 0; i < rows; i++)
            lens[i] = rd_val(&rd);
        ak_tensor tl = t2(logits, AK_DTYPE_F32, rows, lw), tn = t1(lens, rows),
                  tp = t2(pos, AK_DTYPE_I32, rows, k), tfu = t2(fused, AK_DTYPE_I32, rows, k),
                  ta = t2(after, AK_DTYPE_I32, rows, k);
        if (ak_topk(ctx, &tl, &tn, NULL, (int32_t)k, 1, NULL, &tp) != AK_OK) abort();
        if (ak_topk(ctx, &tl, &tn, NULL, (int32_t)k, 0, &tf, &tfu) != AK_OK) abort();
        if (ak_topk_transform(ctx, &tf, &tp, &ta) != AK_OK) abort();
        if (memcmp(fused, after, (size_t)(rows * k) * 4) != 0) abort();
        for (int64_t t = 0; t < rows; t++) {
            int64_t len = lens[t] < 0 ? 0 : lens[t] > lw ? lw : lens[t];
            int64_t want = len < k ? len : k;
            for (int64_t j = 0; j < k; j++) {
                int32_t p = pos[t * k + j];
                if (j < want ? (p < 0 || p >= len || (j > 0 && p <= pos[t * k + j - 1])) : p != -1)
                    abort();
            }
        }
        free(logits), free(lens), free(pos), free(fused), free(after);
    }
    fuzz_builders(ctx, &rd);
    ak_context_destroy(ctx);
    free(table), free(cuq), free(cuk), free(idx), free(out), free(keep);
    return 0;
}
