/* test_topk.c -- ak_topk against a sort-based oracle (rule T1): positional order for len <= k,
   the exact deterministic set for len > k (ties, NaN, +-inf), k up to 2048 over 128k-long rows,
   row windows, the fused PAGED and RAGGED transforms, 1 vs 2 threads, and bad inputs. Indices
   are integers, so every comparison is exact. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ak_test.h"
#include "attnkit.h"
#include "oracle_indexer.h"
#include "oracle_pagetable.h"

#define POISON_I32 0x5a5a5a5a

static ak_context *ctx_make(int32_t threads) {
    ak_context *c = NULL;
    ak_context_options o = {AK_BACKEND_CPU, threads, 0, NULL};
    CHECK_STATUS(ak_context_create(&o, &c), AK_OK);
    return c;
}
static ak_tensor ti1(int32_t *p, int64_t n) {
    int64_t s[1] = {n};
    return ak_tensor_make(p, AK_DTYPE_I32, 1, s);
}
static ak_tensor ti2(int32_t *p, int64_t a, int64_t b) {
    int64_t s[2] = {a, b};
    return ak_tensor_make(p, AK_DTYPE_I32, 2, s);
}
static ak_tensor tf2(float *p, int64_t a, int64_t b) {
    int64_t s[2] = {a, b};
    return ak_tensor_make(p, AK_DTYPE_F32, 2, s);
}

/* Logits with many ties (values on a coarse grid) and NaN / +-inf sprinkled in. */
static void fill_logits(ak_rng *r, float *x, int64_t n, int ties) {
    for (int64_t i = 0; i < n; i++) {
        int64_t u = ak_rng_range(r, 0, 100);
        if (u == 0)
            x[i] = NAN;
        else if (u == 1)
            x[i] = -INFINITY;
        else if (u == 2)
            x[i] = INFINITY;
        else if (u == 3)
            x[i] = -0.0f;
        else if (ties)
            x[i] = (float)ak_rng_range(r, -20, 20) * 0.5f;
        else
            x[i] = (float)ak_rng_normal(r);
    }
}

/* Runs top-k on both contexts and compares each row with the oracle (plus the transform). */
static void run_case(ak_context **ctx, float *logits, int64_t rows, int64_t width, int32_t *lens,
                     int32_t *starts, int32_t k, const ak_transform *tf, int tf_kind,
                     const int32_t *table, int64_t tb, int64_t tw, int32_t page, const int32_t *cuq,
                     const int32_t *cuk, const char *what) {
    int32_t *ref = (int32_t *)malloc((size_t)(rows * k) * 4);
    int32_t *pos = (int32_t *)malloc((size_t)(rows * k) * 4);
    int32_t *got = (int32_t *)malloc((size_t)(rows * k) * 4);
    for (int64_t t = 0; t < rows; t++) {
        int64_t s = starts ? starts[t] : 0, len = lens[t] < 0 ? 0 : lens[t];
        if (len > width - s) len = width - s;
        orc_topk(logits + t * width + s, len, k, pos + t * k);
    }
    if (tf)
        orc_transform(tf_kind, table, tb, tw, page, cuq, cuk, pos, rows, k, ref);
    else
        memcpy(ref, pos, (size_t)(rows * k) * 4);
    size_t lb = (size_t)(rows * width) * 4;
    float *keep = (float *)malloc(lb);
    memcpy(keep, logits, lb);
    ak_tensor tl = tf2(logits, rows, width), tn = ti1(lens, rows), ts = ti1(starts, rows),
              to = ti2(got, rows, k);
    for (int c = 0; c < 2; c++)
        for (int det = 0; det < 2; det++) {
            for (int64_t i = 0; i < rows * k; i++)
                got[i] = POISON_I32;
            CHECK_STATUS(ak_topk(ctx[c], &tl, &tn, starts ? &ts : NULL, k, det, tf, &to), AK_OK);
            /* the CPU default mode is the deterministic algorithm too */
            for (int64_t i = 0; i < rows * k; i++)
                if (got[i] != ref[i]) {
                    CHECK_MSG(0, "%s: threads %d det %d row %lld slot %lld: %d, expected %d", what,
                              c + 1, det, (long long)(i / k), (long long)(i % k), got[i], ref[i]);
                    break;
                }
        }
    CHECK_MSG(memcmp(keep, logits, lb) == 0, "%s: top-k wrote into the logits", what);
    free(keep), free(ref), free(pos), free(got);
}

AK_TEST(topk_short_rows_positional) {
    ak_context *ctx[2] = {ctx_make(1), ctx_make(2)};
    ak_rng r;
    ak_rng_init(&r, ak_test_seed());
    int64_t rows = 6, width = 40;
    float x[6 * 40];
    fill_logits(&r, x, rows * width, 0);
    for (int i = 0; i < 40; i++)
        x[i] = NAN;                             /* garbage inside a short window is ignored */
    int32_t lens[6] = {0, -7, 1, 16, 15, 1000}; /* 1000 clamps to the width 40 > k */
    run_case(ctx, x, rows, width, lens, NULL, 16, NULL, 0, NULL, 0, 0, 1, NULL, NULL, "short");
    int32_t got[6 * 16];
    ak_tensor tl = tf2(x, rows, width), tn = ti1(lens, rows), to = ti2(got, rows, 16);
    CHECK_STATUS(ak_topk(ctx[1], &tl, &tn, NULL, 16, 1, NULL, &to), AK_OK);
    CHECK(got[0] == -1 && got[16] == -1 && got[32] == 0 && got[33] == -1);
    for (int j = 0; j < 16; j++)
        CHECK(got[48 + j] == j);
    CHECK(got[64 + 14] == 14 && got[64 + 15] == -1);
    ak_context_destroy(ctx[0]);
    ak_context_destroy(ctx[1]);
}

AK_TEST(topk_ties_nan_inf) {
    ak_context *ctx[2] = {ctx_make(1), ctx_make(2)};
    ak_rng r;
    ak_rng_init(&r, ak_test_seed() + 1);
    int64_t rows = 9, width = 3000;
    float *x = (float *)malloc((size_t)(rows * width) * 4);
    int32_t lens[9], starts[9];
    const int32_t ks[4] = {1, 7, 256, 2048};
    for (int ki = 0; ki < 4; ki++) {
        fill_logits(&r, x, rows * width, ki & 1);
        for (int64_t t = 0; t < rows; t++) {
            starts[t] = (int32_t)ak_rng_range(&r, 0, 200);
            lens[t] = (int32_t)ak_rng_range(&r, 0, width);
        }
        /* rows of only NaN, only -inf, only +inf, all equal */
        for (int64_t j = 0; j < width; j++) {
            x[0 * width + j] = NAN;
            x[1 * width + j] = -INFINITY;
            x[2 * width + j] = INFINITY;
            x[3 * width + j] = 1.5f;
        }
        run_case(ctx, x, rows, width, lens, starts, ks[ki], NULL, 0, NULL, 0, 0, 1, NULL, NULL,
                 "ties/nan/inf");
    }
    free(x);
    ak_context_destroy(ctx[0]);
    ak_context_destroy(ctx[1]);
}

AK_TEST(topk_128k_rows_k2048) {
    ak_context *ctx[2] = {ctx_make(1), ctx_make(2)};
    ak_rng r;
    ak_rng_init(&r, ak_test_seed() + 2);
    int64_t rows = 3, width = 131072;
    float *x = (float *)malloc((size_t)(rows * width) * 4);
    fill_logits(&r, x, rows * width, 0);
    /* row 2: bf16-rounded values give many ties at the threshold */
    for (int64_t j = 0; j < width; j++) {
        uint32_t u;
        memcpy(&u, &x[2 * width + j], 4);
        u &= 0xffff0000u;
        memcpy(&x[2 * width + j], &u, 4);
    }
    int32_t lens[3] = {131072, 100000, 131072};
    run_case(ctx, x, rows, width, lens, NULL, 2048, NULL, 0, NULL, 0, 0, 1, NULL, NULL, "128k");
    free(x);
    ak_context_destroy(ctx[0]);
    ak_context_destroy(ctx[1]);
}

AK_TEST(topk_fused_transforms) {
    ak_context *ctx[2] = {ctx_make(1), ctx_make(2)};
    ak_rng r;
    ak_rng_init(&r, ak_test_seed() + 3);
    int64_t b = 3, rows = 8, width = 700;
    int32_t k = 64;
    float *x = (float *)malloc((size_t)(rows * width) * 4);
    fill_logits(&r, x, rows * width, 1);
    int32_t lens[8], cuq[4] = {0, 3, 3, 6}, cuk[4] = {0, 700, 700, 1100}; /* an empty request */
    for (int64_t t = 0; t < rows; t++)
        lens[t] = (int32_t)ak_rng_range(&r, 0, width + 1);
    const int32_t pages[3] = {1, 64, 256};
    for (int pi = 0; pi < 3; pi++) {
        int32_t P = pages[pi];
        int64_t tw = P == 1 ? 600 : (600 + P - 1) / P; /* narrower than the positions: -1 past it */
        int32_t *table = (int32_t *)malloc((size_t)(b * tw) * 4);
        for (int64_t i = 0; i < b * tw; i++)
            table[i] = ak_rng_range(&r, 0, 7) == 0 ? -1 : (int32_t)ak_rng_range(&r, 0, 1 << 22);
        ak_tensor tt = ti2(table, b, tw), tq = ti1(cuq, b + 1);
        ak_transform paged = {AK_TRANSFORM_PAGED, &tt, P, &tq, NULL};
        run_case(ctx, x, rows, width, lens, NULL, k, &paged, 1, table, b, tw, P, cuq, cuk,
                 "fused paged");
        ak_transform paged_dec = {AK_TRANSFORM_PAGED, &tt, P, NULL, NULL};
        run_case(ctx, x, rows, width, lens, NULL, k, &paged_dec, 1, table, b, tw, P, NULL, cuk,
                 "fused paged decode");
        free(table);
    }
    ak_tensor tq = ti1(cuq, b + 1), tk = ti1(cuk, b + 1);
    ak_transform ragged = {AK_TRANSFORM_RAGGED, NULL, 0, &tq, &tk};
    run_case(ctx, x, rows, width, lens, NULL, k, &ragged, 2, NULL, b, 0, 1, cuq, cuk,
             "fused ragged");
    free(x);
    ak_context_destroy(ctx[0]);
    ak_context_destroy(ctx[1]);
}

AK_TEST(topk_rejects) {
    ak_context *ctx = ctx_make(1);
    float x[2 * 10] = {0};
    int32_t lens[2] = {10, 10}, starts[2] = {0, 11}, out[2 * 4];
    ak_tensor tl = tf2(x, 2, 10), tn = ti1(lens, 2), ts = ti1(starts, 2), to = ti2(out, 2, 4);
    CHECK_REJECT(ak_topk(ctx, &tl, &tn, NULL, 0, 1, NULL, &to), AK_ERR_INVALID_ARGUMENT, "k");
    CHECK_REJECT(ak_topk(ctx, &tl, &tn, NULL, 2049, 1, NULL, &to), AK_ERR_INVALID_ARGUMENT, "k");
    CHECK_REJECT(ak_topk(ctx, &tl, &tn, NULL, 5, 1, NULL, &to), AK_ERR_INVALID_ARGUMENT, "out");
    CHECK_REJECT(ak_topk(ctx, &tl, &tn, NULL, 4, 2, NULL, &to), AK_ERR_INVALID_ARGUMENT,
                 "deterministic");
    out[0] = POISON_I32;
    CHECK_REJECT(ak_topk(ctx, &tl, &tn, &ts, 4, 1, NULL, &to), AK_ERR_INVALID_ARGUMENT,
                 "row_starts[1]");
    CHECK(out[0] == POISON_I32); /* nothing written on failure */
    ak_tensor short_lens = ti1(lens, 1);
    CHECK_REJECT(ak_topk(ctx, &tl, &short_lens, NULL, 4, 1, NULL, &to), AK_ERR_INVALID_ARGUMENT,
                 "lengths");
    ak_tensor bad = tl;
    bad.dtype = AK_DTYPE_BF16;
    CHECK_REJECT(ak_topk(ctx, &bad, &tn, NULL, 4, 1, NULL, &to), AK_ERR_INVALID_ARGUMENT, "logits");
    CHECK_REJECT(ak_topk(ctx, NULL, &tn, NULL, 4, 1, NULL, &to), AK_ERR_INVALID_ARGUMENT, "logits");
    ak_transform tf = {AK_TRANSFORM_PAGED, NULL, 64, NULL, NULL};
    CHECK_REJECT(ak_topk(ctx, &tl, &tn, NULL, 4, 1, &tf, &to), AK_ERR_INVALID_ARGUMENT, "table");
    CHECK_REJECT(ak_topk(NULL, &tl, &tn, NULL, 4, 1, NULL, &to), AK_ERR_INVALID_ARGUMENT, "ctx");
    ak_context_destroy(ctx);
}
