/*
 * fuzz_codec.c -- libFuzzer target for the KV-cache codecs (write, gather, convert, audit).
 *
 * Input: a 10-byte header, then a byte stream for slots, values and page ids (continued by an LCG
 * seeded from the input when it runs out).
 *   h[0] src layout (index into k_layouts)   h[1] dst layout        h[2] src page size selector
 *   h[3] dst page size selector               h[4] src pages (0..4)  h[5] dst pages (0..5)
 *   h[6] rows to write (0..23)                h[7] rule (0..4; 4 is invalid)
 *   h[8] flags: 1 f32 inputs, 2 inject NaN, 4 raw slot values (may be out of range),
 *               8 raw page size (may be 0 or huge), 16 padded page stride, 32 pages list
 *   h[9] threads (1 or 2)
 * Properties (abort() on violation):
 *   - every call returns; a failing call leaves a non-empty detail line and writes no byte;
 *   - a NaN input gives AK_ERR_NONFINITE, a slot outside [-1, capacity) AK_ERR_INVALID_ARGUMENT,
 *     a page size 0 or > 1024 AK_ERR_INVALID_ARGUMENT;
 *   - a successful write stays inside the pool (guard byte past its end);
 *   - a pool filled by attnkit passes the audit; gathers fully overwrite NaN-poisoned outputs with
 *     finite values, and invalid slots give zeros;
 *   - a conversion either succeeds or is AK_ERR_UNSUPPORTED naming both layouts (or a rejected
 *     argument); same-layout conversions keep the gathered values exactly.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnkit.h"

typedef struct stream {
    const uint8_t *p;
    size_t n, i;
    uint64_t x;
} stream;

static uint8_t next_byte(stream *s) {
    if (s->i < s->n) return s->p[s->i++];
    s->x = s->x * 6364136223846793005ull + 1442695040888963407ull;
    return (uint8_t)(s->x >> 56);
}

static void fail(const char *what) {
    fprintf(stderr, "fuzz_codec: property violated: %s (detail: %s)\n", what, ak_last_error());
    abort();
}

static const ak_layout k_layouts[8] = {AK_LAYOUT_MLA_BF16, AK_LAYOUT_MLA_FP8_PERTENSOR,
                                       AK_LAYOUT_DSA_FP8_BLOCKSCALE, AK_LAYOUT_DSV4_FP8_UE8M0,
                                       AK_LAYOUT_INDEXER_FP8, AK_LAYOUT_INDEXER_FP4,
                                       AK_LAYOUT_MHA_NHD, AK_LAYOUT_MHA_HND};
static const int32_t k_page_sizes[6] = {1, 2, 3, 5, 8, 16};

static int is_mha(ak_layout l) { return l == AK_LAYOUT_MHA_NHD || l == AK_LAYOUT_MHA_HND; }

typedef struct fpool {
    ak_cache c;
    uint8_t *k, *v;
    int64_t kb, vb;
} fpool;

/* Builds a pool (0xAB-filled) or returns a status for a rejected geometry. */
static ak_status fpool_make(fpool *p, ak_layout l, int32_t pages, int32_t P, int padded) {
    memset(p, 0, sizeof *p);
    ak_status st;
    if (is_mha(l)) st = ak_cache_init_mha(&p->c, l, AK_DTYPE_BF16, NULL, NULL, 0, P, 2, 8, 4);
    else st = ak_cache_init(&p->c, l, NULL, 0, P);
    if (st != AK_OK) return st;
    p->c.num_pages = pages;
    if (padded) p->c.page_stride += l == AK_LAYOUT_DSV4_FP8_UE8M0 ? 576 : 16;
    if (is_mha(l) && padded) p->c.v_page_stride += 8;
    p->kb = p->c.page_stride * pages;
    p->vb = is_mha(l) ? p->c.v_page_stride * pages : 0;
    p->k = (uint8_t *)malloc((size_t)p->kb + 1);
    p->v = (uint8_t *)malloc((size_t)p->vb + 1);
    memset(p->k, 0xab, (size_t)p->kb + 1);
    memset(p->v, 0xab, (size_t)p->vb + 1);
    p->c.data = p->k;
    p->c.v_data = is_mha(l) ? p->v : NULL;
    return AK_OK;
}

static void fpool_free(fpool *p) {
    free(p->k);
    free(p->v);
}

/* Row width the writer takes: nope | rope (MLA), key (indexer), k | v per head (MHA). */
static void widths(ak_layout l, int *wn, int *wr) {
    switch (l) {
    case AK_LAYOUT_DSV4_FP8_UE8M0: *wn = 448; *wr = 64; break;
    case AK_LAYOUT_INDEXER_FP8: case AK_LAYOUT_INDEXER_FP4: *wn = 128; *wr = 0; break;
    case AK_LAYOUT_MHA_NHD: case AK_LAYOUT_MHA_HND: *wn = 16; *wr = 8; break; /* 2 heads x 8 | 4 */
    default: *wn = 512; *wr = 64; break;
    }
}

static int d_out(ak_layout l) {
    return l == AK_LAYOUT_DSV4_FP8_UE8M0 ? 512 : l >= AK_LAYOUT_INDEXER_FP8 && !is_mha(l) ? 128 : 576;
}

/* Gathers slots [0, n) of the pool (plus two invalid ones) into a poisoned f32 buffer and checks
   that every element was written; returns the buffer (n + 2 rows) or NULL on a failed call. */
static float *gather(ak_context *ctx, const fpool *p, int64_t n, int *w_out) {
    int w = is_mha(p->c.layout) ? 16 : d_out(p->c.layout);
    int32_t *slots = (int32_t *)malloc(sizeof(int32_t) * (size_t)(n + 2));
    for (int64_t i = 0; i < n; i++) slots[i] = (int32_t)i;
    slots[n] = -1;
    slots[n + 1] = (int32_t)n + 1000;
    float *out = (float *)malloc(sizeof(float) * (size_t)((n + 2) * w));
    for (int64_t i = 0; i < (n + 2) * w; i++) out[i] = NAN;
    int64_t ss[1] = {n + 2};
    ak_tensor ts = ak_tensor_make(slots, AK_DTYPE_I32, 1, ss);
    ak_status st;
    if (is_mha(p->c.layout)) {
        int64_t sk[3] = {n + 2, 2, 8};
        ak_tensor tk = ak_tensor_make(out, AK_DTYPE_F32, 3, sk);
        st = ak_mha_cache_gather(ctx, &p->c, &ts, &tk, NULL);
    } else {
        int64_t so[2] = {n + 2, w};
        ak_tensor to = ak_tensor_make(out, AK_DTYPE_F32, 2, so);
        st = ak_cache_gather(ctx, &p->c, &ts, &to, NULL);
    }
    free(slots);
    if (st != AK_OK) {
        if (ak_last_error()[0] == '\0') fail("gather failed without a detail line");
        free(out);
        return NULL;
    }
    for (int64_t i = n * w; i < (n + 2) * w; i++)
        if (out[i] != 0.0f) fail("gather: an invalid slot did not give zeros");
    *w_out = w;
    return out;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 10) return 0;
    stream s = {data + 10, size - 10, 0, 0x9e3779b97f4a7c15ull ^ size};
    for (int i = 0; i < 10; i++) s.x = s.x * 31 + data[i];
    ak_layout sl = k_layouts[data[0] % 8], dl = k_layouts[data[1] % 8];
    int flags = data[8];
    int32_t sp = (flags & 8) ? (int32_t)data[2] * 16 - 32 : k_page_sizes[data[2] % 6];
    int32_t dp = k_page_sizes[data[3] % 6];
    if (sl == AK_LAYOUT_INDEXER_FP8 || sl == AK_LAYOUT_INDEXER_FP4) sp = (flags & 8) ? sp : 64;
    if (dl == AK_LAYOUT_INDEXER_FP8 || dl == AK_LAYOUT_INDEXER_FP4) dp = 64;
    int32_t spages = data[4] % 5, dpages = data[5] % 6;
    int64_t n = data[6] % 24;
    ak_quant_rule rule = (ak_quant_rule)(data[7] % 5);

    ak_context_options o = {AK_BACKEND_CPU, 1 + (data[9] & 1), 0, NULL};
    ak_context *ctx = NULL;
    if (ak_context_create(&o, &ctx) != AK_OK) fail("context");

    fpool src;
    ak_status st = fpool_make(&src, sl, spages, sp, flags & 16);
    if (st != AK_OK) {
        if (sp >= 1 && sp <= 1024 && !(sl >= AK_LAYOUT_INDEXER_FP8 && sl <= AK_LAYOUT_INDEXER_FP4))
            fail("a valid page size was rejected");
        if (st != AK_ERR_INVALID_ARGUMENT || ak_last_error()[0] == '\0') fail("bad page size status");
        ak_context_destroy(ctx);
        return 0;
    }
    if (sp < 1 || sp > 1024) fail("page size outside 1..1024 accepted");
    int64_t cap = (int64_t)spages * sp;

    /* rows: slots distinct unless raw; values v = m/16 * 2^e */
    int wn, wr;
    widths(sl, &wn, &wr);
    int w = wn + wr;
    int f32 = flags & 1;
    int32_t *slots = (int32_t *)malloc(sizeof(int32_t) * (size_t)(n + 1));
    float *xin = (float *)malloc(sizeof(float) * (size_t)(n * w + 1));
    uint16_t *bin = (uint16_t *)malloc(2 * (size_t)(n * w + 1));
    int expect_bad_slot = 0;
    for (int64_t i = 0; i < n; i++) {
        if (flags & 4) {
            int32_t v = (int32_t)(int8_t)next_byte(&s);
            slots[i] = v;
            if (v != -1 && (v < 0 || v >= cap)) expect_bad_slot = 1;
        } else {
            slots[i] = cap > 0 && i < cap ? (int32_t)((i * 7 + data[6]) % cap) : -1;
        }
    }
    /* distinct slots in the non-raw case: i*7 mod cap repeats when gcd(7, cap) > 1 or n > cap */
    if (!(flags & 4))
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < i; j++)
                if (slots[j] == slots[i]) slots[i] = -1;
    int nan_row = -1;
    for (int64_t i = 0; i < n * w; i++) {
        float v = (float)((int8_t)next_byte(&s)) / 16.0f;
        int e = (int)(next_byte(&s) % 40) - 20;
        v = ldexpf(v, e);
        uint32_t u;
        memcpy(&u, &v, 4);
        u &= 0xffff0000u; /* bf16-exact so both input dtypes carry the same values */
        memcpy(&v, &u, 4);
        xin[i] = v;
        bin[i] = (uint16_t)(u >> 16);
    }
    if ((flags & 2) && n > 0) {
        nan_row = (int)(next_byte(&s) % n);
        xin[nan_row * w + w - 1] = NAN;
        bin[nan_row * w + w - 1] = 0x7fc0;
    }
    int nan_written = nan_row >= 0 && slots[nan_row] != -1;

    uint8_t *k_before = (uint8_t *)malloc((size_t)src.kb + 1);
    uint8_t *v_before = (uint8_t *)malloc((size_t)src.vb + 1);
    memcpy(k_before, src.k, (size_t)src.kb + 1);
    memcpy(v_before, src.v, (size_t)src.vb + 1);
    void *in = f32 ? (void *)xin : (void *)bin;
    int esz = f32 ? 4 : 2;
    ak_dtype dt = f32 ? AK_DTYPE_F32 : AK_DTYPE_BF16;
    int64_t ss[1] = {n};
    ak_tensor ts = ak_tensor_make(slots, AK_DTYPE_I32, 1, ss);
    if (is_mha(sl)) {
        int64_t sk[3] = {n, 2, 8}, sv[3] = {n, 2, 4};
        ak_tensor tk = ak_tensor_make(in, dt, 3, sk), tv = ak_tensor_make((uint8_t *)in + 16 * esz, dt, 3, sv);
        tk.strides[0] = w;
        tv.strides[0] = w;
        st = ak_mha_cache_write(ctx, &src.c, &tk, &tv, &ts);
    } else {
        int64_t sn[2] = {n, wn}, sr[2] = {n, wr};
        ak_tensor tn = ak_tensor_make(in, dt, 2, sn), tr = ak_tensor_make((uint8_t *)in + wn * esz, dt, 2, sr);
        tn.strides[0] = w;
        tr.strides[0] = w;
        st = ak_cache_write(ctx, &src.c, &tn, wr ? &tr : NULL, &ts, rule);
    }
    int rule_ok = is_mha(sl) || rule == AK_QUANT_DEFAULT ||
                  (rule == AK_QUANT_POW2 && sl >= AK_LAYOUT_DSA_FP8_BLOCKSCALE) ||
                  (rule == AK_QUANT_FP32 && (sl == AK_LAYOUT_DSA_FP8_BLOCKSCALE || sl == AK_LAYOUT_INDEXER_FP8)) ||
                  (rule == AK_QUANT_POW2_AMAX_FLOOR && sl == AK_LAYOUT_DSV4_FP8_UE8M0);
    if (st != AK_OK) {
        if (ak_last_error()[0] == '\0') fail("write failed without a detail line");
        if (memcmp(k_before, src.k, (size_t)src.kb + 1) != 0 ||
            memcmp(v_before, src.v, (size_t)src.vb + 1) != 0)
            fail("a failed write changed the cache");
        if (!expect_bad_slot && !nan_written && rule_ok && n > 0) fail("a valid write was rejected");
        if (rule_ok && expect_bad_slot && st != AK_ERR_INVALID_ARGUMENT) fail("bad slot status");
        if (rule_ok && !expect_bad_slot && nan_written && st != AK_ERR_NONFINITE) fail("NaN status");
    } else {
        if (expect_bad_slot) fail("an out-of-range slot was accepted");
        if (nan_written) fail("a NaN input was accepted");
        if (!rule_ok && n > 0) fail("a rule that does not apply was accepted");
        if (src.k[src.kb] != 0xab || src.v[src.vb] != 0xab) fail("write past the pool");
    }

    /* fill every slot so the whole pool decodes finitely, then gather and convert */
    if (cap > 0 && cap <= 4096) {
        int64_t m = cap;
        int32_t *all = (int32_t *)malloc(sizeof(int32_t) * (size_t)m);
        float *rows = (float *)malloc(sizeof(float) * (size_t)(m * w));
        for (int64_t i = 0; i < m; i++) all[i] = (int32_t)i;
        for (int64_t i = 0; i < m * w; i++) rows[i] = ldexpf((float)((int8_t)next_byte(&s)), (int)(next_byte(&s) % 16) - 8);
        int64_t sa[1] = {m};
        ak_tensor ta = ak_tensor_make(all, AK_DTYPE_I32, 1, sa);
        if (is_mha(sl)) {
            int64_t sk[3] = {m, 2, 8}, sv[3] = {m, 2, 4};
            ak_tensor tk = ak_tensor_make(rows, AK_DTYPE_F32, 3, sk), tv = ak_tensor_make(rows + 16, AK_DTYPE_F32, 3, sv);
            tk.strides[0] = w;
            tv.strides[0] = w;
            st = ak_mha_cache_write(ctx, &src.c, &tk, &tv, &ta);
        } else {
            int64_t sn[2] = {m, wn}, sr[2] = {m, wr};
            ak_tensor tn = ak_tensor_make(rows, AK_DTYPE_F32, 2, sn), tr = ak_tensor_make(rows + wn, AK_DTYPE_F32, 2, sr);
            tn.strides[0] = w;
            tr.strides[0] = w;
            st = ak_cache_write(ctx, &src.c, &tn, wr ? &tr : NULL, &ta, AK_QUANT_DEFAULT);
        }
        if (st != AK_OK) fail("filling the pool failed");
        int64_t bad = -1;
        if (ak_cache_audit(ctx, &src.c, 0, spages, &bad) != AK_OK || bad != 0)
            fail("a pool written by attnkit fails the audit");
        int gw = 0;
        float *g = gather(ctx, &src, m, &gw);
        if (g == NULL) fail("gather of a valid pool failed");
        for (int64_t i = 0; i < m * gw; i++)
            if (!isfinite(g[i])) fail("gather left a non-finite value");

        fpool dst;
        int32_t dpp = dp;
        if (fpool_make(&dst, dl, dpages, dpp, flags & 16) == AK_OK) {
            int32_t pl[4];
            int npl = 0;
            if (flags & 32)
                for (int i = 0; i < 4; i++) pl[npl++] = (int32_t)(int8_t)next_byte(&s) % 6 - 1;
            int64_t sp1[1] = {npl};
            ak_tensor tp = ak_tensor_make(pl, AK_DTYPE_I32, 1, sp1);
            uint8_t *dk = (uint8_t *)malloc((size_t)dst.kb + 1);
            memcpy(dk, dst.k, (size_t)dst.kb + 1);
            st = ak_cache_convert(ctx, &src.c, &dst.c, (flags & 32) ? &tp : NULL, AK_QUANT_DEFAULT);
            if (st == AK_ERR_UNSUPPORTED) {
                const char *d = ak_last_error();
                char a[64], b[64];
                ak_layout_traits t1, t2;
                ak_layout_traits_get(sl, &t1);
                ak_layout_traits_get(dl, &t2);
                snprintf(a, sizeof a, "%s", t1.name);
                snprintf(b, sizeof b, "%s", t2.name);
                if (strstr(d, a) == NULL || strstr(d, b) == NULL) fail("UNSUPPORTED without both layout names");
            } else if (st != AK_OK) {
                if (ak_last_error()[0] == '\0') fail("convert failed without a detail line");
                if (memcmp(dk, dst.k, (size_t)dst.kb + 1) != 0) fail("a failed convert changed dst");
            } else {
                if (dst.k[dst.kb] != 0xab || dst.v[dst.vb] != 0xab) fail("convert wrote past dst");
                if (sl == dl && !(flags & 32) && !is_mha(sl)) {
                    int gw2 = 0;
                    fpool view = dst;
                    view.c.num_pages = (int32_t)((m + dpp - 1) / dpp);
                    if (view.c.num_pages > dst.c.num_pages) fail("capacity check missed");
                    float *g2 = gather(ctx, &view, m, &gw2);
                    if (g2 == NULL || memcmp(g, g2, sizeof(float) * (size_t)(m * gw)) != 0)
                        fail("a same-layout conversion changed values");
                    free(g2);
                }
            }
            free(dk);
            fpool_free(&dst);
        }
        free(g);
        free(all);
        free(rows);
    }
    free(k_before);
    free(v_before);
    free(slots);
    free(xin);
    free(bin);
    fpool_free(&src);
    ak_context_destroy(ctx);
    return 0;
}
