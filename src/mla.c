/*
 * mla.c -- public entry points of MLA decode (dense and sparse) and sparse prefill: validate every
 * descriptor, then dispatch. Values inside tensors (lengths, slot ids) are the backends' business:
 * the CPU checks seq_lens against the block table; indices follow rule I1 everywhere.
 */
#include <math.h>
#include <stdint.h>

#include "common/internal.h"
#include "cpu/cpu.h"
#include "cuda/cuda_backend.h"

static const ak_layout k_mla_layouts[] = {AK_LAYOUT_MLA_BF16, AK_LAYOUT_MLA_FP8_PERTENSOR,
                                          AK_LAYOUT_DSA_FP8_BLOCKSCALE, AK_LAYOUT_DSV4_FP8_UE8M0};
static const ak_dtype k_i32[] = {AK_DTYPE_I32};
static const ak_dtype k_f32[] = {AK_DTYPE_F32};
static const ak_dtype k_bf16[] = {AK_DTYPE_BF16};
static const ak_dtype k_out_dtypes[] = {AK_DTYPE_BF16, AK_DTYPE_F32};

/* d_qk the attention reads from an MLA layout: 512 for DeepSeek V4, 576 otherwise. */
static int64_t mla_d_qk(ak_layout l) {
    return l == AK_LAYOUT_DSV4_FP8_UE8M0 ? 512 : 576;
}

static ak_status check_i32(const ak_context *ctx, const char *fn, const char *arg, const char *text,
                           const ak_tensor *t, int32_t ndim, const int64_t *dims) {
    ak_tcheck c = {fn, arg, text};
    AK_TRY(ak_check_shape(ctx, &c, t, ndim, dims));
    return ak_check_dtype(&c, t, 1, k_i32);
}

/* An optional length tensor of a [b, s_q, width] list: [b] or [b, s_q] int32. */
static ak_status check_lengths(const ak_context *ctx, const char *fn, const char *arg,
                               const ak_tensor *t, int64_t b, int64_t s_q) {
    if (t == NULL) return AK_OK;
    ak_tcheck c = {fn, arg, "[b] or [b, s_q]"};
    AK_TRY(ak_check_tensor(ctx, &c, t));
    if (t->ndim == 1) {
        int64_t d[1] = {b};
        return check_i32(ctx, fn, arg, "[b]", t, 1, d);
    }
    int64_t d[2] = {b, s_q};
    return check_i32(ctx, fn, arg, "[b, s_q]", t, 2, d);
}

static ak_status check_sink(const ak_context *ctx, const char *fn, const ak_tensor *t,
                            int64_t h_q) {
    if (t == NULL) return AK_OK;
    ak_tcheck c = {fn, "attn_sink", "[h_q]"};
    int64_t d[1] = {h_q};
    AK_TRY(ak_check_shape(ctx, &c, t, 1, d));
    return ak_check_dtype(&c, t, 1, k_f32);
}

static ak_status check_scale(const char *fn, float s) {
    if (!isfinite(s))
        return ak_fail(AK_ERR_INVALID_ARGUMENT, "%s: softmax_scale is %g, expected a finite value",
                       fn, (double)s);
    return AK_OK;
}

/* MLA caches hold one latent head shared by every query head. */
static ak_status check_heads(const char *fn, const char *arg, const ak_cache *c, int64_t h_q) {
    if (h_q < 1)
        return ak_fail(AK_ERR_INVALID_ARGUMENT, "%s: q: h_q is %lld, expected >= 1", fn,
                       (long long)h_q);
    int32_t h_kv = c->h_kv > 0 ? c->h_kv : 1;
    if (h_q % h_kv != 0)
        return ak_fail(AK_ERR_INVALID_ARGUMENT, "%s: q: h_q %lld is not divisible by %s.h_kv %d",
                       fn, (long long)h_q, arg, (int)h_kv);
    if (h_kv != 1)
        return ak_fail(AK_ERR_UNSUPPORTED, "%s: %s.h_kv is %d; MLA caches have one latent head", fn,
                       arg, (int)h_kv);
    return AK_OK;
}

static ak_status mla_decode_validate(ak_context *ctx, const char *fn, const ak_mla_decode_args *a) {
    AK_TRY(ak_check_context(ctx, fn));
    if (a == NULL) return ak_fail(AK_ERR_INVALID_ARGUMENT, "%s: args is NULL", fn);
    AK_TRY(ak_check_cache(ctx, fn, "cache", a->cache, 4, k_mla_layouts));
    int64_t d_qk = mla_d_qk(a->cache->layout);
    ak_tcheck cq = {fn, "q",
                    d_qk == 576 ? "[b, s_q, h_q, 576] for this cache layout"
                                : "[b, s_q, h_q, 512] for DSV4_FP8_UE8M0"};
    int64_t dq[4] = {-1, -1, -1, d_qk};
    AK_TRY(ak_check_shape(ctx, &cq, a->q, 4, dq));
    AK_TRY(ak_check_dtype(&cq, a->q, 1, k_bf16));
    int64_t b = a->q->shape[0], s_q = a->q->shape[1], h_q = a->q->shape[2];
    AK_TRY(check_heads(fn, "cache", a->cache, h_q));
    AK_TRY(check_scale(fn, a->softmax_scale));

    if ((unsigned)a->balance > (unsigned)AK_BALANCE_REUSE)
        return ak_fail(AK_ERR_INVALID_ARGUMENT,
                       "%s: balance is %d, expected AK_BALANCE_NONE (0), AK_BALANCE_MAKE (1) or AK_BALANCE_REUSE (2)",
                       fn, (int)a->balance);
    int dense = a->block_table != NULL, sparse = a->indices != NULL;
    if (dense == sparse)
        return ak_fail(AK_ERR_INVALID_ARGUMENT,
                       "%s: block_table and indices are both %s; set exactly one (dense or sparse)",
                       fn, dense ? "set" : "NULL");
    if (dense) {
        int64_t dbt[2] = {b, -1}, dsl[1] = {b};
        AK_TRY(check_i32(ctx, fn, "block_table", "[b, max_pages]", a->block_table, 2, dbt));
        AK_TRY(check_i32(ctx, fn, "seq_lens", "[b]", a->seq_lens, 1, dsl));
        if (a->topk_length != NULL || a->extra_cache != NULL || a->extra_indices != NULL ||
            a->extra_topk_length != NULL || a->balance != AK_BALANCE_NONE)
            return ak_fail(AK_ERR_INVALID_ARGUMENT,
                           "%s: topk_length/extra_cache/extra_indices/extra_topk_length/balance are set, "
                           "but they belong to sparse mode (block_table is set)",
                           fn);
    } else {
        if (a->seq_lens != NULL || a->causal)
            return ak_fail(AK_ERR_INVALID_ARGUMENT,
                           "%s: seq_lens/causal are set, but they belong to dense mode (indices "
                           "is set; causality is in the index lists)",
                           fn);
        int64_t di[3] = {b, s_q, -1};
        AK_TRY(check_i32(ctx, fn, "indices", "[b, s_q, topk]", a->indices, 3, di));
        if (a->indices->shape[2] < 1)
            return ak_fail(AK_ERR_INVALID_ARGUMENT, "%s: indices: topk is 0, expected >= 1", fn);
        AK_TRY(check_lengths(ctx, fn, "topk_length", a->topk_length, b, s_q));
        if ((a->extra_cache != NULL) != (a->extra_indices != NULL))
            return ak_fail(AK_ERR_INVALID_ARGUMENT,
                           "%s: extra_cache is %s but extra_indices is %s; set both or neither", fn,
                           a->extra_cache ? "set" : "NULL", a->extra_indices ? "set" : "NULL");
        if (a->extra_topk_length != NULL && a->extra_indices == NULL)
            return ak_fail(AK_ERR_INVALID_ARGUMENT,
                           "%s: extra_topk_length is set without extra_indices", fn);
        if (a->extra_cache != NULL) {
            AK_TRY(ak_check_cache(ctx, fn, "extra_cache", a->extra_cache, 4, k_mla_layouts));
            if (a->extra_cache->layout != a->cache->layout)
                return ak_fail(AK_ERR_INVALID_ARGUMENT,
                               "%s: extra_cache.layout is %s, expected the main cache's %s", fn,
                               ak_layout_name(a->extra_cache->layout),
                               ak_layout_name(a->cache->layout));
            AK_TRY(check_heads(fn, "extra_cache", a->extra_cache, h_q));
            AK_TRY(check_i32(ctx, fn, "extra_indices", "[b, s_q, extra_topk]", a->extra_indices, 3,
                             di));
            if (a->extra_indices->shape[2] < 1)
                return ak_fail(AK_ERR_INVALID_ARGUMENT,
                               "%s: extra_indices: extra_topk is 0, expected >= 1", fn);
            AK_TRY(check_lengths(ctx, fn, "extra_topk_length", a->extra_topk_length, b, s_q));
        }
    }
    AK_TRY(check_sink(ctx, fn, a->attn_sink, h_q));
    if (a->out == NULL)
        return ak_fail(AK_ERR_INVALID_ARGUMENT, "%s: out is NULL, expected [b, s_q, h_q, 512]", fn);
    ak_tcheck co = {fn, "out", "[b, s_q, h_q, 512]"};
    int64_t dout[4] = {b, s_q, h_q, 512};
    AK_TRY(ak_check_shape(ctx, &co, a->out, 4, dout));
    AK_TRY(ak_check_dtype(&co, a->out, 2, k_out_dtypes));
    if (a->lse != NULL) {
        /* Any strides, so FlashMLA's [b, h_q, s_q] order is a stride choice (semantics.md 3):
           the innermost stride is checked apart from the common checks. */
        ak_tcheck cl = {fn, "lse", "[b, s_q, h_q]"};
        int64_t dl[3] = {b, s_q, h_q};
        ak_tensor t = *a->lse;
        if (t.ndim == 3) {
            if (t.shape[2] > 1 && (t.strides[2] <= 0 || t.strides[2] > INT32_MAX))
                return ak_fail(AK_ERR_INVALID_ARGUMENT,
                               "%s: lse: strides[2] is %lld, expected 1..2^31-1", fn,
                               (long long)t.strides[2]);
            t.strides[2] = 1;
        }
        AK_TRY(ak_check_shape(ctx, &cl, &t, 3, dl));
        AK_TRY(ak_check_dtype(&cl, &t, 1, k_f32));
    }
    return AK_OK;
}

ak_status ak_mla_decode_workspace_size(ak_context *ctx, const ak_mla_decode_args *args,
                                       size_t *bytes) {
    const char *fn = "ak_mla_decode_workspace_size";
    AK_TRY(mla_decode_validate(ctx, fn, args));
    if (bytes == NULL) return ak_fail(AK_ERR_INVALID_ARGUMENT, "%s: bytes is NULL", fn);
    return AK_DISPATCH(ctx, ak_cpu_mla_decode_workspace_size(ctx, args, bytes),
                       ak_cuda_mla_decode_workspace_size(ctx, args, bytes));
}

ak_status ak_mla_decode(ak_context *ctx, const ak_mla_decode_args *args, void *workspace,
                        size_t workspace_bytes) {
    AK_TRY(mla_decode_validate(ctx, "ak_mla_decode", args));
    return AK_DISPATCH(ctx, ak_cpu_mla_decode(ctx, args, workspace, workspace_bytes),
                       ak_cuda_mla_decode(ctx, args, workspace, workspace_bytes));
}

static ak_status sparse_prefill_validate(ak_context *ctx, const char *fn,
                                         const ak_sparse_prefill_args *a) {
    AK_TRY(ak_check_context(ctx, fn));
    if (a == NULL) return ak_fail(AK_ERR_INVALID_ARGUMENT, "%s: args is NULL", fn);
    if ((a->kv != NULL) == (a->cache != NULL))
        return ak_fail(AK_ERR_INVALID_ARGUMENT,
                       "%s: kv and cache are both %s; set exactly one (flat or paged form)", fn,
                       a->kv ? "set" : "NULL");
    int64_t d_qk;
    if (a->cache != NULL) {
        AK_TRY(ak_check_cache(ctx, fn, "cache", a->cache, 4, k_mla_layouts));
        d_qk = mla_d_qk(a->cache->layout);
    } else {
        ak_tcheck ck = {fn, "kv", "[s_kv, d_qk] with d_qk 576 or 512"};
        int64_t dk[2] = {-1, -1};
        AK_TRY(ak_check_shape(ctx, &ck, a->kv, 2, dk));
        AK_TRY(ak_check_dtype(&ck, a->kv, 1, k_bf16));
        d_qk = a->kv->shape[1];
        if (d_qk != 576 && d_qk != 512)
            return ak_fail(AK_ERR_INVALID_ARGUMENT, "%s: kv: d_qk is %lld, expected 576 or 512", fn,
                           (long long)d_qk);
    }
    ak_tcheck cq = {fn, "q", "[s_q, h_q, d_qk] with d_qk matching kv or the cache layout"};
    int64_t dq[3] = {-1, -1, d_qk};
    AK_TRY(ak_check_shape(ctx, &cq, a->q, 3, dq));
    AK_TRY(ak_check_dtype(&cq, a->q, 1, k_bf16));
    int64_t s_q = a->q->shape[0], h_q = a->q->shape[1];
    if (a->cache != NULL) {
        AK_TRY(check_heads(fn, "cache", a->cache, h_q));
    } else if (h_q < 1) {
        return ak_fail(AK_ERR_INVALID_ARGUMENT, "%s: q: h_q is %lld, expected >= 1", fn,
                       (long long)h_q);
    }
    AK_TRY(check_scale(fn, a->softmax_scale));
    int64_t di[2] = {s_q, -1}, dl[1] = {s_q};
    AK_TRY(check_i32(ctx, fn, "indices", "[s_q, topk]", a->indices, 2, di));
    if (a->indices->shape[1] < 1)
        return ak_fail(AK_ERR_INVALID_ARGUMENT, "%s: indices: topk is 0, expected >= 1", fn);
    if (a->topk_length != NULL)
        AK_TRY(check_i32(ctx, fn, "topk_length", "[s_q]", a->topk_length, 1, dl));
    AK_TRY(check_sink(ctx, fn, a->attn_sink, h_q));
    if (a->out == NULL)
        return ak_fail(AK_ERR_INVALID_ARGUMENT, "%s: out is NULL, expected [s_q, h_q, 512]", fn);
    ak_tcheck co = {fn, "out", "[s_q, h_q, 512]"};
    int64_t dout[3] = {s_q, h_q, 512}, dr[2] = {s_q, h_q};
    AK_TRY(ak_check_shape(ctx, &co, a->out, 3, dout));
    AK_TRY(ak_check_dtype(&co, a->out, 2, k_out_dtypes));
    if (a->max_logits != NULL) {
        ak_tcheck cm = {fn, "max_logits", "[s_q, h_q]"};
        AK_TRY(ak_check_shape(ctx, &cm, a->max_logits, 2, dr));
        AK_TRY(ak_check_dtype(&cm, a->max_logits, 1, k_f32));
    }
    if (a->lse != NULL) {
        ak_tcheck cl = {fn, "lse", "[s_q, h_q]"};
        AK_TRY(ak_check_shape(ctx, &cl, a->lse, 2, dr));
        AK_TRY(ak_check_dtype(&cl, a->lse, 1, k_f32));
    }
    if (ctx->backend == AK_BACKEND_CUDA)
        return ak_fail(AK_ERR_UNSUPPORTED,
                       "%s: no CUDA kernel for sparse prefill yet; run it on a CPU context", fn);
    return AK_OK;
}

ak_status ak_sparse_prefill_workspace_size(ak_context *ctx, const ak_sparse_prefill_args *args,
                                           size_t *bytes) {
    const char *fn = "ak_sparse_prefill_workspace_size";
    AK_TRY(sparse_prefill_validate(ctx, fn, args));
    if (bytes == NULL) return ak_fail(AK_ERR_INVALID_ARGUMENT, "%s: bytes is NULL", fn);
    return ak_cpu_sparse_prefill_workspace_size(ctx, args, bytes);
}

ak_status ak_sparse_prefill(ak_context *ctx, const ak_sparse_prefill_args *args, void *workspace,
                            size_t workspace_bytes) {
    AK_TRY(sparse_prefill_validate(ctx, "ak_sparse_prefill", args));
    return ak_cpu_sparse_prefill(ctx, args, workspace, workspace_bytes);
}
