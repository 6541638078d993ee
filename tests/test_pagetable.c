/* test_pagetable.c -- block table and CSR builders, PAGED/RAGGED/NONE transforms, DeepSeek V4 SWA
   lists and the sparse-prefill combiner against the naive oracle (exact equality: these are
   integer maps), on contexts with 1 and 2 threads, plus corner cases and bad inputs. */
#include <stdlib.h>
#include <string.h>

#include "ak_test.h"
#include "attnkit.h"
#include "oracle_pagetable.h"

static const int32_t k_page_sizes[] = {1, 2, 63, 64, 65, 256, 1024};
#define N_PAGE_SIZES ((int)(sizeof k_page_sizes / sizeof k_page_sizes[0]))
#define POISON_I32 0x5a5a5a5a

static ak_context *ctx_make(int32_t threads) {
    ak_context *c = NULL;
    ak_context_options o = {AK_BACKEND_CPU, threads, 0, NULL};
    CHECK_STATUS(ak_context_create(&o, &c), AK_OK);
    return c;
}

static ak_tensor t1(int32_t *p, int64_t n) {
    int64_t s[1] = {n};
    return ak_tensor_make(p, AK_DTYPE_I32, 1, s);
}
static ak_tensor t2(int32_t *p, int64_t a, int64_t b) {
    int64_t s[2] = {a, b};
    return ak_tensor_make(p, AK_DTYPE_I32, 2, s);
}
static int32_t *ialloc(int64_t n) {
    int32_t *p = (int32_t *)malloc((size_t)(n > 0 ? n : 1) * sizeof(int32_t));
    for (int64_t i = 0; i < n; i++)
        p[i] = POISON_I32;
    return p;
}
static void poison(int32_t *p, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        p[i] = POISON_I32;
}
static int same(const int32_t *a, const int32_t *b, int64_t n, const char *what) {
    for (int64_t i = 0; i < n; i++)
        if (a[i] != b[i]) {
            CHECK_MSG(0, "%s: element %lld is %d, expected %d (seed %llu)", what, (long long)i,
                      (int)a[i], (int)b[i], (unsigned long long)ak_test_seed());
            return 0;
        }
    return 1;
}

/* A token pool: b requests over rows of max_ctx; request i at row req_ids[i], tokens from
   kv_start[i]; each page allocated contiguously at a random page id below max_page. Unused
   entries hold garbage (-1 and huge values), never read. */
typedef struct pool {
    int64_t b, rows, max_ctx;
    int32_t *r2t, *req_ids, *kv_start, *seq_lens;
} pool;

static pool pool_make(ak_rng *r, int64_t b, int32_t page, int32_t max_len, int64_t max_page) {
    pool p;
    p.b = b;
    p.rows = b + 2;
    p.max_ctx = max_len + 3 * (int64_t)page;
    p.r2t = ialloc(p.rows * p.max_ctx);
    for (int64_t i = 0; i < p.rows * p.max_ctx; i++)
        p.r2t[i] = (i % 3) ? -1 : 2147480000;
    p.req_ids = ialloc(b);
    p.kv_start = ialloc(b);
    p.seq_lens = ialloc(b);
    for (int64_t i = 0; i < b; i++)
        p.req_ids[i] = (int32_t)(p.rows - 1 - i); /* reversed rows */
    for (int64_t i = 0; i < b; i++) {
        int64_t len = ak_rng_range(r, 0, 4) == 0 ? 0 : ak_rng_range(r, 1, max_len + 1);
        p.seq_lens[i] = (int32_t)len;
        p.kv_start[i] = (int32_t)(ak_rng_range(r, 0, 3) * page);
        int32_t *row = p.r2t + p.req_ids[i] * p.max_ctx + p.kv_start[i];
        int64_t pg = 0;
        for (int64_t pos = 0; pos < len; pos++) {
            if (pos % page == 0) pg = ak_rng_range(r, 0, max_page);
            row[pos] = (int32_t)(pg * page + pos % page);
        }
    }
    return p;
}
static void pool_free(pool *p) {
    free(p->r2t);
    free(p->req_ids);
    free(p->kv_start);
    free(p->seq_lens);
}

AK_TEST(block_table_all_page_sizes) {
    ak_rng r;
    ak_rng_init(&r, ak_test_seed());
    ak_context *ctx[2] = {ctx_make(1), ctx_make(2)};
    for (int ps = 0; ps < N_PAGE_SIZES; ps++) {
        int32_t P = k_page_sizes[ps];
        int32_t max_len = P * 5 + 7;
        /* page ids up to the largest whose slots fit int32: huge slot ids */
        pool p = pool_make(&r, 7, P, max_len, 2147483647LL / P);
        int64_t mp = (max_len + P - 1) / P + 2;
        int32_t *ref = ialloc(p.b * mp), *got = ialloc(p.b * mp);
        CHECK(orc_block_table(p.r2t, p.rows, p.max_ctx, p.req_ids, p.kv_start, p.seq_lens, p.b, P,
                              ref, mp) == ORC_PT_OK);
        ak_tensor r2t = t2(p.r2t, p.rows, p.max_ctx), ids = t1(p.req_ids, p.b),
                  ks = t1(p.kv_start, p.b), sl = t1(p.seq_lens, p.b), bt = t2(got, p.b, mp);
        for (int c = 0; c < 2; c++) {
            poison(got, p.b * mp);
            CHECK_STATUS(ak_block_table_build(ctx[c], &r2t, &ids, &ks, &sl, P, &bt), AK_OK);
            same(got, ref, p.b * mp, "block_table");
        }
        free(ref);
        free(got);
        pool_free(&p);
    }
    ak_context_destroy(ctx[0]);
    ak_context_destroy(ctx[1]);
}

AK_TEST(block_table_defaults_and_rejects) {
    ak_context *ctx = ctx_make(2);
    /* two requests, rows 0 and 1, page size 4, no req_ids / kv_start */
    int32_t r2t[2 * 8] = {8, 9, 10, 11, 4,  5,  6,  7, /* request 0: pages 2, 1 */
                          0, 1, 2,  -1, -1, -1, -1, -1};
    int32_t sl[2] = {6, 3}, bt[2 * 3];
    ak_tensor tr = t2(r2t, 2, 8), ts = t1(sl, 2), tb = t2(bt, 2, 3);
    CHECK_STATUS(ak_block_table_build(ctx, &tr, NULL, NULL, &ts, 4, &tb), AK_OK);
    int32_t want[6] = {2, 1, -1, 0, -1, -1};
    same(bt, want, 6, "block_table defaults");
    /* a page that is not contiguous: BAD_PAGE_TABLE, nothing written */
    r2t[5] = 42;
    poison(bt, 6);
    CHECK_REJECT(ak_block_table_build(ctx, &tr, NULL, NULL, &ts, 4, &tb), AK_ERR_BAD_PAGE_TABLE,
                 "req_to_token");
    CHECK(bt[0] == POISON_I32 && bt[5] == POISON_I32);
    r2t[5] = 5;
    r2t[0] = 9; /* misaligned first slot */
    CHECK_REJECT(ak_block_table_build(ctx, &tr, NULL, NULL, &ts, 4, &tb), AK_ERR_BAD_PAGE_TABLE,
                 "page");
    r2t[0] = 8;
    r2t[8] = -1; /* an unallocated (-1) token inside the length */
    CHECK_REJECT(ak_block_table_build(ctx, &tr, NULL, NULL, &ts, 4, &tb), AK_ERR_BAD_PAGE_TABLE,
                 "request 1");
    r2t[8] = 0;
    int32_t long_len[2] = {8, 3};
    ak_tensor tl = t1(long_len, 2), narrow = t2(bt, 2, 1);
    CHECK_REJECT(ak_block_table_build(ctx, &tr, NULL, NULL, &tl, 4, &narrow),
                 AK_ERR_INVALID_ARGUMENT, "max_pages");
    int32_t ids[2] = {0, 2}, starts[2] = {0, 6};
    ak_tensor ti = t1(ids, 2), tk = t1(starts, 2);
    CHECK_REJECT(ak_block_table_build(ctx, &tr, &ti, NULL, &ts, 4, &tb), AK_ERR_INVALID_ARGUMENT,
                 "req_ids");
    CHECK_REJECT(ak_block_table_build(ctx, &tr, NULL, &tk, &ts, 4, &tb), AK_ERR_INVALID_ARGUMENT,
                 "kv_start");
    int32_t three[3] = {4, 3, 1}, bt3[3 * 3];
    ak_tensor t3 = t1(three, 3), tb3 = t2(bt3, 3, 3);
    CHECK_REJECT(ak_block_table_build(ctx, &tr, NULL, NULL, &t3, 4, &tb3), AK_ERR_INVALID_ARGUMENT,
                 "req_ids NULL");
    CHECK_REJECT(ak_block_table_build(ctx, &tr, NULL, NULL, &ts, 0, &tb), AK_ERR_INVALID_ARGUMENT,
                 "page_size");
    CHECK_REJECT(ak_block_table_build(ctx, &tr, NULL, NULL, &ts, 1025, &tb),
                 AK_ERR_INVALID_ARGUMENT, "page_size");
    CHECK_REJECT(ak_block_table_build(ctx, NULL, NULL, NULL, &ts, 4, &tb), AK_ERR_INVALID_ARGUMENT,
                 "req_to_token");
    ak_tensor wrong_b = t2(bt, 3, 2);
    CHECK_REJECT(ak_block_table_build(ctx, &tr, NULL, NULL, &ts, 4, &wrong_b),
                 AK_ERR_INVALID_ARGUMENT, "block_table");
    ak_tensor f = ts;
    f.dtype = AK_DTYPE_F32;
    CHECK_REJECT(ak_block_table_build(ctx, &tr, NULL, NULL, &f, 4, &tb), AK_ERR_INVALID_ARGUMENT,
                 "seq_lens");
    /* negative lengths are empty requests */
    int32_t neg[2] = {-5, 0};
    ak_tensor tn = t1(neg, 2);
    CHECK_STATUS(ak_block_table_build(ctx, &tr, NULL, NULL, &tn, 4, &tb), AK_OK);
    for (int i = 0; i < 6; i++)
        CHECK(bt[i] == -1);
    ak_context_destroy(ctx);
}

AK_TEST(csr_all_page_sizes) {
    ak_rng r;
    ak_rng_init(&r, ak_test_seed() + 1);
    ak_context *ctx[2] = {ctx_make(1), ctx_make(2)};
    for (int ps = 0; ps < N_PAGE_SIZES; ps++) {
        int32_t P = k_page_sizes[ps];
        pool p = pool_make(&r, 6, P, P * 4 + 3, 2147483647LL / P);
        int64_t cap = 0;
        for (int64_t i = 0; i < p.b; i++)
            cap += (p.seq_lens[i] + P - 1) / P;
        cap += 5;
        int32_t *rp = ialloc(p.b + 1), *ri = ialloc(cap), *rl = ialloc(p.b);
        int32_t *gp = ialloc(p.b + 1), *gi = ialloc(cap), *gl = ialloc(p.b);
        CHECK(orc_csr(p.r2t, p.rows, p.max_ctx, p.req_ids, p.kv_start, p.seq_lens, p.b, P, rp, ri,
                      cap, rl) == ORC_PT_OK);
        ak_tensor r2t = t2(p.r2t, p.rows, p.max_ctx), ids = t1(p.req_ids, p.b),
                  ks = t1(p.kv_start, p.b), sl = t1(p.seq_lens, p.b), tp = t1(gp, p.b + 1),
                  ti = t1(gi, cap), tl = t1(gl, p.b);
        for (int c = 0; c < 2; c++) {
            poison(gp, p.b + 1);
            poison(gi, cap);
            poison(gl, p.b);
            CHECK_STATUS(ak_csr_build(ctx[c], &r2t, &ids, &ks, &sl, P, &tp, &ti, &tl), AK_OK);
            same(gp, rp, p.b + 1, "kv_indptr");
            same(gi, ri, cap, "kv_indices");
            same(gl, rl, p.b, "kv_last_page_len");
        }
        ak_tensor small = t1(gi, rp[p.b] - 1);
        if (rp[p.b] > 0)
            CHECK_REJECT(ak_csr_build(ctx[0], &r2t, &ids, &ks, &sl, P, &tp, &small, NULL),
                         AK_ERR_INVALID_ARGUMENT, "kv_indices");
        free(rp), free(ri), free(rl), free(gp), free(gi), free(gl);
        pool_free(&p);
    }
    ak_context_destroy(ctx[0]);
    ak_context_destroy(ctx[1]);
}

/* Random position lists with invalid and extreme values. */
static void fill_idx(ak_rng *r, int32_t *idx, int64_t n, int64_t max_pos) {
    static const int32_t odd[] = {-1, -2, -123456, INT32_MIN, INT32_MAX, 2147480000, 114514};
    for (int64_t i = 0; i < n; i++)
        idx[i] = ak_rng_range(r, 0, 6) == 0 ? odd[ak_rng_range(r, 0, 7)]
                                            : (int32_t)ak_rng_range(r, 0, max_pos);
}

AK_TEST(transforms_against_oracle) {
    ak_rng r;
    ak_rng_init(&r, ak_test_seed() + 2);
    ak_context *ctx[2] = {ctx_make(1), ctx_make(2)};
    for (int ps = 0; ps < N_PAGE_SIZES; ps++) {
        int32_t P = k_page_sizes[ps];
        int64_t b = 5, width = P == 1 ? 300 : 6, rows = 14, k = 37;
        int32_t *table = ialloc(b * width), *cuq = ialloc(b + 1), *cuk = ialloc(b + 1);
        for (int64_t i = 0; i < b * width; i++) {
            int64_t u = ak_rng_range(&r, 0, 10);
            /* valid ids, -1, other negatives, and page ids whose slots overflow int32 */
            table[i] = u < 6   ? (int32_t)ak_rng_range(&r, 0, 2147483647LL / P)
                       : u < 8 ? -1
                       : u < 9 ? -77
                               : INT32_MAX - 3;
        }
        cuq[0] = 0;
        cuk[0] = (int32_t)ak_rng_range(&r, 0, 50);
        for (int64_t i = 0; i < b; i++) {
            cuq[i + 1] = cuq[i] + (int32_t)ak_rng_range(&r, 0, 4); /* empty requests too */
            cuk[i + 1] = cuk[i] + (int32_t)ak_rng_range(&r, 0, 400);
        }
        int32_t *idx = ialloc(rows * k), *ref = ialloc(rows * k), *got = ialloc(rows * k);
        fill_idx(&r, idx, rows * k, width * P + 40); /* some positions past the table width */
        ak_tensor tt = t2(table, b, width), tq = t1(cuq, b + 1), tk = t1(cuk, b + 1),
                  ti = t2(idx, rows, k), to = t2(got, rows, k);
        for (int kind = 0; kind < 3; kind++)
            for (int with_q = 0; with_q < 2; with_q++) {
                ak_transform tf = {(ak_index_transform)kind, &tt, P, with_q ? &tq : NULL, &tk};
                orc_transform(kind, table, b, width, P, with_q ? cuq : NULL, cuk, idx, rows, k,
                              ref);
                for (int c = 0; c < 2; c++) {
                    poison(got, rows * k);
                    CHECK_STATUS(ak_topk_transform(ctx[c], &tf, &ti, &to), AK_OK);
                    same(got, ref, rows * k, "transform");
                }
                /* in place */
                int32_t *copy = ialloc(rows * k);
                memcpy(copy, idx, (size_t)(rows * k) * 4);
                ak_tensor tc = t2(copy, rows, k);
                CHECK_STATUS(ak_topk_transform(ctx[1], &tf, &tc, &tc), AK_OK);
                same(copy, ref, rows * k, "transform in place");
                free(copy);
            }
        free(table), free(cuq), free(cuk), free(idx), free(ref), free(got);
    }
    ak_context_destroy(ctx[0]);
    ak_context_destroy(ctx[1]);
}

AK_TEST(transform_corners_and_rejects) {
    ak_context *ctx = ctx_make(2);
    /* page size 64, pages 3 and 7; position 63 -> 255, 64 -> 448, 128 past the width -> -1 */
    int32_t table[2] = {3, 7}, idx[6] = {0, 63, 64, 127, 128, -1}, out[6];
    ak_tensor tt = t2(table, 1, 2), ti = t2(idx, 1, 6), to = t2(out, 1, 6);
    ak_transform tf = {AK_TRANSFORM_PAGED, &tt, 64, NULL, NULL};
    CHECK_STATUS(ak_topk_transform(ctx, &tf, &ti, &to), AK_OK);
    int32_t want[6] = {192, 255, 448, 511, -1, -1};
    same(out, want, 6, "page boundaries");
    /* all -1 stays all -1 */
    int32_t neg[6] = {-1, -1, -1, -1, -1, -1};
    ak_tensor tn = t2(neg, 1, 6);
    CHECK_STATUS(ak_topk_transform(ctx, &tf, &tn, &to), AK_OK);
    same(out, neg, 6, "all -1");
    /* rows with no request (no cu_seqlens_q, rows beyond B) are -1 */
    int32_t two[12] = {0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5}, out2[12];
    ak_tensor t2i = t2(two, 2, 6), t2o = t2(out2, 2, 6);
    CHECK_STATUS(ak_topk_transform(ctx, &tf, &t2i, &t2o), AK_OK);
    for (int j = 0; j < 6; j++)
        CHECK(out2[6 + j] == -1 && out2[j] == 192 + j);
    /* bad inputs */
    CHECK_REJECT(ak_topk_transform(ctx, NULL, &ti, &to), AK_ERR_INVALID_ARGUMENT, "tf");
    ak_transform bad = tf;
    bad.kind = (ak_index_transform)9;
    CHECK_REJECT(ak_topk_transform(ctx, &bad, &ti, &to), AK_ERR_INVALID_ARGUMENT, "kind");
    bad = tf;
    bad.table = NULL;
    CHECK_REJECT(ak_topk_transform(ctx, &bad, &ti, &to), AK_ERR_INVALID_ARGUMENT, "table");
    bad = tf;
    bad.page_size = 0;
    CHECK_REJECT(ak_topk_transform(ctx, &bad, &ti, &to), AK_ERR_INVALID_ARGUMENT, "page_size");
    int32_t cu_bad[2] = {3, 1};
    ak_tensor tcb = t1(cu_bad, 2);
    bad = tf;
    bad.cu_seqlens_q = &tcb;
    CHECK_REJECT(ak_topk_transform(ctx, &bad, &ti, &to), AK_ERR_INVALID_ARGUMENT, "cu_seqlens_q");
    ak_transform rg = {AK_TRANSFORM_RAGGED, NULL, 0, NULL, NULL};
    CHECK_REJECT(ak_topk_transform(ctx, &rg, &ti, &to), AK_ERR_INVALID_ARGUMENT, "cu_seqlens_k");
    rg.cu_seqlens_k = &tcb;
    CHECK_REJECT(ak_topk_transform(ctx, &rg, &ti, &to), AK_ERR_INVALID_ARGUMENT, "cu_seqlens_k");
    ak_tensor short_out = t2(out, 1, 5);
    CHECK_REJECT(ak_topk_transform(ctx, &tf, &ti, &short_out), AK_ERR_INVALID_ARGUMENT, "out");
    ak_context_destroy(ctx);
}

AK_TEST(swa_indices_against_oracle) {
    ak_rng r;
    ak_rng_init(&r, ak_test_seed() + 3);
    ak_context *ctx[2] = {ctx_make(1), ctx_make(2)};
    for (int ps = 0; ps < N_PAGE_SIZES; ps++) {
        int32_t P = k_page_sizes[ps], window = 128;
        int64_t b = 4, width = (400 + P - 1) / P, rows = 20;
        int32_t *table = ialloc(b * width), sl[4], cuq[5] = {0};
        for (int64_t i = 0; i < b * width; i++)
            table[i] = ak_rng_range(&r, 0, 8) == 0 ? -1 : (int32_t)ak_rng_range(&r, 0, 1 << 20);
        for (int64_t i = 0; i < b; i++) {
            int32_t q = (int32_t)ak_rng_range(&r, 0, 5);
            cuq[i + 1] = cuq[i] + q;
            sl[i] = q + (int32_t)ak_rng_range(&r, 0, i == 0 ? 3 : 400); /* short and long */
        }
        int32_t *ri = ialloc(rows * window), *rl = ialloc(rows), *gi = ialloc(rows * window),
                *gl = ialloc(rows);
        ak_tensor ts = t1(sl, b), tq = t1(cuq, b + 1), tt = t2(table, b, width),
                  ti = t2(gi, rows, window), tl = t1(gl, rows);
        for (int with_q = 0; with_q < 2; with_q++) {
            orc_swa_indices(sl, with_q ? cuq : NULL, b, table, width, P, window, ri, rl, rows);
            for (int c = 0; c < 2; c++) {
                poison(gi, rows * window);
                poison(gl, rows);
                CHECK_STATUS(
                    ak_dsv4_swa_indices(ctx[c], &ts, with_q ? &tq : NULL, &tt, P, window, &ti, &tl),
                    AK_OK);
                same(gi, ri, rows * window, "swa indices");
                same(gl, rl, rows, "swa lengths");
            }
        }
        CHECK_REJECT(ak_dsv4_swa_indices(ctx[0], &ts, &tq, &tt, P, 0, &ti, &tl),
                     AK_ERR_INVALID_ARGUMENT, "window");
        ak_tensor few = t2(gi, 1, window), fewl = t1(gl, 1);
        if (cuq[b] > 1)
            CHECK_REJECT(ak_dsv4_swa_indices(ctx[0], &ts, &tq, &tt, P, window, &few, &fewl),
                         AK_ERR_INVALID_ARGUMENT, "rows");
        free(table), free(ri), free(rl), free(gi), free(gl);
    }
    ak_context_destroy(ctx[0]);
    ak_context_destroy(ctx[1]);
}

AK_TEST(swa_indices_newest_first) {
    ak_context *ctx = ctx_make(1);
    /* one decode row at pos 2, token table P = 1: slots 10, 11, 12 newest first then -1 */
    int32_t sl[1] = {3}, table[4] = {10, 11, 12, 13}, idx[128], len[1];
    ak_tensor ts = t1(sl, 1), tt = t2(table, 1, 4), ti = t2(idx, 1, 128), tl = t1(len, 1);
    CHECK_STATUS(ak_dsv4_swa_indices(ctx, &ts, NULL, &tt, 1, 128, &ti, &tl), AK_OK);
    CHECK(idx[0] == 12 && idx[1] == 11 && idx[2] == 10 && idx[3] == -1 && idx[127] == -1);
    CHECK(len[0] == 3);
    /* a padding request with seq_len 0: all -1, length 0 */
    sl[0] = 0;
    CHECK_STATUS(ak_dsv4_swa_indices(ctx, &ts, NULL, &tt, 1, 128, &ti, &tl), AK_OK);
    CHECK(idx[0] == -1 && idx[127] == -1 && len[0] == 0);
    ak_context_destroy(ctx);
}

AK_TEST(combine_against_oracle) {
    ak_rng r;
    ak_rng_init(&r, ak_test_seed() + 4);
    ak_context *ctx[2] = {ctx_make(1), ctx_make(2)};
    const int32_t ratios[3] = {4, 128, 0};
    for (int ri_ = 0; ri_ < 3; ri_++)
        for (int use_raw = 0; use_raw < 2; use_raw++) {
            int32_t ratio = ratios[ri_], window = 128;
            if (ratio != 4 && use_raw) continue;
            int64_t b = 4;
            int32_t sl[4], cuq[5];
            cuq[0] = 1000; /* a global query_start_loc */
            int32_t max_sl = 0;
            for (int64_t i = 0; i < b; i++) {
                int32_t q = (int32_t)ak_rng_range(&r, 0, 6);
                cuq[i + 1] = cuq[i] + q;
                sl[i] = q + (int32_t)ak_rng_range(&r, 0, i == 1 ? 2 : 700);
                if (sl[i] > max_sl) max_sl = sl[i];
            }
            int32_t c_max = ratio ? (max_sl / ratio > 1 ? max_sl / ratio : 1) : 0;
            int32_t topk = ratio == 4 ? 96 : ratio == 128 ? c_max : 0;
            int64_t w = ((topk + window + 127) / 128) * 128, t_rows = cuq[b] - cuq[0] + 2;
            int32_t *raw = NULL;
            if (use_raw) {
                raw = ialloc(t_rows * topk);
                for (int64_t i = 0; i < t_rows * topk; i++)
                    raw[i] = ak_rng_range(&r, 0, 10) == 0 ? -1 : (int32_t)ak_rng_range(&r, 0, 200);
            }
            int32_t *ri = ialloc(t_rows * w), *rl = ialloc(t_rows), ro[5];
            int32_t *gi = ialloc(t_rows * w), *gl = ialloc(t_rows), go[5];
            orc_combine(raw, sl, cuq, b, ratio, topk, c_max, window, ri, w, rl, t_rows, ro);
            ak_tensor traw = t2(raw, t_rows, topk), ts = t1(sl, b), tq = t1(cuq, b + 1),
                      ti = t2(gi, t_rows, w), tl = t1(gl, t_rows), to = t1(go, b + 1);
            for (int c = 0; c < 2; c++) {
                poison(gi, t_rows * w);
                poison(gl, t_rows);
                poison(go, b + 1);
                CHECK_STATUS(ak_dsv4_combine_indices(ctx[c], use_raw ? &traw : NULL, &ts, &tq,
                                                     ratio, topk, c_max, window, &ti, &tl, &to),
                             AK_OK);
                same(gi, ri, t_rows * w, "combined indices");
                same(gl, rl, t_rows, "combined lengths");
                same(go, ro, b + 1, "swa_offsets");
            }
            if (ratio) {
                CHECK_REJECT(ak_dsv4_combine_indices(ctx[0], use_raw ? &traw : NULL, &ts, &tq,
                                                     ratio, topk, 0, window, &ti, &tl, &to),
                             AK_ERR_INVALID_ARGUMENT, "c_max");
            }
            free(raw), free(ri), free(rl), free(gi), free(gl);
        }
    ak_context_destroy(ctx[0]);
    ak_context_destroy(ctx[1]);
}

AK_TEST(combine_rejects) {
    ak_context *ctx = ctx_make(1);
    int32_t sl[1] = {10}, cuq[2] = {0, 2}, idx[2 * 256], len[2];
    ak_tensor ts = t1(sl, 1), tq = t1(cuq, 2), ti = t2(idx, 2, 256), tl = t1(len, 2);
    CHECK_REJECT(ak_dsv4_combine_indices(ctx, NULL, &ts, &tq, 3, 4, 4, 128, &ti, &tl, NULL),
                 AK_ERR_INVALID_ARGUMENT, "ratio");
    CHECK_REJECT(ak_dsv4_combine_indices(ctx, NULL, &ts, &tq, 4, 200, 4, 128, &ti, &tl, NULL),
                 AK_ERR_INVALID_ARGUMENT, "W");
    CHECK_REJECT(ak_dsv4_combine_indices(ctx, NULL, &ts, &tq, 0, 4, 0, 128, &ti, &tl, NULL),
                 AK_ERR_INVALID_ARGUMENT, "topk");
    CHECK_REJECT(ak_dsv4_combine_indices(ctx, NULL, &ts, &tq, 4, -1, 4, 128, &ti, &tl, NULL),
                 AK_ERR_INVALID_ARGUMENT, "topk");
    int32_t raw[2 * 3];
    ak_tensor tr = t2(raw, 2, 3);
    CHECK_REJECT(ak_dsv4_combine_indices(ctx, &tr, &ts, &tq, 4, 4, 4, 128, &ti, &tl, NULL),
                 AK_ERR_INVALID_ARGUMENT, "raw_topk");
    int32_t cu_bad[2] = {5, 0};
    ak_tensor tcb = t1(cu_bad, 2);
    CHECK_REJECT(ak_dsv4_combine_indices(ctx, NULL, &ts, &tcb, 4, 4, 4, 128, &ti, &tl, NULL),
                 AK_ERR_INVALID_ARGUMENT, "cu_seqlens_q");
    int32_t short_sl[1] = {1};
    ak_tensor tss = t1(short_sl, 1);
    CHECK_REJECT(ak_dsv4_combine_indices(ctx, NULL, &tss, &tq, 4, 4, 4, 128, &ti, &tl, NULL),
                 AK_ERR_INVALID_ARGUMENT, "seq_lens");
    ak_tensor tl_bad = t1(len, 1);
    CHECK_REJECT(ak_dsv4_combine_indices(ctx, NULL, &ts, &tq, 4, 4, 4, 128, &ti, &tl_bad, NULL),
                 AK_ERR_INVALID_ARGUMENT, "lengths");
    ak_context_destroy(ctx);
}

AK_TEST(combine_decode_rows_without_cu_seqlens) {
    ak_context *ctx = ctx_make(2);
    /* one row per request (q_len 1), C4 dense positions, W = 256 */
    int32_t sl[3] = {5, 300, 1}, c_max = 75, topk = 64, window = 128;
    int64_t w = 256, rows = 4; /* one padding row */
    int32_t ri[4 * 256], rl[4], ro[4], gi[4 * 256], gl[4], go[4];
    orc_combine(NULL, sl, NULL, 3, 4, topk, c_max, window, ri, w, rl, rows, ro);
    ak_tensor ts = t1(sl, 3), ti = t2(gi, rows, w), tl = t1(gl, rows), to = t1(go, 4);
    poison(gi, rows * w);
    CHECK_STATUS(
        ak_dsv4_combine_indices(ctx, NULL, &ts, NULL, 4, topk, c_max, window, &ti, &tl, &to),
        AK_OK);
    same(gi, ri, rows * w, "decode combined indices");
    same(gl, rl, rows, "decode combined lengths");
    same(go, ro, 4, "decode swa_offsets");
    /* request 1 at pos 299: 64 compressed entries (75 visible, topk 64), then 128 window rows */
    CHECK(gl[1] == 64 + 128 && gi[1 * 256] == 75 && gi[1 * 256 + 64] == 3 * 75 + 5);
    CHECK(gl[3] == 0 && gi[3 * 256] == -1);
    ak_context_destroy(ctx);
}
