/*
 * bench_builders.c -- `attnkit bench --op block_table|csr|transform|swa_indices|combine_indices`:
 * the page-table builders, the top-k transforms and the V4 index lists at the decode shape of the
 * targets (128 requests of 128k context, 64-token pages; top-k 2048; V4 256-token pages, window
 * 128, C4 top-k 512). Decode-path ops: timed by CUDA-graph replay on CUDA (the per-step metadata
 * is rebuilt inside the captured graph). Public API and devmem.h only.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "devmem.h"

typedef enum bb_kind { BB_BLOCK_TABLE, BB_CSR, BB_PAGED, BB_RAGGED, BB_SWA, BB_COMBINE } bb_kind;

typedef struct bb_state {
    bb_kind kind;
    void *mem[8];
    ak_tensor t[8]; /* inputs then outputs, per kind (see bb_setup) */
    ak_transform tf;
} bb_state;

enum { BB_B = 128, BB_CTX = 131072, BB_P = 64, BB_TOPK = 2048, BB_V4P = 256, BB_C4K = 512 };

/* Uploads n int32 values as tensor slot i of shape (nd, shape). */
static ak_status bb_put(ak_context *ctx, bb_state *s, int i, const int32_t *v, int32_t nd,
                        const int64_t *shape) {
    int64_t n = 1;
    for (int k = 0; k < nd; k++) n *= shape[k];
    s->mem[i] = ak_dev_alloc(ctx, (size_t)n * 4);
    if (s->mem[i] == NULL) return AK_ERR_OUT_OF_MEMORY;
    ak_status st = v != NULL ? ak_dev_upload(ctx, s->mem[i], v, (size_t)n * 4)
                             : ak_dev_memset(ctx, s->mem[i], 0xff, (size_t)n * 4);
    if (st != AK_OK) return st;
    s->t[i] = ak_dev_tensor(ctx, s->mem[i], AK_DTYPE_I32, nd, shape);
    return AK_OK;
}

static ak_status bb_run(ak_context *ctx, void *state) {
    bb_state *s = (bb_state *)state;
    ak_tensor *t = s->t;
    switch (s->kind) {
    case BB_BLOCK_TABLE: return ak_block_table_build(ctx, &t[0], NULL, NULL, &t[1], BB_P, &t[2]);
    case BB_CSR: return ak_csr_build(ctx, &t[0], NULL, NULL, &t[1], BB_P, &t[2], &t[3], &t[4]);
    case BB_PAGED:
    case BB_RAGGED: return ak_topk_transform(ctx, &s->tf, &t[0], &t[1]);
    case BB_SWA: return ak_dsv4_swa_indices(ctx, &t[0], NULL, &t[1], BB_V4P, 128, &t[2], &t[3]);
    default:
        return ak_dsv4_combine_indices(ctx, &t[0], &t[1], &t[2], 4, BB_C4K, BB_CTX / 4, 128, &t[3],
                                       &t[4], &t[5]);
    }
}

static void bb_destroy(ak_context *ctx, void *state) {
    bb_state *s = (bb_state *)state;
    for (int i = 0; i < 8; i++) ak_dev_free(ctx, s->mem[i]);
    free(s);
}

/* Builds the inputs of one case on the device. */
static ak_status bb_setup(ak_context *ctx, bb_state *s, uint64_t seed) {
    ak_status st = AK_OK;
    int32_t lens[BB_B];
    for (int b = 0; b < BB_B; b++) lens[b] = BB_CTX - (int32_t)((seed + 977u * (uint64_t)b) % 4096);
    int64_t bs[1] = {BB_B}, bs1[1] = {BB_B + 1};
    if (s->kind == BB_BLOCK_TABLE || s->kind == BB_CSR) {
        /* request b owns pages b * 2048 ... in order: a valid, page-aligned token table */
        int64_t n = (int64_t)BB_B * BB_CTX;
        int32_t *r2t = (int32_t *)malloc((size_t)n * 4);
        if (r2t == NULL) return AK_ERR_OUT_OF_MEMORY;
        for (int64_t i = 0; i < n; i++) r2t[i] = (int32_t)i;
        int64_t rs[2] = {BB_B, BB_CTX};
        st = bb_put(ctx, s, 0, r2t, 2, rs);
        free(r2t);
        if (st == AK_OK) st = bb_put(ctx, s, 1, lens, 1, bs);
        int64_t w[2] = {BB_B, BB_CTX / BB_P};
        if (st == AK_OK && s->kind == BB_BLOCK_TABLE) st = bb_put(ctx, s, 2, NULL, 2, w);
        if (st == AK_OK && s->kind == BB_CSR) {
            int64_t cap[1] = {(int64_t)BB_B * (BB_CTX / BB_P)};
            st = bb_put(ctx, s, 2, NULL, 1, bs1);
            if (st == AK_OK) st = bb_put(ctx, s, 3, NULL, 1, cap);
            if (st == AK_OK) st = bb_put(ctx, s, 4, NULL, 1, bs);
        }
        return st;
    }
    if (s->kind == BB_PAGED || s->kind == BB_RAGGED) {
        int64_t n = (int64_t)BB_B * BB_TOPK, tw = BB_CTX / BB_P;
        int32_t *idx = (int32_t *)malloc((size_t)n * 4), *tab = (int32_t *)malloc((size_t)(BB_B * tw) * 4);
        int32_t cuk[BB_B + 1];
        if (idx == NULL || tab == NULL) st = AK_ERR_OUT_OF_MEMORY;
        for (int64_t i = 0; i < n && st == AK_OK; i++) idx[i] = (int32_t)((i * 2654435761u + seed) % BB_CTX);
        for (int64_t i = 0; i < BB_B * tw && st == AK_OK; i++) tab[i] = (int32_t)i;
        cuk[0] = 0;
        for (int b = 0; b < BB_B; b++) cuk[b + 1] = cuk[b] + lens[b];
        int64_t is[2] = {BB_B, BB_TOPK}, ts[2] = {BB_B, tw};
        if (st == AK_OK) st = bb_put(ctx, s, 0, idx, 2, is);
        if (st == AK_OK) st = bb_put(ctx, s, 1, NULL, 2, is);
        if (st == AK_OK) st = bb_put(ctx, s, 2, tab, 2, ts);
        if (st == AK_OK) st = bb_put(ctx, s, 3, cuk, 1, bs1);
        memset(&s->tf, 0, sizeof s->tf);
        s->tf.kind = s->kind == BB_PAGED ? AK_TRANSFORM_PAGED : AK_TRANSFORM_RAGGED;
        s->tf.table = &s->t[2];
        s->tf.page_size = BB_P;
        s->tf.cu_seqlens_k = &s->t[3];
        free(idx);
        free(tab);
        return st;
    }
    if (s->kind == BB_SWA) {
        int64_t tw = BB_CTX / BB_V4P;
        int32_t *tab = (int32_t *)malloc((size_t)(BB_B * tw) * 4);
        if (tab == NULL) return AK_ERR_OUT_OF_MEMORY;
        for (int64_t i = 0; i < BB_B * tw; i++) tab[i] = (int32_t)i;
        int64_t ts[2] = {BB_B, tw}, is[2] = {BB_B, 128};
        st = bb_put(ctx, s, 0, lens, 1, bs);
        if (st == AK_OK) st = bb_put(ctx, s, 1, tab, 2, ts);
        if (st == AK_OK) st = bb_put(ctx, s, 2, NULL, 2, is);
        if (st == AK_OK) st = bb_put(ctx, s, 3, NULL, 1, bs);
        free(tab);
        return st;
    }
    /* combine: one decode row per request, C4 raw top-k over the visible compressed entries */
    int32_t *raw = (int32_t *)malloc((size_t)BB_B * BB_C4K * 4), cu[BB_B + 1];
    if (raw == NULL) return AK_ERR_OUT_OF_MEMORY;
    for (int64_t i = 0; i < (int64_t)BB_B * BB_C4K; i++) raw[i] = (int32_t)((i * 40503u + seed) % (BB_CTX / 8));
    for (int b = 0; b <= BB_B; b++) cu[b] = b;
    int64_t rs[2] = {BB_B, BB_C4K}, is[2] = {BB_B, BB_C4K + 128};
    st = bb_put(ctx, s, 0, raw, 2, rs);
    if (st == AK_OK) st = bb_put(ctx, s, 1, lens, 1, bs);
    if (st == AK_OK) st = bb_put(ctx, s, 2, cu, 1, bs1);
    if (st == AK_OK) st = bb_put(ctx, s, 3, NULL, 2, is);
    if (st == AK_OK) st = bb_put(ctx, s, 4, NULL, 1, bs);
    if (st == AK_OK) st = bb_put(ctx, s, 5, NULL, 1, bs1);
    free(raw);
    return st;
}

ak_status ak_bench_builders(ak_context *ctx, const ak_bench_opts *o, const char *op,
                            ak_bench_list *out) {
    static const struct { const char *op; bb_kind kind; const char *shape; double bytes; } cases[] = {
        {"block_table", BB_BLOCK_TABLE, "B 128, ctx 128k, P 64 -> [128, 2048]",
         128.0 * 2048 * 8 + 128 * 4},
        {"csr", BB_CSR, "B 128, ctx 128k, P 64 -> 262144 pages", 128.0 * 2048 * 8 + 128 * 12},
        {"transform", BB_PAGED, "PAGED P 64, 128 rows x top-k 2048", 128.0 * 2048 * 12},
        {"transform", BB_RAGGED, "RAGGED, 128 rows x top-k 2048", 128.0 * 2048 * 8},
        {"swa_indices", BB_SWA, "V4 decode B 128, ctx 128k, P 256, window 128", 128.0 * 128 * 8},
        {"combine_indices", BB_COMBINE, "V4 C4 decode B 128, top-k 512, window 128",
         128.0 * 512 * 4 + 128.0 * 640 * 4},
    };
    uint64_t seed = o->seed ? o->seed : 1234;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (!ak_bench_wants(op, cases[i].op)) continue;
        bb_state *s = (bb_state *)calloc(1, sizeof *s);
        if (s == NULL) return AK_ERR_OUT_OF_MEMORY;
        s->kind = cases[i].kind;
        ak_status st = bb_setup(ctx, s, seed + i);
        if (st != AK_OK) {
            bb_destroy(ctx, s);
            return st;
        }
        ak_bench_case c;
        memset(&c, 0, sizeof c);
        snprintf(c.op, sizeof c.op, "%s", cases[i].op);
        snprintf(c.shape, sizeof c.shape, "%s", cases[i].shape);
        c.bytes_total = cases[i].bytes;
        c.graph = 1;
        c.state = s;
        c.run = bb_run;
        c.destroy = bb_destroy;
        st = ak_bench_add(out, &c);
        if (st != AK_OK) {
            bb_destroy(ctx, s);
            return st;
        }
    }
    return AK_OK;
}
AK_BENCH_REGISTER(ak_bench_builders)
