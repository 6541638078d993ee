/*
 * bench_mha.c -- `attnkit bench` ops "mha_decode", "mha_prefill" and "merge".
 *
 * Shapes follow targets.md 5.2 (paged GQA decode: llama3-8b preset, h_q 32, h_kv 8, D 128, bf16,
 * b 64 x kv 8192, pages 16 NHD and 64 HND; prefill: hdim 128 causal, 16 heads and GQA 32/8,
 * b 1 x 16384, page 64). The CPU backend runs them scaled down (decode b 8 x kv 2048, prefill
 * b 1 x 1024; --quick smaller still) and says so in the shape text. Backends without an MHA
 * kernel (CUDA today) get no mha cases.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "devmem.h"

typedef struct mha_bench {
    void *k, *v, *q, *bt, *sl, *cu, *out, *lse, *ws;
    size_t ws_bytes;
    ak_cache cache;
    ak_tensor tq, tbt, tsl, tcu, tout, tlse;
    ak_mha_args args;
} mha_bench;

static void mha_bench_destroy(ak_context *ctx, void *state) {
    mha_bench *b = (mha_bench *)state;
    if (b == NULL) return;
    ak_dev_free(ctx, b->k), ak_dev_free(ctx, b->v), ak_dev_free(ctx, b->q);
    ak_dev_free(ctx, b->bt), ak_dev_free(ctx, b->sl), ak_dev_free(ctx, b->cu);
    ak_dev_free(ctx, b->out), ak_dev_free(ctx, b->lse), ak_dev_free(ctx, b->ws);
    free(b);
}

static ak_status mha_bench_run(ak_context *ctx, void *state) {
    mha_bench *b = (mha_bench *)state;
    return ak_mha(ctx, &b->args, b->ws, b->ws_bytes);
}

/* Uploads n random bf16 values (N(0,1) clamped at 4) to a new device buffer. */
static void *random_bf16(ak_context *ctx, int64_t n, uint64_t seed) {
    uint16_t *h = (uint16_t *)malloc(sizeof(uint16_t) * (size_t)(n > 0 ? n : 1));
    if (h == NULL) return NULL;
    ak_bench_fill_normal_bf16(h, n, 1.0, 4.0, seed);
    void *d = ak_dev_clone(ctx, h, sizeof(uint16_t) * (size_t)n);
    free(h);
    return d;
}

/*
 * One paged MHA case: B requests of q_len new tokens over kv_len keys (all requests equal), a
 * page table that visits the pool in a scattered order. prefill = ragged causal q.
 */
static ak_status mha_bench_add(ak_context *ctx, const ak_bench_opts *o, ak_bench_list *out,
                               const char *op, const char *shape_note, ak_layout layout,
                               int32_t h_q, int32_t h_kv, int32_t D, int32_t P, int32_t B,
                               int32_t q_len, int32_t kv_len, int32_t ragged) {
    mha_bench *b = (mha_bench *)calloc(1, sizeof *b);
    if (b == NULL) return AK_ERR_OUT_OF_MEMORY;
    int32_t per_req = (kv_len + P - 1) / P, pages = B * per_req;
    int64_t kv_elems = (int64_t)pages * P * h_kv * D, rows = (int64_t)B * q_len;
    int32_t *bt = (int32_t *)malloc(sizeof(int32_t) * (size_t)pages);
    int32_t *sl = (int32_t *)malloc(sizeof(int32_t) * (size_t)B);
    int32_t *cu = (int32_t *)malloc(sizeof(int32_t) * (size_t)(B + 1));
    ak_status st = AK_ERR_OUT_OF_MEMORY;
    if (bt == NULL || sl == NULL || cu == NULL) goto fail;
    /* a stride coprime with the pool size scatters consecutive pages of a request */
    int64_t stride = 7919 % pages == 0 ? 1 : 7919;
    for (int32_t i = 0; i < pages; i++) bt[i] = (int32_t)(((int64_t)i * stride) % pages);
    for (int32_t i = 0; i < B; i++) sl[i] = kv_len;
    for (int32_t i = 0; i <= B; i++) cu[i] = i * q_len;
    b->k = random_bf16(ctx, kv_elems, o->seed + 1);
    b->v = random_bf16(ctx, kv_elems, o->seed + 2);
    b->q = random_bf16(ctx, rows * h_q * D, o->seed + 3);
    b->bt = ak_dev_clone(ctx, bt, sizeof(int32_t) * (size_t)pages);
    b->sl = ak_dev_clone(ctx, sl, sizeof(int32_t) * (size_t)B);
    b->cu = ak_dev_clone(ctx, cu, sizeof(int32_t) * (size_t)(B + 1));
    b->out = ak_dev_alloc(ctx, sizeof(uint16_t) * (size_t)(rows * h_q * D));
    b->lse = ak_dev_alloc(ctx, sizeof(float) * (size_t)(rows * h_q));
    if (!b->k || !b->v || !b->q || !b->bt || !b->sl || !b->cu || !b->out || !b->lse) goto fail;
    st = ak_cache_init_mha(&b->cache, layout, AK_DTYPE_BF16, b->k, b->v, pages, P, h_kv, D, D);
    if (st != AK_OK) goto fail;
    b->cache.device = ak_context_device(ctx);
    int64_t qs[4] = {B, q_len, h_q, D}, rs[3] = {rows, h_q, D}, bs[2] = {B, per_req}, bb = B,
            b1 = B + 1;
    b->tq = ak_dev_tensor(ctx, b->q, AK_DTYPE_BF16, ragged ? 3 : 4, ragged ? rs : qs);
    b->tout = ak_dev_tensor(ctx, b->out, AK_DTYPE_BF16, ragged ? 3 : 4, ragged ? rs : qs);
    b->tlse = ak_dev_tensor(ctx, b->lse, AK_DTYPE_F32, ragged ? 2 : 3, ragged ? rs : qs);
    b->tbt = ak_dev_tensor(ctx, b->bt, AK_DTYPE_I32, 2, bs);
    b->tsl = ak_dev_tensor(ctx, b->sl, AK_DTYPE_I32, 1, &bb);
    b->tcu = ak_dev_tensor(ctx, b->cu, AK_DTYPE_I32, 1, &b1);
    ak_mha_args *a = &b->args;
    a->q = &b->tq;
    a->cu_seqlens_q = ragged ? &b->tcu : NULL;
    a->cache = &b->cache;
    a->block_table = &b->tbt;
    a->seq_lens = &b->tsl;
    a->softmax_scale = 0.08838835f; /* 128^-0.5 */
    a->causal = 1;
    a->window_left = -1;
    a->out = &b->tout;
    a->lse = &b->tlse;
    st = ak_mha_workspace_size(ctx, a, &b->ws_bytes);
    if (st != AK_OK) goto fail;
    b->ws = ak_dev_alloc(ctx, b->ws_bytes > 0 ? b->ws_bytes : 1);
    if (b->ws == NULL) {
        st = AK_ERR_OUT_OF_MEMORY;
        goto fail;
    }
    ak_bench_case c;
    memset(&c, 0, sizeof c);
    snprintf(c.op, sizeof c.op, "%s", op);
    snprintf(c.shape, sizeof c.shape, "%s h_q %d h_kv %d D %d bf16 P%d b %d q %d kv %d%s%s",
             layout == AK_LAYOUT_MHA_HND ? "HND" : "NHD", (int)h_q, (int)h_kv, (int)D, (int)P,
             (int)B, (int)q_len, (int)kv_len, shape_note[0] ? " " : "", shape_note);
    /* keys attended per request: causal, bottom-right aligned */
    double keys = 0;
    for (int32_t i = 0; i < q_len; i++) keys += (double)(kv_len - q_len + i + 1);
    c.flops = 2.0 * h_q * (2.0 * D) * keys * B; /* targets.md 3.1 */
    c.bytes_kv = (double)B * kv_len * h_kv * D * 2 * 2;
    c.bytes_total = c.bytes_kv + (double)rows * h_q * D * 2 * 2 + (double)rows * h_q * 4 +
                    (double)pages * 4 + (double)B * 4;
    c.graph = q_len == 1;
    c.state = b;
    c.run = mha_bench_run;
    c.destroy = mha_bench_destroy;
    free(bt), free(sl), free(cu);
    return ak_bench_add(out, &c);
fail:
    free(bt), free(sl), free(cu);
    mha_bench_destroy(ctx, b);
    return st;
}

/* ---- merge ---------------------------------------------------------------------------------- */

typedef struct merge_bench {
    void *outs, *lses, *out, *lse;
    ak_tensor touts, tlses, tout, tlse;
} merge_bench;

static void merge_bench_destroy(ak_context *ctx, void *state) {
    merge_bench *m = (merge_bench *)state;
    if (m == NULL) return;
    ak_dev_free(ctx, m->outs), ak_dev_free(ctx, m->lses), ak_dev_free(ctx, m->out);
    ak_dev_free(ctx, m->lse);
    free(m);
}

static ak_status merge_bench_run(ak_context *ctx, void *state) {
    merge_bench *m = (merge_bench *)state;
    return ak_merge_states(ctx, &m->touts, &m->tlses, AK_LSE_BASE_E, NULL, &m->tout, &m->tlse,
                           AK_LSE_BASE_E);
}

static ak_status merge_bench_add(ak_context *ctx, const ak_bench_opts *o, ak_bench_list *out,
                                 int32_t n, int32_t rows, int32_t h, int32_t d) {
    merge_bench *m = (merge_bench *)calloc(1, sizeof *m);
    if (m == NULL) return AK_ERR_OUT_OF_MEMORY;
    int64_t nv = (int64_t)n * rows * h * d, nl = (int64_t)n * rows * h;
    float *hv = (float *)malloc(sizeof(float) * (size_t)nv);
    float *hl = (float *)malloc(sizeof(float) * (size_t)nl);
    ak_status st = AK_ERR_OUT_OF_MEMORY;
    if (hv == NULL || hl == NULL) goto fail;
    ak_bench_fill_normal_f32(hv, nv, 1.0, 4.0, o->seed + 11);
    ak_bench_fill_normal_f32(hl, nl, 3.0, 12.0, o->seed + 12);
    m->outs = ak_dev_clone(ctx, hv, sizeof(float) * (size_t)nv);
    m->lses = ak_dev_clone(ctx, hl, sizeof(float) * (size_t)nl);
    m->out = ak_dev_alloc(ctx, sizeof(float) * (size_t)(nv / n));
    m->lse = ak_dev_alloc(ctx, sizeof(float) * (size_t)(nl / n));
    if (!m->outs || !m->lses || !m->out || !m->lse) goto fail;
    int64_t s[4] = {n, rows, h, d};
    m->touts = ak_dev_tensor(ctx, m->outs, AK_DTYPE_F32, 4, s);
    m->tlses = ak_dev_tensor(ctx, m->lses, AK_DTYPE_F32, 3, s);
    m->tout = ak_dev_tensor(ctx, m->out, AK_DTYPE_F32, 3, s + 1);
    m->tlse = ak_dev_tensor(ctx, m->lse, AK_DTYPE_F32, 2, s + 1);
    ak_bench_case c;
    memset(&c, 0, sizeof c);
    snprintf(c.op, sizeof c.op, "merge");
    snprintf(c.shape, sizeof c.shape, "n %d rows %d h %d d %d f32", (int)n, (int)rows, (int)h,
             (int)d);
    c.bytes_total = (double)(nv + nl) * 4 + (double)(nv + nl) / n * 4;
    c.graph = 1;
    c.state = m;
    c.run = merge_bench_run;
    c.destroy = merge_bench_destroy;
    free(hv), free(hl);
    return ak_bench_add(out, &c);
fail:
    free(hv), free(hl);
    merge_bench_destroy(ctx, m);
    return st;
}

ak_status ak_bench_mha(ak_context *ctx, const ak_bench_opts *o, const char *op,
                       ak_bench_list *out) {
    int cpu = ak_context_backend(ctx) == AK_BACKEND_CPU;
    const ak_model *m =
        o->model != NULL && o->model->kind == AK_MODEL_MHA ? o->model : ak_model_find("llama3-8b");
    if (m == NULL) return AK_OK;
    ak_status st = AK_OK;
    if (cpu && ak_bench_wants(op, "mha_decode")) {
        /* targets.md 5.2: b 64 x kv 8192; the CPU runs b 8 x kv 2048 (quick: b 2 x 512) */
        int32_t B = o->quick ? 2 : 8, kv = o->quick ? 512 : 2048;
        const char *note = "(CPU: scaled from b 64 kv 8192)";
        st = mha_bench_add(ctx, o, out, "mha_decode", note, AK_LAYOUT_MHA_NHD, m->h_q, m->h_kv,
                           m->d_qk, m->page_size, B, 1, kv, 0);
        if (st == AK_OK)
            st = mha_bench_add(ctx, o, out, "mha_decode", note, AK_LAYOUT_MHA_HND, m->h_q,
                               m->h_kv, m->d_qk, 64, B, 1, kv, 0);
    }
    if (st == AK_OK && cpu && ak_bench_wants(op, "mha_prefill")) {
        /* targets.md 5.2: b 1 x 16384, 16 heads and GQA 32/8; the CPU runs 1024 (quick: 256) */
        int32_t S = o->quick ? 256 : 1024;
        const char *note = "causal (CPU: scaled from b 1 x 16384)";
        st = mha_bench_add(ctx, o, out, "mha_prefill", note, AK_LAYOUT_MHA_NHD, 16, 16, 128, 64, 1,
                           S, S, 1);
        if (st == AK_OK)
            st = mha_bench_add(ctx, o, out, "mha_prefill", note, AK_LAYOUT_MHA_NHD, 32, 8, 128,
                               64, 1, S, S, 1);
    }
    if (st == AK_OK && ak_bench_wants(op, "merge")) {
        /* two partials of a split-KV decode, 32 heads x 128: 64 rows on the CPU (quick: 16),
           4096 on CUDA */
        int32_t rows = cpu ? (o->quick ? 16 : 64) : 4096;
        st = merge_bench_add(ctx, o, out, 2, rows, 32, 128);
    }
    return st;
}
AK_BENCH_REGISTER(ak_bench_mha)
