/*
 * check_indexer.c -- `attnkit check` runner for the lightning indexer logits and top-k: ops
 * "indexer" (ragged, compressed ragged and paged; abs 1e-3 or rel 1e-3 -- fp32 sums of 64 x 128
 * products whose order may differ between backends) and "topk" (deterministic mode, exact, with
 * and without the fused PAGED / RAGGED transforms). Public API and devmem.h only.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnkit.h"
#include "check.h"
#include "devmem.h"

#define CK_TRY(expr)                                                                               \
    do {                                                                                           \
        ak_status ck_s_ = (expr);                                                                  \
        if (ck_s_ != AK_OK) return ck_s_;                                                          \
    } while (0)

#define IDX_TOL_ABS 1e-3
#define IDX_TOL_REL 1e-3

/* One host buffer staged on a context: inputs copied, outputs filled with 0xff (NaN / -1). */
typedef struct ck_buf {
    void *host;
    ak_dtype dt;
    int32_t ndim;
    int64_t shape[4];
    int32_t out;
    void *dev;
    ak_tensor t;
} ck_buf;

static size_t ck_bytes(const ck_buf *b) {
    int64_t n = 1;
    for (int i = 0; i < b->ndim; i++)
        n *= b->shape[i];
    return (size_t)n * (size_t)ak_dtype_size(b->dt);
}

static ak_status ck_stage(ak_context *ctx, ck_buf *b, int n) {
    for (int i = 0; i < n; i++) {
        size_t bytes = ck_bytes(&b[i]) ? ck_bytes(&b[i]) : 1;
        b[i].dev = b[i].out ? ak_dev_alloc(ctx, bytes) : ak_dev_clone(ctx, b[i].host, bytes);
        if (b[i].dev == NULL) return AK_ERR_OUT_OF_MEMORY;
        if (b[i].out) CK_TRY(ak_dev_memset(ctx, b[i].dev, 0xff, bytes));
        b[i].t = ak_dev_tensor(ctx, b[i].dev, b[i].dt, b[i].ndim, b[i].shape);
    }
    return AK_OK;
}

static ak_status ck_fetch_free(ak_context *ctx, ck_buf *b, int n, ak_status s) {
    for (int i = 0; i < n; i++) {
        if (s == AK_OK && b[i].out) s = ak_dev_download(ctx, b[i].host, b[i].dev, ck_bytes(&b[i]));
        ak_dev_free(ctx, b[i].dev);
        b[i].dev = NULL;
    }
    return s;
}

static uint64_t ck_next(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}

/* e4m3 bytes of magnitude 2^-3 .. 7.5 (no NaN): realistic fp8 activations. */
static uint8_t ck_e4m3(uint64_t *rng) {
    return (uint8_t)(((ck_next(rng) & 1) << 7) | ((4 + ck_next(rng) % 6) << 3) |
                     (ck_next(rng) % 8));
}
static float ck_unit(uint64_t *rng) {
    return (float)(ck_next(rng) % 1000000) / 1e6f;
}

static void ck_result(ak_check_report *rep, const char *op, const char *shape, ak_status sr,
                      ak_status st, const void *test, const void *ref, int64_t n, int is_f32,
                      int bitwise) {
    ak_check_result res;
    memset(&res, 0, sizeof res);
    snprintf(res.op, sizeof res.op, "%s", op);
    snprintf(res.shape, sizeof res.shape, "%s", shape);
    if (sr == AK_OK && st == AK_ERR_UNSUPPORTED) {
        res.skipped = 1;
        snprintf(res.note, sizeof res.note, "no kernel on the test backend (%s)", ak_last_error());
    } else if (sr != AK_OK || st != AK_OK) {
        snprintf(res.note, sizeof res.note, "status ref %s, test %s: %s", ak_status_name(sr),
                 ak_status_name(st), ak_last_error());
    } else if (is_f32) {
        ak_check_compare_f32((const float *)test, (const float *)ref, n, IDX_TOL_ABS, IDX_TOL_REL,
                             -1.0, bitwise, &res);
        if (res.passed) snprintf(res.note, sizeof res.note, bitwise ? "bitwise" : "abs/rel 1e-3");
    } else {
        ak_check_compare_bytes(test, ref, (size_t)n * 4, &res);
        if (res.passed) snprintf(res.note, sizeof res.note, "exact");
    }
    ak_check_report_add(rep, &res);
}

static ak_status check_paged(ak_context *ref, ak_context *test, const ak_check_opts *o,
                             ak_check_report *rep, int64_t b, int64_t next_n, int32_t h) {
    uint64_t rng = o->seed + (uint64_t)(b * 10 + next_n);
    int32_t num_pages = o->quick ? 24 : 96;
    int64_t max_pages = num_pages / 2, width = max_pages * 64, rows = b * next_n;
    size_t pool_bytes = (size_t)num_pages * 8448;
    uint8_t *pool = (uint8_t *)malloc(pool_bytes);
    for (int32_t p = 0; p < num_pages; p++) {
        uint8_t *pg = pool + (size_t)p * 8448;
        for (int i = 0; i < 64 * 128; i++)
            pg[i] = ck_e4m3(&rng);
        for (int t = 0; t < 64; t++) {
            float s = 0.01f + ck_unit(&rng);
            memcpy(pg + 8192 + t * 4, &s, 4);
        }
    }
    int32_t *bt = (int32_t *)malloc((size_t)(b * max_pages) * 4),
            *cl = (int32_t *)malloc((size_t)rows * 4);
    for (int64_t i = 0; i < b * max_pages; i++)
        bt[i] = ck_next(&rng) % 13 == 0 ? -1 : (int32_t)(ck_next(&rng) % (uint64_t)num_pages);
    for (int64_t i = 0; i < rows; i++)
        cl[i] = i == 0 ? 0 : (int32_t)(ck_next(&rng) % (uint64_t)(width + 1));
    uint8_t *q = (uint8_t *)malloc((size_t)(rows * h * 128));
    float *w = (float *)malloc((size_t)(rows * h) * 4);
    for (int64_t i = 0; i < rows * h * 128; i++)
        q[i] = ck_e4m3(&rng);
    for (int64_t i = 0; i < rows * h; i++)
        w[i] = (ck_unit(&rng) - 0.5f) * 0.2f;
    float *out[2] = {(float *)malloc((size_t)(rows * width) * 4),
                     (float *)malloc((size_t)(rows * width) * 4)};
    ak_context *ctxs[2] = {ref, test};
    ak_status st[2];
    for (int c = 0; c < 2; c++) {
        ck_buf bf[6] = {{q, AK_DTYPE_E4M3, 4, {b, next_n, h, 128}, 0},
                        {w, AK_DTYPE_F32, 2, {rows, h}, 0},
                        {pool, AK_DTYPE_U8, 1, {(int64_t)pool_bytes}, 0},
                        {bt, AK_DTYPE_I32, 2, {b, max_pages}, 0},
                        {cl, AK_DTYPE_I32, 2, {b, next_n}, 0},
                        {out[c], AK_DTYPE_F32, 2, {rows, width}, 1}};
        st[c] = ck_stage(ctxs[c], bf, 6);
        ak_cache cache;
        if (st[c] == AK_OK)
            st[c] = ak_cache_init(&cache, AK_LAYOUT_INDEXER_FP8, bf[2].dev, num_pages, 64);
        if (st[c] == AK_OK) {
            cache.device = ak_context_device(ctxs[c]);
            st[c] = ak_indexer_logits_paged(ctxs[c], &bf[0].t, &bf[1].t, &cache, &bf[3].t, &bf[4].t,
                                            1, &bf[5].t);
        }
        st[c] = ck_fetch_free(ctxs[c], bf, 6, st[c]);
    }
    char shape[200];
    snprintf(shape, sizeof shape, "paged B %lld, next_n %lld, H %d, width %lld, pages %d",
             (long long)b, (long long)next_n, (int)h, (long long)width, (int)num_pages);
    ck_result(rep, "indexer", shape, st[0], st[1], out[1], out[0], rows * width, 1, o->bitwise);
    free(pool), free(bt), free(cl), free(q), free(w), free(out[0]), free(out[1]);
    return AK_OK;
}

static ak_status check_ragged(ak_context *ref, ak_context *test, const ak_check_opts *o,
                              ak_check_report *rep, int compressed) {
    uint64_t rng = o->seed + 500 + (uint64_t)compressed;
    int64_t s = o->quick ? 8 : 24, skv = o->quick ? 1500 : 5000;
    int32_t h = 64;
    uint8_t *q = (uint8_t *)malloc((size_t)(s * h * 128)),
            *k = (uint8_t *)malloc((size_t)(skv * 128));
    float *w = (float *)malloc((size_t)(s * h) * 4), *ksc = (float *)malloc((size_t)skv * 4);
    int32_t *ks = (int32_t *)malloc((size_t)s * 4), *ke = (int32_t *)malloc((size_t)s * 4);
    for (int64_t i = 0; i < s * h * 128; i++)
        q[i] = ck_e4m3(&rng);
    for (int64_t i = 0; i < skv * 128; i++)
        k[i] = ck_e4m3(&rng);
    for (int64_t i = 0; i < s * h; i++)
        w[i] = (ck_unit(&rng) - 0.5f) * 0.2f;
    for (int64_t i = 0; i < skv; i++)
        ksc[i] = 0.01f + ck_unit(&rng);
    int64_t maxw = 1;
    for (int64_t i = 0; i < s; i++) { /* causal ranges of requests laid out back to back */
        ks[i] = (int32_t)(ck_next(&rng) % (uint64_t)skv);
        ke[i] = ks[i] + (int32_t)(ck_next(&rng) % (uint64_t)(skv - ks[i] + 1));
        if (ke[i] - ks[i] > maxw) maxw = ke[i] - ks[i];
    }
    int64_t width = compressed ? maxw : skv;
    float *out[2] = {(float *)malloc((size_t)(s * width) * 4),
                     (float *)malloc((size_t)(s * width) * 4)};
    ak_context *ctxs[2] = {ref, test};
    ak_status st[2];
    for (int c = 0; c < 2; c++) {
        ck_buf bf[7] = {{q, AK_DTYPE_E4M3, 3, {s, h, 128}, 0},   {w, AK_DTYPE_F32, 2, {s, h}, 0},
                        {k, AK_DTYPE_E4M3, 2, {skv, 128}, 0},    {ksc, AK_DTYPE_F32, 1, {skv}, 0},
                        {ks, AK_DTYPE_I32, 1, {s}, 0},           {ke, AK_DTYPE_I32, 1, {s}, 0},
                        {out[c], AK_DTYPE_F32, 2, {s, width}, 1}};
        st[c] = ck_stage(ctxs[c], bf, 7);
        if (st[c] == AK_OK)
            st[c] = ak_indexer_logits_ragged(ctxs[c], &bf[0].t, &bf[1].t, &bf[2].t, &bf[3].t,
                                             &bf[4].t, &bf[5].t, compressed, 1, &bf[6].t);
        st[c] = ck_fetch_free(ctxs[c], bf, 7, st[c]);
    }
    char shape[200];
    snprintf(shape, sizeof shape, "ragged%s S %lld, S_kv %lld, H %d, width %lld",
             compressed ? " compressed" : "", (long long)s, (long long)skv, (int)h,
             (long long)width);
    ck_result(rep, "indexer", shape, st[0], st[1], out[1], out[0], s * width, 1, o->bitwise);
    free(q), free(k), free(w), free(ksc), free(ks), free(ke), free(out[0]), free(out[1]);
    return AK_OK;
}

/* tf_kind 0 none, 1 PAGED (64-token block table), 2 RAGGED. */
static ak_status check_topk(ak_context *ref, ak_context *test, const ak_check_opts *o,
                            ak_check_report *rep, int32_t k, int tf_kind) {
    uint64_t rng = o->seed + 900 + (uint64_t)(k + tf_kind);
    int64_t rows = 8, width = o->quick ? 8192 : 65536, b = 4;
    float *x = (float *)malloc((size_t)(rows * width) * 4);
    for (int64_t i = 0; i < rows * width; i++) {
        uint64_t u = ck_next(&rng) % 1000;
        x[i] = u == 0   ? NAN
               : u == 1 ? -INFINITY
               : u == 2 ? INFINITY
                        : (float)(int)(ck_next(&rng) % 4000) * 0.25f; /* a coarse grid: ties */
    }
    int32_t *lens = (int32_t *)malloc((size_t)rows * 4), cuq[5] = {0, 2, 2, 5, 8}, cuk[5];
    for (int64_t i = 0; i < rows; i++)
        lens[i] = (int32_t)(ck_next(&rng) % (uint64_t)(width + 1));
    lens[1] = k / 2; /* a short row: positional */
    cuk[0] = 0;
    for (int i = 0; i < b; i++)
        cuk[i + 1] = cuk[i] + (int32_t)width;
    int64_t tw = width / 64;
    int32_t *table = (int32_t *)malloc((size_t)(b * tw) * 4);
    for (int64_t i = 0; i < b * tw; i++)
        table[i] = ck_next(&rng) % 17 == 0 ? -1 : (int32_t)(ck_next(&rng) % 100000);
    int32_t *out[2] = {(int32_t *)malloc((size_t)(rows * k) * 4),
                       (int32_t *)malloc((size_t)(rows * k) * 4)};
    ak_context *ctxs[2] = {ref, test};
    ak_status st[2];
    for (int c = 0; c < 2; c++) {
        ck_buf bf[6] = {
            {x, AK_DTYPE_F32, 2, {rows, width}, 0}, {lens, AK_DTYPE_I32, 1, {rows}, 0},
            {table, AK_DTYPE_I32, 2, {b, tw}, 0},   {cuq, AK_DTYPE_I32, 1, {b + 1}, 0},
            {cuk, AK_DTYPE_I32, 1, {b + 1}, 0},     {out[c], AK_DTYPE_I32, 2, {rows, k}, 1}};
        st[c] = ck_stage(ctxs[c], bf, 6);
        ak_transform tf = {(ak_index_transform)tf_kind, &bf[2].t, 64, &bf[3].t, &bf[4].t};
        if (st[c] == AK_OK)
            st[c] =
                ak_topk(ctxs[c], &bf[0].t, &bf[1].t, NULL, k, 1, tf_kind ? &tf : NULL, &bf[5].t);
        st[c] = ck_fetch_free(ctxs[c], bf, 6, st[c]);
    }
    char shape[200];
    snprintf(shape, sizeof shape, "rows %lld, width %lld, k %d, deterministic, transform %s",
             (long long)rows, (long long)width, (int)k,
             tf_kind == 0   ? "none"
             : tf_kind == 1 ? "PAGED 64"
                            : "RAGGED");
    ck_result(rep, "topk", shape, st[0], st[1], out[1], out[0], rows * k, 0, 1);
    free(x), free(lens), free(table), free(out[0]), free(out[1]);
    return AK_OK;
}

ak_status ak_check_indexer(ak_context *ref, ak_context *test, const ak_check_opts *o,
                           ak_check_report *rep) {
    if (ak_check_wants(rep, "indexer")) {
        CK_TRY(check_ragged(ref, test, o, rep, 0));
        CK_TRY(check_ragged(ref, test, o, rep, 1));
        CK_TRY(check_paged(ref, test, o, rep, 3, 1, 64));
        CK_TRY(check_paged(ref, test, o, rep, 2, 2, 32));
    }
    if (ak_check_wants(rep, "topk")) {
        CK_TRY(check_topk(ref, test, o, rep, 2048, 0));
        CK_TRY(check_topk(ref, test, o, rep, 512, 1));
        CK_TRY(check_topk(ref, test, o, rep, 2048, 2));
    }
    return AK_OK;
}
AK_CHECK_REGISTER(ak_check_indexer)
