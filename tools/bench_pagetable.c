/*
 * bench_pagetable.c -- `attnkit bench` cases for the page-table builders, the index transforms,
 * the V4 index lists (128 requests of 128k context; targets.md: builders under 10 us on a GPU),
 * and the lightning indexer and top-k at the DeepSeek V3.2 decode shape (64 index heads, k 2048,
 * B 8..128, context 32k..128k). Bytes are what the op must read plus what it writes (the CPU
 * builders also re-read every token id to validate the table; that traffic is not counted).
 * Public API and devmem.h only, so the cases run on any backend; an op the backend does not
 * support (AK_ERR_UNSUPPORTED on a probe call) is left out.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnkit.h"
#include "bench.h"
#include "devmem.h"

#define PB_MAX_BUFS 8

typedef enum pb_kind {
    PB_BLOCK_TABLE,
    PB_CSR,
    PB_TRANSFORM,
    PB_SWA,
    PB_COMBINE,
    PB_INDEXER_PAGED,
    PB_TOPK
} pb_kind;

/* A case's device buffers and the scalars of its call. */
typedef struct pb_state {
    pb_kind kind;
    void *dev[PB_MAX_BUFS];
    ak_tensor t[PB_MAX_BUFS];
    int32_t nbuf;
    int32_t page_size, ratio, topk, c_max, k;
    ak_transform tf;
    ak_cache cache;
} pb_state;

static uint64_t pb_next(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}

/* Adds buffer i: a device copy of host (then freed), or zero-filled when host is NULL. */
static ak_status pb_buf(ak_context *ctx, pb_state *s, void *host, ak_dtype dt, int32_t ndim,
                        int64_t d0, int64_t d1, int64_t d2, int64_t d3) {
    int64_t shape[4] = {d0, d1, d2, d3}, n = 1;
    for (int i = 0; i < ndim; i++)
        n *= shape[i];
    size_t bytes = (size_t)(n > 0 ? n : 1) * (size_t)ak_dtype_size(dt);
    int32_t i = s->nbuf++;
    int zero = host == NULL;
    s->dev[i] = host ? ak_dev_clone(ctx, host, bytes) : ak_dev_alloc(ctx, bytes);
    free(host);
    if (s->dev[i] == NULL) return AK_ERR_OUT_OF_MEMORY;
    if (zero) {
        ak_status st = ak_dev_memset(ctx, s->dev[i], 0, bytes);
        if (st != AK_OK) return st;
    }
    s->t[i] = ak_dev_tensor(ctx, s->dev[i], dt, ndim, shape);
    return AK_OK;
}

static ak_status pb_run(ak_context *ctx, void *state) {
    pb_state *s = (pb_state *)state;
    ak_tensor *t = s->t;
    switch (s->kind) {
    case PB_BLOCK_TABLE:
        return ak_block_table_build(ctx, &t[0], NULL, NULL, &t[1], s->page_size, &t[2]);
    case PB_CSR:
        return ak_csr_build(ctx, &t[0], NULL, NULL, &t[1], s->page_size, &t[2], &t[3], &t[4]);
    case PB_TRANSFORM: return ak_topk_transform(ctx, &s->tf, &t[0], &t[1]);
    case PB_SWA:
        return ak_dsv4_swa_indices(ctx, &t[0], NULL, &t[1], s->page_size, 128, &t[2], &t[3]);
    case PB_COMBINE:
        return ak_dsv4_combine_indices(ctx, &t[0], &t[1], &t[2], s->ratio, s->topk, s->c_max, 128,
                                       &t[3], &t[4], &t[5]);
    case PB_INDEXER_PAGED:
        return ak_indexer_logits_paged(ctx, &t[0], &t[1], &s->cache, &t[3], &t[4], 0, &t[5]);
    case PB_TOPK: return ak_topk(ctx, &t[0], &t[1], NULL, s->k, 0, &s->tf, &t[2]);
    }
    return AK_ERR_INTERNAL;
}

static void pb_destroy(ak_context *ctx, void *state) {
    pb_state *s = (pb_state *)state;
    for (int32_t i = 0; i < s->nbuf; i++)
        ak_dev_free(ctx, s->dev[i]);
    free(s);
}

/* Probes the case once and adds it (or drops it when the backend has no kernel for it). */
static ak_status pb_add(ak_context *ctx, ak_bench_list *out, pb_state *s, const char *op,
                        const char *shape, double flops, double bytes_kv, double bytes_total,
                        int32_t graph) {
    ak_status st = pb_run(ctx, s);
    if (st == AK_OK) st = ak_context_synchronize(ctx);
    if (st != AK_OK) {
        pb_destroy(ctx, s);
        return st == AK_ERR_UNSUPPORTED ? AK_OK : st;
    }
    ak_bench_case c;
    memset(&c, 0, sizeof c);
    snprintf(c.op, sizeof c.op, "%s", op);
    snprintf(c.shape, sizeof c.shape, "%s", shape);
    c.flops = flops;
    c.bytes_kv = bytes_kv;
    c.bytes_total = bytes_total;
    c.graph = graph;
    c.state = s;
    c.run = pb_run;
    c.destroy = pb_destroy;
    return ak_bench_add(out, &c);
}

#define PB_RET(expr)                                                                               \
    do {                                                                                           \
        ak_status pb_r_ = (expr);                                                                  \
        if (pb_r_ != AK_OK) return pb_r_;                                                          \
    } while (0)

/* For a case under construction: frees it on failure. */
#define PB_TRY(expr)                                                                               \
    do {                                                                                           \
        ak_status pb_s_ = (expr);                                                                  \
        if (pb_s_ != AK_OK) {                                                                      \
            pb_destroy(ctx, s);                                                                    \
            return pb_s_;                                                                          \
        }                                                                                          \
    } while (0)

static pb_state *pb_new(pb_kind kind) {
    pb_state *s = (pb_state *)calloc(1, sizeof(pb_state));
    if (s) s->kind = kind;
    return s;
}

/* req_to_token [b, ctx_len] int32: every request full, pages of `page` slots scattered. */
static int32_t *pb_token_table(int64_t b, int64_t ctx_len, int32_t page, uint64_t *rng) {
    int32_t *r2t = (int32_t *)malloc((size_t)(b * ctx_len) * 4);
    int64_t pages = ctx_len / page, total = b * pages;
    for (int64_t r = 0; r < b; r++)
        for (int64_t p = 0; p < pages; p++) {
            int64_t pg = (r * pages + p * 7919 + (int64_t)(pb_next(rng) % 2)) % total;
            for (int32_t o = 0; o < page; o++)
                r2t[(r * ctx_len) + p * page + o] = (int32_t)(pg * page + o);
        }
    return r2t;
}

static int32_t *pb_fill_i32(int64_t n, int32_t v) {
    int32_t *p = (int32_t *)malloc((size_t)(n > 0 ? n : 1) * 4);
    for (int64_t i = 0; i < n; i++)
        p[i] = v;
    return p;
}

static ak_status pb_builders(ak_context *ctx, const ak_bench_opts *o, const char *op,
                             ak_bench_list *out) {
    int64_t b = o->quick ? 16 : 128, ctx_len = o->quick ? 8192 : 131072;
    uint64_t rng = o->seed;
    char shape[200];
    if (ak_bench_wants(op, "block_table")) {
        int32_t P = 64;
        int64_t mp = ctx_len / P;
        pb_state *s = pb_new(PB_BLOCK_TABLE);
        if (!s) return AK_ERR_OUT_OF_MEMORY;
        s->page_size = P;
        PB_TRY(
            pb_buf(ctx, s, pb_token_table(b, ctx_len, P, &rng), AK_DTYPE_I32, 2, b, ctx_len, 0, 0));
        PB_TRY(pb_buf(ctx, s, pb_fill_i32(b, (int32_t)ctx_len), AK_DTYPE_I32, 1, b, 0, 0, 0));
        PB_TRY(pb_buf(ctx, s, NULL, AK_DTYPE_I32, 2, b, mp, 0, 0));
        snprintf(shape, sizeof shape, "B %lld, ctx %lld, page %d -> [%lld, %lld]", (long long)b,
                 (long long)ctx_len, (int)P, (long long)b, (long long)mp);
        /* one token id read per page, the table written */
        PB_RET(pb_add(ctx, out, s, "block_table", shape, 0, 0, (double)(b * mp) * 8 + b * 4, 1));
    }
    /* page 64 (2048 pages per request, what serving engines' kv_indices hold) is the target
       case; page 1 copies every token id (16.8M at B 128): reported against the bytes floor */
    for (int pi = 0; pi < 2 && ak_bench_wants(op, "csr"); pi++) {
        int32_t P = pi == 0 ? 64 : 1;
        int64_t cap = b * (ctx_len / P);
        pb_state *s = pb_new(PB_CSR);
        if (!s) return AK_ERR_OUT_OF_MEMORY;
        s->page_size = P;
        PB_TRY(pb_buf(ctx, s, pb_token_table(b, ctx_len, 64, &rng), AK_DTYPE_I32, 2, b, ctx_len, 0,
                      0));
        PB_TRY(pb_buf(ctx, s, pb_fill_i32(b, (int32_t)ctx_len), AK_DTYPE_I32, 1, b, 0, 0, 0));
        PB_TRY(pb_buf(ctx, s, NULL, AK_DTYPE_I32, 1, b + 1, 0, 0, 0));
        PB_TRY(pb_buf(ctx, s, NULL, AK_DTYPE_I32, 1, cap, 0, 0, 0));
        PB_TRY(pb_buf(ctx, s, NULL, AK_DTYPE_I32, 1, b, 0, 0, 0));
        snprintf(shape, sizeof shape, "B %lld, ctx %lld, page %d -> %lld indices", (long long)b,
                 (long long)ctx_len, (int)P, (long long)cap);
        /* one token id read per entry, the entry written (at page 64 each read still costs a
           32-byte sector of DRAM traffic, not counted) */
        PB_RET(pb_add(ctx, out, s, "csr", shape, 0, 0, (double)cap * 8 + (double)b * 12, 1));
    }
    /* decode: one row per request (PAGED, RAGGED: the targets); extend: 16 new tokens per
       request (RAGGED, reported with its % of copy, timed per call like prefill) */
    for (int c = 0; c < 3; c++) {
        const int ragged = c > 0, extend = c == 2;
        const char *name = ragged ? "transform_ragged" : "transform_paged";
        if (!ak_bench_wants(op, name)) continue;
        int64_t rows = extend ? b * 16 : b, k = 2048, mp = ctx_len / 64;
        pb_state *s = pb_new(PB_TRANSFORM);
        if (!s) return AK_ERR_OUT_OF_MEMORY;
        int32_t *idx = (int32_t *)malloc((size_t)(rows * k) * 4);
        for (int64_t i = 0; i < rows * k; i++)
            idx[i] = (int32_t)(pb_next(&rng) % (uint64_t)ctx_len);
        PB_TRY(pb_buf(ctx, s, idx, AK_DTYPE_I32, 2, rows, k, 0, 0));
        PB_TRY(pb_buf(ctx, s, NULL, AK_DTYPE_I32, 2, rows, k, 0, 0));
        int32_t *table = (int32_t *)malloc((size_t)(b * mp) * 4);
        for (int64_t i = 0; i < b * mp; i++)
            table[i] = (int32_t)i;
        PB_TRY(pb_buf(ctx, s, table, AK_DTYPE_I32, 2, b, mp, 0, 0));
        int32_t *cuq = (int32_t *)malloc((size_t)(b + 1) * 4),
                *cuk = (int32_t *)malloc((size_t)(b + 1) * 4);
        for (int64_t i = 0; i <= b; i++) {
            cuq[i] = (int32_t)(i * (rows / b));
            cuk[i] = (int32_t)(i * ctx_len);
        }
        PB_TRY(pb_buf(ctx, s, cuq, AK_DTYPE_I32, 1, b + 1, 0, 0, 0));
        PB_TRY(pb_buf(ctx, s, cuk, AK_DTYPE_I32, 1, b + 1, 0, 0, 0));
        s->tf.kind = ragged ? AK_TRANSFORM_RAGGED : AK_TRANSFORM_PAGED;
        s->tf.table = &s->t[2];
        s->tf.page_size = 64;
        s->tf.cu_seqlens_q = ragged ? &s->t[3] : NULL;
        s->tf.cu_seqlens_k = &s->t[4];
        snprintf(shape, sizeof shape, "rows %lld, k %lld, B %lld, ctx %lld%s", (long long)rows,
                 (long long)k, (long long)b, (long long)ctx_len, ragged ? "" : ", page 64");
        /* idx read, out written, one table entry per index (PAGED) */
        double bytes = (double)(rows * k) * (ragged ? 8 : 12);
        PB_RET(pb_add(ctx, out, s, name, shape, 0, 0, bytes, !extend));
    }
    if (ak_bench_wants(op, "swa_indices")) {
        int32_t P = 256;
        int64_t mp = ctx_len / P;
        pb_state *s = pb_new(PB_SWA);
        if (!s) return AK_ERR_OUT_OF_MEMORY;
        s->page_size = P;
        PB_TRY(pb_buf(ctx, s, pb_fill_i32(b, (int32_t)ctx_len), AK_DTYPE_I32, 1, b, 0, 0, 0));
        int32_t *table = (int32_t *)malloc((size_t)(b * mp) * 4);
        for (int64_t i = 0; i < b * mp; i++)
            table[i] = (int32_t)i;
        PB_TRY(pb_buf(ctx, s, table, AK_DTYPE_I32, 2, b, mp, 0, 0));
        PB_TRY(pb_buf(ctx, s, NULL, AK_DTYPE_I32, 2, b, 128, 0, 0));
        PB_TRY(pb_buf(ctx, s, NULL, AK_DTYPE_I32, 1, b, 0, 0, 0));
        snprintf(shape, sizeof shape, "B %lld decode rows, ctx %lld, page 256, window 128",
                 (long long)b, (long long)ctx_len);
        PB_RET(
            pb_add(ctx, out, s, "swa_indices", shape, 0, 0, (double)b * (128 * 4 + 4 + 8 + 4), 1));
    }
    if (ak_bench_wants(op, "combine_indices")) {
        int64_t q = 16, rows = b * q;
        int32_t topk = 512, ratio = 4, c_max = (int32_t)(ctx_len / ratio);
        int64_t w = (topk + 128 + 127) / 128 * 128;
        pb_state *s = pb_new(PB_COMBINE);
        if (!s) return AK_ERR_OUT_OF_MEMORY;
        s->ratio = ratio, s->topk = topk, s->c_max = c_max;
        int32_t *raw = (int32_t *)malloc((size_t)(rows * topk) * 4);
        for (int64_t i = 0; i < rows * topk; i++)
            raw[i] = (int32_t)(pb_next(&rng) % (uint64_t)(c_max - q));
        PB_TRY(pb_buf(ctx, s, raw, AK_DTYPE_I32, 2, rows, topk, 0, 0));
        PB_TRY(pb_buf(ctx, s, pb_fill_i32(b, (int32_t)ctx_len), AK_DTYPE_I32, 1, b, 0, 0, 0));
        int32_t *cuq = (int32_t *)malloc((size_t)(b + 1) * 4);
        for (int64_t i = 0; i <= b; i++)
            cuq[i] = (int32_t)(i * q);
        PB_TRY(pb_buf(ctx, s, cuq, AK_DTYPE_I32, 1, b + 1, 0, 0, 0));
        PB_TRY(pb_buf(ctx, s, NULL, AK_DTYPE_I32, 2, rows, w, 0, 0));
        PB_TRY(pb_buf(ctx, s, NULL, AK_DTYPE_I32, 1, rows, 0, 0, 0));
        PB_TRY(pb_buf(ctx, s, NULL, AK_DTYPE_I32, 1, b + 1, 0, 0, 0));
        snprintf(shape, sizeof shape, "B %lld x %lld new tokens, ctx %lld, C4 topk %d, W %lld",
                 (long long)b, (long long)q, (long long)ctx_len, (int)topk, (long long)w);
        PB_RET(pb_add(ctx, out, s, "combine_indices", shape, 0, 0,
                      (double)rows * (topk + w + 1) * 4 + (double)b * 12, 0));
    }
    return AK_OK;
}

/* dsv32 decode: logits over an INDEXER_FP8 pool, then top-k with the fused PAGED transform. */
static ak_status pb_indexer(ak_context *ctx, const ak_bench_opts *o, const char *op,
                            ak_bench_list *out) {
    const ak_model *m = o->model;
    if (m != NULL && m->index_heads == 0) return AK_OK; /* no indexer in this model */
    int32_t h = m ? m->index_heads : 64, k = m && m->topk > 0 ? m->topk : 2048;
    static const int64_t shapes_full[3][2] = {{8, 32768}, {32, 65536}, {128, 131072}};
    static const int64_t shapes_quick[1][2] = {{8, 8192}};
    int nshapes = o->quick ? 1 : 3;
    uint64_t rng = o->seed + 1;
    for (int si = 0; si < nshapes; si++) {
        int64_t b = o->quick ? shapes_quick[si][0] : shapes_full[si][0];
        int64_t len = o->quick ? shapes_quick[si][1] : shapes_full[si][1];
        int64_t mp = len / 64, need = b * mp;
        /* requests share a pool larger than any L2 (16384 pages = 138 MB) */
        int32_t num_pages = (int32_t)(need < 16384 ? need : 16384);
        char shape[200];
        /* the CPU scores ~6 GFLOP/s: only the smallest decode shape is worth timing there */
        int cpu_skip = si > 0 && ak_context_backend(ctx) == AK_BACKEND_CPU;
        if (ak_bench_wants(op, "indexer_paged") && !cpu_skip) {
            pb_state *s = pb_new(PB_INDEXER_PAGED);
            if (!s) return AK_ERR_OUT_OF_MEMORY;
            uint8_t *q = (uint8_t *)malloc((size_t)(b * h * 128));
            for (int64_t i = 0; i < b * h * 128; i++)
                q[i] = (uint8_t)(0x30 + pb_next(&rng) % 0x18);
            PB_TRY(pb_buf(ctx, s, q, AK_DTYPE_E4M3, 4, b, 1, h, 128));
            float *w = (float *)malloc((size_t)(b * h) * 4);
            ak_bench_fill_normal_f32(w, b * h, 0.1, 1.0, o->seed);
            PB_TRY(pb_buf(ctx, s, w, AK_DTYPE_F32, 2, b, h, 0, 0));
            size_t pool_bytes = (size_t)num_pages * 8448;
            uint8_t *pool = (uint8_t *)malloc(pool_bytes);
            for (size_t i = 0; i < pool_bytes; i++)
                pool[i] = (uint8_t)(0x30 + (i * 2654435761u >> 20) % 0x18);
            for (int32_t p = 0; p < num_pages; p++) /* scales 1.0 */
                for (int t = 0; t < 64; t++)
                    memcpy(pool + (size_t)p * 8448 + 8192 + t * 4, &(float){1.0f}, 4);
            PB_TRY(pb_buf(ctx, s, pool, AK_DTYPE_U8, 1, (int64_t)pool_bytes, 0, 0, 0));
            int32_t *bt = (int32_t *)malloc((size_t)need * 4);
            for (int64_t i = 0; i < need; i++)
                bt[i] = (int32_t)((i * 7919) % num_pages);
            PB_TRY(pb_buf(ctx, s, bt, AK_DTYPE_I32, 2, b, mp, 0, 0));
            PB_TRY(pb_buf(ctx, s, pb_fill_i32(b, (int32_t)len), AK_DTYPE_I32, 1, b, 0, 0, 0));
            PB_TRY(pb_buf(ctx, s, NULL, AK_DTYPE_F32, 2, b, len, 0, 0));
            PB_TRY(ak_cache_init(&s->cache, AK_LAYOUT_INDEXER_FP8, s->dev[2], num_pages, 64));
            s->cache.device = ak_context_device(ctx);
            snprintf(shape, sizeof shape, "B %lld, ctx %lld, H %d, next_n 1", (long long)b,
                     (long long)len, (int)h);
            double keys = (double)b * len;
            PB_RET(pb_add(ctx, out, s, "indexer_paged", shape, keys * 2 * h * 128, keys * 132,
                          keys * (132 + 4) + (double)b * h * 132 + (double)need * 4, 1));
        }
        if (ak_bench_wants(op, "topk")) {
            pb_state *s = pb_new(PB_TOPK);
            if (!s) return AK_ERR_OUT_OF_MEMORY;
            s->k = k;
            float *x = (float *)malloc((size_t)(b * len) * 4);
            ak_bench_fill_normal_f32(x, b * len, 1.0, 8.0, o->seed + 2);
            PB_TRY(pb_buf(ctx, s, x, AK_DTYPE_F32, 2, b, len, 0, 0));
            PB_TRY(pb_buf(ctx, s, pb_fill_i32(b, (int32_t)len), AK_DTYPE_I32, 1, b, 0, 0, 0));
            PB_TRY(pb_buf(ctx, s, NULL, AK_DTYPE_I32, 2, b, k, 0, 0));
            int32_t *bt = (int32_t *)malloc((size_t)need * 4);
            for (int64_t i = 0; i < need; i++)
                bt[i] = (int32_t)i;
            PB_TRY(pb_buf(ctx, s, bt, AK_DTYPE_I32, 2, b, mp, 0, 0));
            s->tf.kind = AK_TRANSFORM_PAGED;
            s->tf.table = &s->t[3];
            s->tf.page_size = 64;
            snprintf(shape, sizeof shape, "B %lld, len %lld, k %d, fused PAGED (page 64)",
                     (long long)b, (long long)len, (int)k);
            PB_RET(pb_add(ctx, out, s, "topk", shape, 0, 0,
                          (double)b * len * 4 + (double)b * k * 8 + (double)b * 4, 1));
        }
    }
    return AK_OK;
}

ak_status ak_bench_pagetable(ak_context *ctx, const ak_bench_opts *o, const char *op,
                             ak_bench_list *out) {
    PB_RET(pb_builders(ctx, o, op, out));
    return pb_indexer(ctx, o, op, out);
}
AK_BENCH_REGISTER(ak_bench_pagetable)
