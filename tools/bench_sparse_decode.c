/* bench_sparse_decode.c -- `attnkit bench --op mla_decode_sparse`: the targets.md 5.1 sparse decode
   shapes that tools/bench_mla.c's default models do not cover: V4-Pro's window 128 + extra 1024
   at h_q 128, s_q 2, MLA_BF16 at h_q 16 (the copy-bandwidth target), MLA_FP8_PERTENSOR at h_q 64,
   and 656 and V4 at h_q 64 with one list of 640 keys (V4-flash's key count: the per-layout cost
   at equal work and the per-CTA fixed cost against the 2048-key rows). Random distinct slots
   inside a 32k-token context per request (V4: SWA window 128 in 256-token pages plus a C4 list in
   64-token pages); data as tools/bench_mla.c's (targets.md 2 and 6.4); timed by CUDA-graph replay. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "devmem.h"
#include "common/internal.h"

typedef struct sdb_shape {
    ak_layout layout;
    int64_t b, s_q, h_q, topk, etopk;
} sdb_shape;

typedef struct sdb_state {
    ak_cache cache, extra;
    void *pool, *epool, *q, *idx, *out, *lse, *ws; /* device buffers */
    ak_tensor tq, ti, tei, to, tl;
    ak_mla_decode_args a;
    size_t ws_bytes;
} sdb_state;

static ak_status sdb_run(ak_context *ctx, void *state) {
    sdb_state *s = (sdb_state *)state;
    return ak_mla_decode(ctx, &s->a, s->ws, s->ws_bytes);
}

static void sdb_destroy(ak_context *ctx, void *state) {
    sdb_state *s = (sdb_state *)state;
    if (s == NULL) return;
    ak_dev_free(ctx, s->pool);
    ak_dev_free(ctx, s->epool);
    ak_dev_free(ctx, s->q);
    ak_dev_free(ctx, s->idx);
    ak_dev_free(ctx, s->out);
    ak_dev_free(ctx, s->lse);
    ak_dev_free(ctx, s->ws);
    free(s);
}

static int sdb_rec(ak_layout l) {
    return l == AK_LAYOUT_MLA_BF16 ? 1152 : l == AK_LAYOUT_DSA_FP8_BLOCKSCALE ? 656 : l == AK_LAYOUT_MLA_FP8_PERTENSOR ? 576 : 584;
}

/* Distinct random offsets inside each request's own span of `span` slots (partial Fisher-Yates). */
static void sdb_indices(int32_t *dst, int64_t rows, int64_t s_q, int64_t k, int64_t span, uint64_t *x) {
    int32_t *perm = malloc(sizeof(int32_t) * (size_t)span);
    if (perm == NULL) return;
    for (int64_t ri = 0; ri < rows; ri++) {
        int64_t rq = ri / s_q;
        for (int64_t j = 0; j < span; j++) perm[j] = (int32_t)j;
        for (int64_t j = 0; j < k; j++) {
            *x ^= *x << 13, *x ^= *x >> 7, *x ^= *x << 17;
            int64_t p = j + (int64_t)(*x % (uint64_t)(span - j));
            int32_t t = perm[j];
            perm[j] = perm[p];
            perm[p] = t;
            dst[ri * k + j] = (int32_t)(rq * span + perm[j]);
        }
    }
    free(perm);
}

static ak_status sdb_add(ak_context *ctx, const ak_bench_opts *o, const sdb_shape *sh, ak_bench_list *out) {
    const int64_t ctx_len = 32768, b = sh->b, s_q = sh->s_q, h_q = sh->h_q;
    char shape[200];
    snprintf(shape, sizeof shape, "%s h_q %lld b %lld s_q %lld topk %lld%s", ak_layout_name(sh->layout),
             (long long)h_q, (long long)b, (long long)s_q, (long long)sh->topk, sh->etopk > 0 ? " +extra" : "");
    if (sh->etopk > 0) snprintf(shape + strlen(shape), sizeof shape - strlen(shape), " %lld", (long long)sh->etopk);
    if (ak_bench_skip(shape)) return AK_OK;
    const int dqk = sh->layout == AK_LAYOUT_DSV4_FP8_UE8M0 ? 512 : 576;
    sdb_state *s = calloc(1, sizeof *s);
    if (s == NULL) return ak_fail(AK_ERR_OUT_OF_MEMORY, "bench mla_decode_sparse: state");
    const int v4 = sh->etopk > 0;
    const int32_t page = v4 ? 256 : 64;
    const int64_t main_span = v4 ? 2 * sh->topk : ctx_len, extra_span = ctx_len / 4;
    ak_status pst = ak_bench_mla_pool(ctx, sh->layout, (int32_t)((b * main_span + page - 1) / page), page,
                                      o->seed + 1, &s->pool, &s->cache);
    if (pst == AK_OK && v4)
        pst = ak_bench_mla_pool(ctx, sh->layout, (int32_t)((b * extra_span + 63) / 64), 64, o->seed + 2,
                                &s->epool, &s->extra);
    int64_t ni = b * s_q * sh->topk, nei = b * s_q * sh->etopk, nq = b * s_q * h_q * dqk;
    int32_t *idx = malloc(sizeof(int32_t) * (size_t)(ni + nei));
    uint16_t *q = malloc(sizeof(uint16_t) * (size_t)nq);
    if (pst != AK_OK || idx == NULL || q == NULL) {
        free(idx);
        free(q);
        sdb_destroy(ctx, s);
        return pst != AK_OK ? pst : ak_fail(AK_ERR_OUT_OF_MEMORY, "bench mla_decode_sparse: buffers");
    }
    uint64_t x = o->seed * 2654435761ull + 7;
    sdb_indices(idx, b * s_q, s_q, sh->topk, main_span, &x);
    if (v4) sdb_indices(idx + ni, b * s_q, s_q, sh->etopk, extra_span, &x);
    ak_bench_fill_normal_bf16(q, nq, 1.0, 1.0, o->seed + 3);
    s->idx = ak_dev_clone(ctx, idx, sizeof(int32_t) * (size_t)(ni + nei));
    s->q = ak_dev_clone(ctx, q, sizeof(uint16_t) * (size_t)nq);
    free(idx);
    free(q);
    s->out = ak_dev_alloc(ctx, sizeof(uint16_t) * (size_t)(b * s_q * h_q * 512));
    s->lse = ak_dev_alloc(ctx, sizeof(float) * (size_t)(b * s_q * h_q));
    int64_t qs[4] = {b, s_q, h_q, dqk}, is[3] = {b, s_q, sh->topk}, es[3] = {b, s_q, sh->etopk};
    int64_t os[4] = {b, s_q, h_q, 512}, ls[3] = {b, s_q, h_q};
    s->tq = ak_dev_tensor(ctx, s->q, AK_DTYPE_BF16, 4, qs);
    s->ti = ak_dev_tensor(ctx, s->idx, AK_DTYPE_I32, 3, is);
    s->tei = ak_dev_tensor(ctx, (int32_t *)s->idx + ni, AK_DTYPE_I32, 3, es);
    s->to = ak_dev_tensor(ctx, s->out, AK_DTYPE_BF16, 4, os);
    s->tl = ak_dev_tensor(ctx, s->lse, AK_DTYPE_F32, 3, ls);
    s->a.q = &s->tq;
    s->a.cache = &s->cache;
    s->a.softmax_scale = v4 ? 0.044194174f : 0.072168784f; /* 512^-0.5; 192^-0.5 (DeepSeek V3.2) */
    s->a.indices = &s->ti;
    if (v4) {
        s->a.extra_cache = &s->extra;
        s->a.extra_indices = &s->tei;
    }
    s->a.out = &s->to;
    s->a.lse = &s->tl;
    ak_status st = ak_mla_decode_workspace_size(ctx, &s->a, &s->ws_bytes);
    if (st == AK_OK && s->ws_bytes > 0) {
        s->ws = ak_dev_alloc(ctx, s->ws_bytes);
        if (s->ws == NULL) st = ak_fail(AK_ERR_OUT_OF_MEMORY, "bench mla_decode_sparse: workspace");
    }
    if (st != AK_OK || s->out == NULL || s->lse == NULL || s->idx == NULL || s->q == NULL) {
        sdb_destroy(ctx, s);
        return st != AK_OK ? st : ak_fail(AK_ERR_OUT_OF_MEMORY, "bench mla_decode_sparse: buffers");
    }
    ak_bench_case c;
    memset(&c, 0, sizeof c);
    snprintf(c.op, sizeof c.op, "mla_decode_sparse");
    memcpy(c.shape, shape, sizeof c.shape);
    double keys = (double)b * s_q * (double)(sh->topk + sh->etopk);
    c.flops = keys * (double)h_q * (dqk + 512) * 2.0;
    c.bytes_kv = keys * sdb_rec(sh->layout);
    c.bytes_total = c.bytes_kv + (double)b * s_q * h_q * (dqk * 2 + 512 * 2 + 4) + keys * 4;
    c.graph = 1;
    c.state = s;
    c.run = sdb_run;
    c.destroy = sdb_destroy;
    return ak_bench_add(out, &c);
}

ak_status ak_bench_sparse_decode(ak_context *ctx, const ak_bench_opts *o, const char *op, ak_bench_list *out) {
    if (!ak_bench_wants(op, "mla_decode_sparse")) return AK_OK;
    if (ak_context_backend(ctx) != AK_BACKEND_CUDA && !o->quick) return AK_OK; /* CPU: --quick only */
    static const sdb_shape full[] = {
        {AK_LAYOUT_DSV4_FP8_UE8M0, 128, 2, 128, 128, 1024},
        {AK_LAYOUT_MLA_BF16, 128, 1, 16, 2048, 0},
        {AK_LAYOUT_MLA_FP8_PERTENSOR, 128, 1, 64, 2048, 0},
        {AK_LAYOUT_DSA_FP8_BLOCKSCALE, 128, 1, 64, 640, 0},
        {AK_LAYOUT_DSV4_FP8_UE8M0, 128, 1, 64, 640, 0},
    };
    static const sdb_shape quick[] = {
        {AK_LAYOUT_DSA_FP8_BLOCKSCALE, 2, 1, 16, 256, 0},
        {AK_LAYOUT_DSV4_FP8_UE8M0, 2, 1, 16, 128, 128},
    };
    const sdb_shape *sh = o->quick ? quick : full;
    size_t n = o->quick ? sizeof quick / sizeof quick[0] : sizeof full / sizeof full[0];
    /* AK_BENCH_SHAPES: per-tensor fp8 at those (b, s_q, h_q) instead (bench_mla.c times 656) */
    int64_t env[AK_BENCH_MAX_SHAPES][3];
    sdb_shape own[AK_BENCH_MAX_SHAPES];
    int ne = 0;
    if (!o->quick) AK_TRY(ak_bench_env_shapes(env, &ne));
    if (ne > 0) {
        for (int k = 0; k < ne; k++)
            own[k] = (sdb_shape){AK_LAYOUT_MLA_FP8_PERTENSOR, env[k][0], env[k][1], env[k][2], 2048, 0};
        sh = own;
        n = (size_t)ne;
    }
    for (size_t k = 0; k < n; k++) AK_TRY(sdb_add(ctx, o, &sh[k], out));
    return AK_OK;
}
AK_BENCH_REGISTER(ak_bench_sparse_decode)
