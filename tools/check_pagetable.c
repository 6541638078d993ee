/*
 * check_pagetable.c -- `attnkit check` runner for the page-table builders, the index transforms
 * and the V4 index lists: ops "block_table", "csr", "transform", "swa_indices",
 * "combine_indices". Integer maps, so test and reference must match exactly. Public API and
 * devmem.h only, so the same runner checks the CUDA backend.
 */
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

/* One host buffer staged on a context: inputs are copied, outputs are filled with 0x5a. */
typedef struct ck_buf {
    void *host; /* inputs: the data; outputs: receives the result */
    int32_t ndim;
    int64_t shape[2];
    int32_t out;
    void *dev;
    ak_tensor t;
} ck_buf;

static int64_t ck_numel(const ck_buf *b) {
    return b->ndim == 1 ? b->shape[0] : b->shape[0] * b->shape[1];
}

static ak_status ck_stage(ak_context *ctx, ck_buf *b, int n) {
    for (int i = 0; i < n; i++) {
        size_t bytes = (size_t)(ck_numel(&b[i]) > 0 ? ck_numel(&b[i]) : 1) * 4;
        b[i].dev = b[i].out ? ak_dev_alloc(ctx, bytes) : ak_dev_clone(ctx, b[i].host, bytes);
        if (b[i].dev == NULL) return AK_ERR_OUT_OF_MEMORY;
        if (b[i].out) CK_TRY(ak_dev_memset(ctx, b[i].dev, 0x5a, bytes));
        b[i].t = ak_dev_tensor(ctx, b[i].dev, AK_DTYPE_I32, b[i].ndim, b[i].shape);
    }
    return AK_OK;
}

static ak_status ck_fetch_free(ak_context *ctx, ck_buf *b, int n, ak_status s) {
    for (int i = 0; i < n; i++) {
        if (s == AK_OK && b[i].out)
            s = ak_dev_download(ctx, b[i].host, b[i].dev, (size_t)ck_numel(&b[i]) * 4);
        ak_dev_free(ctx, b[i].dev);
        b[i].dev = NULL;
    }
    return s;
}

static uint64_t ck_next(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}

/* Compares the outputs of two staged runs; adds one result line. */
static void ck_report(ak_check_report *rep, const char *op, const char *shape, ak_status sr,
                      ak_status st, ck_buf *ref, ck_buf *test, int n) {
    ak_check_result res;
    memset(&res, 0, sizeof res);
    snprintf(res.op, sizeof res.op, "%s", op);
    snprintf(res.shape, sizeof res.shape, "%s", shape);
    res.passed = 1;
    if (sr != AK_OK || st != AK_OK) {
        res.passed = 0;
        snprintf(res.note, sizeof res.note, "status ref %s, test %s: %s", ak_status_name(sr),
                 ak_status_name(st), ak_last_error());
    } else {
        for (int i = 0; i < n && res.passed; i++)
            if (ref[i].out)
                ak_check_compare_bytes(test[i].host, ref[i].host, (size_t)ck_numel(&ref[i]) * 4,
                                       &res);
        if (res.passed) snprintf(res.note, sizeof res.note, "exact");
    }
    ak_check_report_add(rep, &res);
}

/* A token pool of b requests with page-contiguous allocations (shuffled page ids). */
typedef struct ck_pool {
    int64_t b, max_ctx;
    int32_t *r2t, *lens;
} ck_pool;

static ck_pool ck_pool_make(uint64_t *rng, int64_t b, int32_t page, int32_t max_len) {
    ck_pool p = {b, max_len, NULL, NULL};
    p.r2t = (int32_t *)malloc((size_t)(b * max_len) * 4);
    p.lens = (int32_t *)malloc((size_t)b * 4);
    int64_t pages_per = (max_len + page - 1) / page, next = 0;
    for (int64_t i = 0; i < b * max_len; i++)
        p.r2t[i] = -1;
    for (int64_t r = 0; r < b; r++) {
        p.lens[r] = r % 5 == 3 ? 0 : (int32_t)(ck_next(rng) % (uint64_t)(max_len + 1));
        for (int64_t pos = 0; pos < p.lens[r]; pos++) {
            int64_t pg = (next + (pos / page) * 7919) % (b * pages_per); /* scattered, unique */
            p.r2t[r * max_len + pos] = (int32_t)(pg * page + pos % page);
        }
        next += pages_per;
    }
    return p;
}

static ak_status check_builders(ak_context *ref, ak_context *test, const ak_check_opts *o,
                                ak_check_report *rep) {
    static const int32_t pages_full[4] = {1, 63, 64, 256}, pages_quick[2] = {1, 64};
    const int32_t *pages = o->quick ? pages_quick : pages_full;
    int np = o->quick ? 2 : 4;
    for (int pi = 0; pi < np; pi++) {
        int32_t P = pages[pi];
        uint64_t rng = o->seed + (uint64_t)P;
        int64_t b = 16;
        int32_t max_len = 3000;
        ck_pool pool = ck_pool_make(&rng, b, P, max_len);
        int64_t mp = (max_len + P - 1) / P, cap = b * mp + 7;
        char shape[200];
        if (ak_check_wants(rep, "block_table")) {
            snprintf(shape, sizeof shape, "B %lld, page %d, max_pages %lld", (long long)b, (int)P,
                     (long long)mp);
            int32_t *o1 = (int32_t *)malloc((size_t)(b * mp) * 4),
                    *o2 = (int32_t *)malloc((size_t)(b * mp) * 4);
            ck_buf br[3] = {
                {pool.r2t, 2, {b, max_len}, 0}, {pool.lens, 1, {b}, 0}, {o1, 2, {b, mp}, 1}};
            ck_buf bt[3] = {
                {pool.r2t, 2, {b, max_len}, 0}, {pool.lens, 1, {b}, 0}, {o2, 2, {b, mp}, 1}};
            ak_status sr = ck_stage(ref, br, 3), st = ck_stage(test, bt, 3);
            if (sr == AK_OK)
                sr = ak_block_table_build(ref, &br[0].t, NULL, NULL, &br[1].t, P, &br[2].t);
            if (st == AK_OK)
                st = ak_block_table_build(test, &bt[0].t, NULL, NULL, &bt[1].t, P, &bt[2].t);
            sr = ck_fetch_free(ref, br, 3, sr);
            st = ck_fetch_free(test, bt, 3, st);
            ck_report(rep, "block_table", shape, sr, st, br, bt, 3);
            free(o1), free(o2);
        }
        if (ak_check_wants(rep, "csr")) {
            snprintf(shape, sizeof shape, "B %lld, page %d, capacity %lld", (long long)b, (int)P,
                     (long long)cap);
            int32_t *h[6];
            for (int i = 0; i < 6; i++)
                h[i] = (int32_t *)malloc((size_t)cap * 4);
            ck_buf br[5] = {{pool.r2t, 2, {b, max_len}, 0},
                            {pool.lens, 1, {b}, 0},
                            {h[0], 1, {b + 1}, 1},
                            {h[1], 1, {cap}, 1},
                            {h[2], 1, {b}, 1}};
            ck_buf bt[5] = {{pool.r2t, 2, {b, max_len}, 0},
                            {pool.lens, 1, {b}, 0},
                            {h[3], 1, {b + 1}, 1},
                            {h[4], 1, {cap}, 1},
                            {h[5], 1, {b}, 1}};
            ak_status sr = ck_stage(ref, br, 5), st = ck_stage(test, bt, 5);
            if (sr == AK_OK)
                sr = ak_csr_build(ref, &br[0].t, NULL, NULL, &br[1].t, P, &br[2].t, &br[3].t,
                                  &br[4].t);
            if (st == AK_OK)
                st = ak_csr_build(test, &bt[0].t, NULL, NULL, &bt[1].t, P, &bt[2].t, &bt[3].t,
                                  &bt[4].t);
            sr = ck_fetch_free(ref, br, 5, sr);
            st = ck_fetch_free(test, bt, 5, st);
            ck_report(rep, "csr", shape, sr, st, br, bt, 5);
            for (int i = 0; i < 6; i++)
                free(h[i]);
        }
        free(pool.r2t), free(pool.lens);
    }
    return AK_OK;
}

static ak_status check_transform(ak_context *ref, ak_context *test, const ak_check_opts *o,
                                 ak_check_report *rep) {
    static const int32_t odd[5] = {-1, -2, INT32_MIN, INT32_MAX, 2147480000};
    for (int kind = 1; kind <= 2; kind++)
        for (int P = 1; P <= 64; P *= 64) {
            if (kind == 2 && P != 1) continue;
            uint64_t rng = o->seed + (uint64_t)(kind * 100 + P);
            int64_t b = 6, rows = 40, k = o->quick ? 64 : 512, width = P == 1 ? 4096 : 64;
            int32_t *table = (int32_t *)malloc((size_t)(b * width) * 4), cuq[7], cuk[7];
            for (int64_t i = 0; i < b * width; i++)
                table[i] = ck_next(&rng) % 9 == 0 ? -1 : (int32_t)(ck_next(&rng) % (1u << 24));
            cuq[0] = 0, cuk[0] = 0;
            for (int i = 0; i < b; i++) {
                cuq[i + 1] = cuq[i] + (int32_t)(ck_next(&rng) % 8); /* some empty requests */
                cuk[i + 1] = cuk[i] + (int32_t)(ck_next(&rng) % 5000);
            }
            int32_t *idx = (int32_t *)malloc((size_t)(rows * k) * 4);
            for (int64_t i = 0; i < rows * k; i++)
                idx[i] = ck_next(&rng) % 8 == 0
                             ? odd[ck_next(&rng) % 5]
                             : (int32_t)(ck_next(&rng) % (uint64_t)(width * P + 100));
            int32_t *o1 = (int32_t *)malloc((size_t)(rows * k) * 4),
                    *o2 = (int32_t *)malloc((size_t)(rows * k) * 4);
            ck_buf br[5] = {{table, 2, {b, width}, 0},
                            {cuq, 1, {b + 1}, 0},
                            {cuk, 1, {b + 1}, 0},
                            {idx, 2, {rows, k}, 0},
                            {o1, 2, {rows, k}, 1}};
            ck_buf bt[5] = {{table, 2, {b, width}, 0},
                            {cuq, 1, {b + 1}, 0},
                            {cuk, 1, {b + 1}, 0},
                            {idx, 2, {rows, k}, 0},
                            {o2, 2, {rows, k}, 1}};
            ak_status sr = ck_stage(ref, br, 5), st = ck_stage(test, bt, 5);
            ak_transform tr = {(ak_index_transform)kind, &br[0].t, P, &br[1].t, &br[2].t};
            ak_transform tt = {(ak_index_transform)kind, &bt[0].t, P, &bt[1].t, &bt[2].t};
            if (sr == AK_OK) sr = ak_topk_transform(ref, &tr, &br[3].t, &br[4].t);
            if (st == AK_OK) st = ak_topk_transform(test, &tt, &bt[3].t, &bt[4].t);
            sr = ck_fetch_free(ref, br, 5, sr);
            st = ck_fetch_free(test, bt, 5, st);
            char shape[200];
            snprintf(shape, sizeof shape, "%s, page %d, rows %lld, k %lld, B %lld",
                     kind == 1 ? "PAGED" : "RAGGED", (int)P, (long long)rows, (long long)k,
                     (long long)b);
            ck_report(rep, "transform", shape, sr, st, br, bt, 5);
            free(table), free(idx), free(o1), free(o2);
        }
    return AK_OK;
}

static ak_status check_v4(ak_context *ref, ak_context *test, const ak_check_opts *o,
                          ak_check_report *rep) {
    uint64_t rng = o->seed + 77;
    int64_t b = 8;
    int32_t sl[8], cuq[9] = {0}, max_sl = 0;
    for (int i = 0; i < b; i++) {
        int32_t q = (int32_t)(ck_next(&rng) % 6);
        cuq[i + 1] = cuq[i] + q;
        sl[i] = q + (int32_t)(ck_next(&rng) % (i == 0 ? 3 : 3000));
        if (sl[i] > max_sl) max_sl = sl[i];
    }
    int64_t rows = cuq[b] + 3;
    char shape[200];
    if (ak_check_wants(rep, "swa_indices")) {
        static const int32_t pages[2] = {256, 64};
        for (int pi = 0; pi < 2; pi++) {
            int32_t P = pages[pi];
            int64_t width = (max_sl + P - 1) / P + 1;
            int32_t *table = (int32_t *)malloc((size_t)(b * width) * 4);
            for (int64_t i = 0; i < b * width; i++)
                table[i] = ck_next(&rng) % 11 == 0 ? -1 : (int32_t)(ck_next(&rng) % 5000);
            int32_t *h[4];
            for (int i = 0; i < 4; i++)
                h[i] = (int32_t *)malloc((size_t)(rows * 128) * 4);
            ck_buf br[5] = {{sl, 1, {b}, 0},
                            {cuq, 1, {b + 1}, 0},
                            {table, 2, {b, width}, 0},
                            {h[0], 2, {rows, 128}, 1},
                            {h[1], 1, {rows}, 1}};
            ck_buf bt[5] = {{sl, 1, {b}, 0},
                            {cuq, 1, {b + 1}, 0},
                            {table, 2, {b, width}, 0},
                            {h[2], 2, {rows, 128}, 1},
                            {h[3], 1, {rows}, 1}};
            ak_status sr = ck_stage(ref, br, 5), st = ck_stage(test, bt, 5);
            if (sr == AK_OK)
                sr = ak_dsv4_swa_indices(ref, &br[0].t, &br[1].t, &br[2].t, P, 128, &br[3].t,
                                         &br[4].t);
            if (st == AK_OK)
                st = ak_dsv4_swa_indices(test, &bt[0].t, &bt[1].t, &bt[2].t, P, 128, &bt[3].t,
                                         &bt[4].t);
            sr = ck_fetch_free(ref, br, 5, sr);
            st = ck_fetch_free(test, bt, 5, st);
            snprintf(shape, sizeof shape, "B %lld, rows %lld, page %d, window 128", (long long)b,
                     (long long)rows, (int)P);
            ck_report(rep, "swa_indices", shape, sr, st, br, bt, 5);
            for (int i = 0; i < 4; i++)
                free(h[i]);
            free(table);
        }
    }
    if (ak_check_wants(rep, "combine_indices")) {
        static const int32_t ratios[3] = {4, 128, 0};
        for (int ri = 0; ri < 3; ri++) {
            int32_t ratio = ratios[ri];
            int32_t c_max = ratio ? (max_sl / ratio > 1 ? max_sl / ratio : 1) : 0;
            int32_t topk = ratio == 4 ? 512 : ratio == 128 ? c_max : 0;
            int64_t w = ((int64_t)topk + 128 + 127) / 128 * 128, rk = topk > 0 ? topk : 1;
            int32_t *raw = (int32_t *)malloc((size_t)(rows * rk) * 4);
            for (int64_t i = 0; i < rows * rk; i++)
                raw[i] = (int32_t)(ck_next(&rng) % (uint64_t)(c_max + 2)) - 1;
            int32_t *h[6];
            for (int i = 0; i < 6; i++)
                h[i] = (int32_t *)malloc((size_t)(rows * w + b + 1) * 4);
            ck_buf br[6] = {{raw, 2, {rows, rk}, 0}, {sl, 1, {b}, 0},      {cuq, 1, {b + 1}, 0},
                            {h[0], 2, {rows, w}, 1}, {h[1], 1, {rows}, 1}, {h[2], 1, {b + 1}, 1}};
            ck_buf bt[6] = {{raw, 2, {rows, rk}, 0}, {sl, 1, {b}, 0},      {cuq, 1, {b + 1}, 0},
                            {h[3], 2, {rows, w}, 1}, {h[4], 1, {rows}, 1}, {h[5], 1, {b + 1}, 1}};
            ak_status sr = ck_stage(ref, br, 6), st = ck_stage(test, bt, 6);
            const ak_tensor *rr = ratio == 4 ? &br[0].t : NULL, *rt = ratio == 4 ? &bt[0].t : NULL;
            if (sr == AK_OK)
                sr = ak_dsv4_combine_indices(ref, rr, &br[1].t, &br[2].t, ratio, topk, c_max, 128,
                                             &br[3].t, &br[4].t, &br[5].t);
            if (st == AK_OK)
                st = ak_dsv4_combine_indices(test, rt, &bt[1].t, &bt[2].t, ratio, topk, c_max, 128,
                                             &bt[3].t, &bt[4].t, &bt[5].t);
            sr = ck_fetch_free(ref, br, 6, sr);
            st = ck_fetch_free(test, bt, 6, st);
            snprintf(shape, sizeof shape, "B %lld, rows %lld, ratio %d, topk %d, c_max %d, W %lld",
                     (long long)b, (long long)rows, (int)ratio, (int)topk, (int)c_max,
                     (long long)w);
            ck_report(rep, "combine_indices", shape, sr, st, br, bt, 6);
            for (int i = 0; i < 6; i++)
                free(h[i]);
            free(raw);
        }
    }
    return AK_OK;
}

ak_status ak_check_pagetable(ak_context *ref, ak_context *test, const ak_check_opts *o,
                             ak_check_report *rep) {
    if (ak_check_wants(rep, "block_table") || ak_check_wants(rep, "csr"))
        CK_TRY(check_builders(ref, test, o, rep));
    if (ak_check_wants(rep, "transform")) CK_TRY(check_transform(ref, test, o, rep));
    if (ak_check_wants(rep, "swa_indices") || ak_check_wants(rep, "combine_indices"))
        CK_TRY(check_v4(ref, test, o, rep));
    return AK_OK;
}
AK_CHECK_REGISTER(ak_check_pagetable)
