/* test_indexer.c -- lightning indexer logits (ragged and paged) against the double-precision
   oracle, with empty ranges, clean/unclean columns, invalid block-table entries (rule I2),
   context_len 0, NaN-filled unused cache pages, bitwise equality for 1 vs 2 threads, and bad
   inputs. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ak_test.h"
#include "attnkit.h"
#include "oracle_indexer.h"

#define D 128
#define PAGE 64
#define PAGE_BYTES 8448 /* layouts.md: 64 x 128 e4m3 then 64 fp32 scales */

/* The library accumulates 128-term dot products and a 64-head sum in fp32 (semantics.md 8); with
   |q|, |k| <= 7.5 and |w| ~ 0.1 the logits are O(100) and the fp32 rounding stays below 1e-4
   absolute, so abs 1e-3 or rel 1e-3 (the check tolerance of the op) holds with margin. */
static const ak_tol k_tol = {1e-3, 1e-3, -1.0, 1e-9};

static ak_context *ctx_make(int32_t threads) {
    ak_context *c = NULL;
    ak_context_options o = {AK_BACKEND_CPU, threads, 0, NULL};
    CHECK_STATUS(ak_context_create(&o, &c), AK_OK);
    return c;
}

/* e4m3 with exponent field 4..9: magnitudes 2^-3 .. 7.5, no NaN. */
static uint8_t rand_e4m3(ak_rng *r) {
    return (uint8_t)((ak_rng_range(r, 0, 2) << 7) | (ak_rng_range(r, 4, 10) << 3) |
                     ak_rng_range(r, 0, 8));
}
static void fill_e4m3(ak_rng *r, uint8_t *p, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        p[i] = rand_e4m3(r);
}
static void fill_w(ak_rng *r, float *w, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        w[i] = (float)(ak_rng_normal(r) * 0.1);
}
static ak_tensor tmake(void *p, ak_dtype dt, int32_t nd, int64_t a, int64_t b, int64_t c,
                       int64_t d) {
    int64_t s[4] = {a, b, c, d};
    return ak_tensor_make(p, dt, nd, s);
}

static void ragged_case(ak_rng *r, ak_context **ctx, int64_t s, int64_t skv, int32_t h,
                        int compressed, int clean) {
    uint8_t *q = malloc((size_t)(s * h * D)), *k = malloc((size_t)(skv * D));
    float *w = malloc((size_t)(s * h) * 4), *ksc = malloc((size_t)skv * 4);
    int32_t *ks = malloc((size_t)s * 4), *ke = malloc((size_t)s * 4);
    fill_e4m3(r, q, s * h * D);
    fill_e4m3(r, k, skv * D);
    fill_w(r, w, s * h);
    for (int64_t j = 0; j < skv; j++)
        ksc[j] = (float)(0.01 + ak_rng_uniform(r));
    int64_t maxw = 0;
    for (int64_t i = 0; i < s; i++) {
        ks[i] = (int32_t)ak_rng_range(r, 0, skv + 1);
        ke[i] = (int32_t)ak_rng_range(r, ks[i], skv + 1);
        if (i == 0) ke[i] = ks[i]; /* an empty range */
        if (ke[i] - ks[i] > maxw) maxw = ke[i] - ks[i];
    }
    int64_t width = compressed ? maxw + 3 : skv + 5;
    float *out[2];
    double *ref = malloc((size_t)(s * width) * 8);
    for (int64_t i = 0; i < s; i++)
        for (int64_t c = 0; c < width; c++) {
            int64_t key = compressed ? ks[i] + c : c;
            ref[i * width + c] =
                (key >= ks[i] && key < ke[i])
                    ? orc_indexer_logit(q + i * h * D, w + i * h, h, k + key * D, ksc[key])
                : clean ? -INFINITY
                        : NAN; /* untouched poison */
        }
    ak_tensor tq = tmake(q, AK_DTYPE_E4M3, 3, s, h, D, 0),
              tw = tmake(w, AK_DTYPE_F32, 2, s, h, 0, 0),
              tk = tmake(k, AK_DTYPE_E4M3, 2, skv, D, 0, 0),
              tsc = tmake(ksc, AK_DTYPE_F32, 1, skv, 0, 0, 0),
              tks = tmake(ks, AK_DTYPE_I32, 1, s, 0, 0, 0),
              tke = tmake(ke, AK_DTYPE_I32, 1, s, 0, 0, 0);
    for (int c = 0; c < 2; c++) {
        out[c] = malloc((size_t)(s * width) * 4);
        ak_poison(out[c], (size_t)(s * width) * 4, AK_DTYPE_F32);
        ak_tensor tl = tmake(out[c], AK_DTYPE_F32, 2, s, width, 0, 0);
        CHECK_STATUS(ak_indexer_logits_ragged(ctx[c], &tq, &tw, &tk, &tsc, &tks, &tke, compressed,
                                              clean, &tl),
                     AK_OK);
        ak_compare(compressed ? "ragged compressed" : "ragged", out[c], ref, s * width, k_tol);
    }
    CHECK_MSG(memcmp(out[0], out[1], (size_t)(s * width) * 4) == 0,
              "ragged logits differ between 1 and 2 threads");
    free(q), free(k), free(w), free(ksc), free(ks), free(ke), free(ref), free(out[0]), free(out[1]);
}

AK_TEST(indexer_ragged) {
    ak_rng r;
    ak_rng_init(&r, ak_test_seed());
    ak_context *ctx[2] = {ctx_make(1), ctx_make(2)};
    ragged_case(&r, ctx, 5, 1300, 64, 0, 1);
    ragged_case(&r, ctx, 4, 700, 32, 0, 0);
    ragged_case(&r, ctx, 6, 2100, 7, 1, 1);
    ragged_case(&r, ctx, 3, 300, 1, 1, 0);
    ak_context_destroy(ctx[0]);
    ak_context_destroy(ctx[1]);
}

static void paged_case(ak_rng *r, ak_context **ctx, int64_t b, int64_t next_n, int32_t h,
                       int per_row_len, int clean) {
    int32_t num_pages = 12;
    int64_t max_pages = 6, width = max_pages * PAGE + 20;
    uint8_t *pool = malloc((size_t)num_pages * PAGE_BYTES);
    memset(pool, 0x7f, (size_t)num_pages * PAGE_BYTES); /* NaN everywhere not written */
    int32_t *bt = malloc((size_t)(b * max_pages) * 4);
    int32_t *perm = malloc((size_t)num_pages * 4);
    for (int32_t i = 0; i < num_pages; i++)
        perm[i] = i;
    for (int32_t i = num_pages - 1; i > 0; i--) {
        int32_t j = (int32_t)ak_rng_range(r, 0, i + 1), t = perm[i];
        perm[i] = perm[j], perm[j] = t;
    }
    int64_t nl = per_row_len ? b * next_n : b;
    int32_t *lens = malloc((size_t)nl * 4);
    for (int64_t i = 0; i < nl; i++)
        lens[i] = (int32_t)ak_rng_range(r, 0, max_pages * PAGE + 40);
    lens[0] = 0;                                     /* context_len 0 */
    if (nl > 1) lens[nl - 1] = (int32_t)width + 100; /* clamped to the width */
    static const int32_t bad[] = {-1, -7, 12, 2147480000};
    for (int64_t i = 0; i < b * max_pages; i++) {
        int64_t u = ak_rng_range(r, 0, 6);
        bt[i] = u == 0 ? bad[ak_rng_range(r, 0, 4)] : perm[ak_rng_range(r, 0, num_pages - 2)];
    }
    /* pages perm[0 .. num_pages-3] hold data; the last two stay NaN and are never referenced */
    for (int32_t i = 0; i < num_pages - 2; i++) {
        uint8_t *pg = pool + (int64_t)perm[i] * PAGE_BYTES;
        fill_e4m3(r, pg, PAGE * D);
        for (int t = 0; t < PAGE; t++) {
            float s = (float)(0.01 + ak_rng_uniform(r));
            memcpy(pg + PAGE * D + t * 4, &s, 4);
        }
    }
    int64_t rows = b * next_n;
    uint8_t *q = malloc((size_t)(rows * h * D));
    float *w = malloc((size_t)(rows * h) * 4);
    fill_e4m3(r, q, rows * h * D);
    fill_w(r, w, rows * h);
    double *ref = malloc((size_t)(rows * width) * 8);
    for (int64_t row = 0; row < rows; row++) {
        int64_t bi = row / next_n, len = per_row_len ? lens[row] : lens[bi];
        if (len > width) len = width;
        for (int64_t p = 0; p < width; p++) {
            double v;
            if (p >= len) {
                v = clean ? -INFINITY : NAN;
            } else {
                int64_t pg = p / PAGE;
                int32_t id = pg < max_pages ? bt[bi * max_pages + pg] : -1;
                if (id < 0 || id >= num_pages) {
                    v = -INFINITY; /* rule I2: masked */
                } else {
                    const uint8_t *page = pool + (int64_t)id * PAGE_BYTES;
                    float sc;
                    memcpy(&sc, page + PAGE * D + (p % PAGE) * 4, 4);
                    v = orc_indexer_logit(q + row * h * D, w + row * h, h, page + (p % PAGE) * D,
                                          sc);
                }
            }
            ref[row * width + p] = v;
        }
    }
    ak_cache cache;
    CHECK_STATUS(ak_cache_init(&cache, AK_LAYOUT_INDEXER_FP8, pool, num_pages, PAGE), AK_OK);
    ak_tensor tq = tmake(q, AK_DTYPE_E4M3, 4, b, next_n, h, D),
              tw = tmake(w, AK_DTYPE_F32, 2, rows, h, 0, 0),
              tb = tmake(bt, AK_DTYPE_I32, 2, b, max_pages, 0, 0),
              tc = per_row_len ? tmake(lens, AK_DTYPE_I32, 2, b, next_n, 0, 0)
                               : tmake(lens, AK_DTYPE_I32, 1, b, 0, 0, 0);
    float *out[2];
    for (int c = 0; c < 2; c++) {
        out[c] = malloc((size_t)(rows * width) * 4);
        ak_poison(out[c], (size_t)(rows * width) * 4, AK_DTYPE_F32);
        ak_tensor tl = tmake(out[c], AK_DTYPE_F32, 2, rows, width, 0, 0);
        CHECK_STATUS(ak_indexer_logits_paged(ctx[c], &tq, &tw, &cache, &tb, &tc, clean, &tl),
                     AK_OK);
        ak_compare("paged", out[c], ref, rows * width, k_tol);
    }
    CHECK_MSG(memcmp(out[0], out[1], (size_t)(rows * width) * 4) == 0,
              "paged logits differ between 1 and 2 threads");
    free(pool), free(bt), free(perm), free(lens), free(q), free(w), free(ref), free(out[0]),
        free(out[1]);
}

AK_TEST(indexer_paged) {
    ak_rng r;
    ak_rng_init(&r, ak_test_seed() + 1);
    ak_context *ctx[2] = {ctx_make(1), ctx_make(2)};
    paged_case(&r, ctx, 3, 1, 64, 0, 1);
    paged_case(&r, ctx, 2, 2, 32, 1, 1);
    paged_case(&r, ctx, 2, 3, 5, 1, 0);
    paged_case(&r, ctx, 4, 1, 64, 0, 0);
    ak_context_destroy(ctx[0]);
    ak_context_destroy(ctx[1]);
}

AK_TEST(indexer_rejects) {
    ak_context *ctx = ctx_make(1);
    static uint8_t q[2 * 4 * D], k[10 * D], pool[2 * PAGE_BYTES];
    static float w[2 * 4], ksc[10], logits[2 * 16];
    int32_t ks[2] = {0, 2}, ke[2] = {5, 11}, bt[2] = {0, 1}, cl[2] = {3, 4};
    ak_tensor tq = tmake(q, AK_DTYPE_E4M3, 3, 2, 4, D, 0),
              tw = tmake(w, AK_DTYPE_F32, 2, 2, 4, 0, 0),
              tk = tmake(k, AK_DTYPE_E4M3, 2, 10, D, 0, 0),
              tsc = tmake(ksc, AK_DTYPE_F32, 1, 10, 0, 0, 0),
              tks = tmake(ks, AK_DTYPE_I32, 1, 2, 0, 0, 0),
              tke = tmake(ke, AK_DTYPE_I32, 1, 2, 0, 0, 0),
              tl = tmake(logits, AK_DTYPE_F32, 2, 2, 16, 0, 0);
    CHECK_REJECT(ak_indexer_logits_ragged(ctx, &tq, &tw, &tk, &tsc, &tks, &tke, 0, 1, &tl),
                 AK_ERR_INVALID_ARGUMENT, "ke[1]");
    ke[1] = 10;
    ks[1] = -1;
    CHECK_REJECT(ak_indexer_logits_ragged(ctx, &tq, &tw, &tk, &tsc, &tks, &tke, 0, 1, &tl),
                 AK_ERR_INVALID_ARGUMENT, "ks[1]");
    ks[1] = 2;
    ak_tensor narrow = tmake(logits, AK_DTYPE_F32, 2, 2, 5, 0, 0);
    CHECK_REJECT(ak_indexer_logits_ragged(ctx, &tq, &tw, &tk, &tsc, &tks, &tke, 0, 1, &narrow),
                 AK_ERR_INVALID_ARGUMENT, "logits");
    CHECK_REJECT(ak_indexer_logits_ragged(ctx, &tq, &tw, &tk, &tsc, &tks, &tke, 1, 1, &narrow),
                 AK_ERR_INVALID_ARGUMENT, "compressed");
    CHECK_REJECT(ak_indexer_logits_ragged(ctx, &tq, &tw, &tk, &tsc, &tks, &tke, 2, 1, &tl),
                 AK_ERR_INVALID_ARGUMENT, "compressed");
    ak_tensor bad = tq;
    bad.dtype = AK_DTYPE_BF16;
    CHECK_REJECT(ak_indexer_logits_ragged(ctx, &bad, &tw, &tk, &tsc, &tks, &tke, 0, 1, &tl),
                 AK_ERR_INVALID_ARGUMENT, "q");
    ak_tensor q65 = tmake(q, AK_DTYPE_E4M3, 3, 1, 65, D, 0);
    CHECK_REJECT(ak_indexer_logits_ragged(ctx, &q65, &tw, &tk, &tsc, &tks, &tke, 0, 1, &tl),
                 AK_ERR_INVALID_ARGUMENT, "heads");
    ak_tensor wbad = tmake(w, AK_DTYPE_F32, 2, 2, 3, 0, 0);
    CHECK_REJECT(ak_indexer_logits_ragged(ctx, &tq, &wbad, &tk, &tsc, &tks, &tke, 0, 1, &tl),
                 AK_ERR_INVALID_ARGUMENT, "weights");
    CHECK_REJECT(ak_indexer_logits_ragged(ctx, &tq, &tw, &tk, NULL, &tks, &tke, 0, 1, &tl),
                 AK_ERR_INVALID_ARGUMENT, "k_scale");

    ak_cache cache;
    CHECK_STATUS(ak_cache_init(&cache, AK_LAYOUT_INDEXER_FP8, pool, 2, PAGE), AK_OK);
    ak_tensor pq = tmake(q, AK_DTYPE_E4M3, 4, 2, 1, 4, D),
              tb = tmake(bt, AK_DTYPE_I32, 2, 2, 1, 0, 0),
              tc = tmake(cl, AK_DTYPE_I32, 1, 2, 0, 0, 0);
    CHECK_STATUS(ak_indexer_logits_paged(ctx, &pq, &tw, &cache, &tb, &tc, 1, &tl), AK_OK);
    ak_cache wrong = cache;
    wrong.layout = AK_LAYOUT_MLA_BF16;
    wrong.page_stride = 0;
    CHECK_REJECT(ak_indexer_logits_paged(ctx, &pq, &tw, &wrong, &tb, &tc, 1, &tl),
                 AK_ERR_UNSUPPORTED, "cache");
    CHECK_REJECT(ak_indexer_logits_paged(ctx, &pq, &tw, NULL, &tb, &tc, 1, &tl),
                 AK_ERR_INVALID_ARGUMENT, "cache");
    ak_tensor tc3 = tmake(cl, AK_DTYPE_I32, 1, 3, 0, 0, 0);
    CHECK_REJECT(ak_indexer_logits_paged(ctx, &pq, &tw, &cache, &tb, &tc3, 1, &tl),
                 AK_ERR_INVALID_ARGUMENT, "context_lens");
    ak_tensor tb3 = tmake(bt, AK_DTYPE_I32, 2, 1, 2, 0, 0);
    CHECK_REJECT(ak_indexer_logits_paged(ctx, &pq, &tw, &cache, &tb3, &tc, 1, &tl),
                 AK_ERR_INVALID_ARGUMENT, "block_table");
    ak_tensor tl3 = tmake(logits, AK_DTYPE_F32, 2, 1, 16, 0, 0);
    CHECK_REJECT(ak_indexer_logits_paged(ctx, &pq, &tw, &cache, &tb, &tc, 1, &tl3),
                 AK_ERR_INVALID_ARGUMENT, "logits");
    CHECK_REJECT(ak_indexer_logits_paged(ctx, &pq, &tw, &cache, &tb, &tc, 3, &tl),
                 AK_ERR_INVALID_ARGUMENT, "clean_logits");
    ak_context_destroy(ctx);
}
