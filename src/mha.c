/* mha.c -- public entry points of paged MHA/GQA attention: argument validation and dispatch. */
#include "common/internal.h"
#include "cpu/cpu.h"
#include "cuda/cuda_backend.h"

#include <math.h>

static const char *const k_fn_size = "ak_mha_workspace_size";
static const char *const k_fn_run = "ak_mha";

/* Validates every descriptor of args (values inside tensors are checked by the backend). */
static ak_status check_args(ak_context *ctx, const char *fn, const ak_mha_args *a) {
    static const ak_dtype k_i32[] = {AK_DTYPE_I32};
    static const ak_dtype k_f32[] = {AK_DTYPE_F32};
    static const ak_dtype k_bf16[] = {AK_DTYPE_BF16};
    static const ak_dtype k_out[] = {AK_DTYPE_BF16, AK_DTYPE_F32};
    static const ak_layout k_layouts[] = {AK_LAYOUT_MHA_NHD, AK_LAYOUT_MHA_HND};
    if (a == NULL) return ak_fail(AK_ERR_INVALID_ARGUMENT, "%s: args is NULL", fn);
    AK_TRY(ak_check_cache(ctx, fn, "cache", a->cache, 2, k_layouts));
    const ak_cache *c = a->cache;
    int32_t d_qk = c->head_dim, d_v = c->head_dim_v;
    if (!((d_qk == d_v && (d_qk == 64 || d_qk == 128 || d_qk == 256)) ||
          (d_qk == 192 && d_v == 128)))
        return ak_fail(AK_ERR_UNSUPPORTED,
                       "%s: cache: head_dim %d / head_dim_v %d, supported {64/64, 128/128, "
                       "256/256, 192/128}",
                       fn, (int)d_qk, (int)d_v);

    /* q: ragged [total_q, h_q, d_qk] with cu_seqlens_q, or uniform [B, q_len, h_q, d_qk] */
    int ragged = a->cu_seqlens_q != NULL;
    ak_tcheck tq = {fn, "q", ragged ? "[total_q, h_q, d_qk]" : "[B, q_len, h_q, d_qk]"};
    int32_t qnd = ragged ? 3 : 4;
    int64_t qdims[4] = {-1, -1, -1, -1};
    qdims[qnd - 1] = d_qk;
    AK_TRY(ak_check_shape(ctx, &tq, a->q, qnd, qdims));
    AK_TRY(ak_check_dtype(&tq, a->q, 1, k_bf16));
    int64_t h_q = a->q->shape[qnd - 2], B;
    if (h_q < 1 || h_q % c->h_kv != 0)
        return ak_fail(AK_ERR_INVALID_ARGUMENT,
                       "%s: q: h_q is %lld, expected a positive multiple of cache.h_kv = %d", fn,
                       (long long)h_q, (int)c->h_kv);
    if (ragged) {
        ak_tcheck t = {fn, "cu_seqlens_q", "[B+1]"};
        AK_TRY(ak_check_shape(ctx, &t, a->cu_seqlens_q, 1, NULL));
        AK_TRY(ak_check_dtype(&t, a->cu_seqlens_q, 1, k_i32));
        if (a->cu_seqlens_q->shape[0] < 1)
            return ak_fail(AK_ERR_INVALID_ARGUMENT,
                           "%s: cu_seqlens_q: shape[0] is 0, expected B+1 >= 1", fn);
        B = a->cu_seqlens_q->shape[0] - 1;
    } else {
        B = a->q->shape[0];
    }
    if (B > INT32_MAX - 1)
        return ak_fail(AK_ERR_INVALID_ARGUMENT, "%s: batch %lld exceeds 2^31-2", fn, (long long)B);
    if (a->q->shape[0] > INT32_MAX || (!ragged && a->q->shape[1] > INT32_MAX))
        return ak_fail(AK_ERR_INVALID_ARGUMENT, "%s: q: row count exceeds 2^31-1", fn);

    /* page table: exactly one form */
    int has_bt = a->block_table != NULL || a->seq_lens != NULL;
    int has_csr = a->kv_indptr != NULL || a->kv_indices != NULL || a->kv_last_page_len != NULL;
    if (has_bt == has_csr)
        return ak_fail(AK_ERR_INVALID_ARGUMENT,
                       "%s: page table: %s; pass exactly one of block_table + seq_lens or "
                       "kv_indptr + kv_indices + kv_last_page_len",
                       fn, has_bt ? "both forms given" : "none given");
    if (a->token_table != 0 && a->token_table != 1)
        return ak_fail(AK_ERR_INVALID_ARGUMENT, "%s: token_table is %d, expected 0 or 1", fn,
                       (int)a->token_table);
    if (has_bt) {
        ak_tcheck tb = {fn, "block_table", a->token_table ? "[B, max_len]" : "[B, max_pages]"};
        ak_tcheck ts = {fn, "seq_lens", "[B]"};
        int64_t bdims[2] = {B, -1};
        AK_TRY(ak_check_shape(ctx, &tb, a->block_table, 2, bdims));
        AK_TRY(ak_check_dtype(&tb, a->block_table, 1, k_i32));
        AK_TRY(ak_check_shape(ctx, &ts, a->seq_lens, 1, &B));
        AK_TRY(ak_check_dtype(&ts, a->seq_lens, 1, k_i32));
    } else {
        if (a->token_table)
            return ak_fail(AK_ERR_INVALID_ARGUMENT,
                           "%s: token_table is 1 with the CSR form; a token table is passed as "
                           "block_table",
                           fn);
        ak_tcheck tp = {fn, "kv_indptr", "[B+1]"};
        ak_tcheck ti = {fn, "kv_indices", "[nnz]"};
        ak_tcheck tl = {fn, "kv_last_page_len", "[B]"};
        int64_t bp1 = B + 1;
        AK_TRY(ak_check_shape(ctx, &tp, a->kv_indptr, 1, &bp1));
        AK_TRY(ak_check_dtype(&tp, a->kv_indptr, 1, k_i32));
        AK_TRY(ak_check_shape(ctx, &ti, a->kv_indices, 1, NULL));
        AK_TRY(ak_check_dtype(&ti, a->kv_indices, 1, k_i32));
        AK_TRY(ak_check_shape(ctx, &tl, a->kv_last_page_len, 1, &B));
        AK_TRY(ak_check_dtype(&tl, a->kv_last_page_len, 1, k_i32));
    }

    if (!isfinite(a->softmax_scale))
        return ak_fail(AK_ERR_INVALID_ARGUMENT, "%s: softmax_scale is %g, expected finite", fn,
                       (double)a->softmax_scale);
    if (a->causal != 0 && a->causal != 1)
        return ak_fail(AK_ERR_INVALID_ARGUMENT, "%s: causal is %d, expected 0 or 1", fn,
                       (int)a->causal);
    if (a->window_left < -1)
        return ak_fail(AK_ERR_INVALID_ARGUMENT,
                       "%s: window_left is %d, expected -1 (unlimited) or >= 0", fn,
                       (int)a->window_left);
    if (a->attn_sink != NULL) {
        ak_tcheck t = {fn, "attn_sink", "[h_q]"};
        AK_TRY(ak_check_shape(ctx, &t, a->attn_sink, 1, &h_q));
        AK_TRY(ak_check_dtype(&t, a->attn_sink, 1, k_f32));
    }

    /* out and lse share q's leading dims */
    ak_tcheck to = {fn, "out", ragged ? "[total_q, h_q, d_v]" : "[B, q_len, h_q, d_v]"};
    int64_t odims[4];
    for (int32_t i = 0; i < qnd; i++) odims[i] = a->q->shape[i];
    odims[qnd - 1] = d_v;
    AK_TRY(ak_check_shape(ctx, &to, a->out, qnd, odims));
    AK_TRY(ak_check_dtype(&to, a->out, 2, k_out));
    if (a->lse != NULL) {
        ak_tcheck tl = {fn, "lse", ragged ? "[total_q, h_q]" : "[B, q_len, h_q]"};
        AK_TRY(ak_check_shape(ctx, &tl, a->lse, qnd - 1, a->q->shape));
        AK_TRY(ak_check_dtype(&tl, a->lse, 1, k_f32));
    }
    return AK_OK;
}

ak_status ak_mha_workspace_size(ak_context *ctx, const ak_mha_args *args, size_t *bytes) {
    AK_TRY(ak_check_context(ctx, k_fn_size));
    if (bytes == NULL) return ak_fail(AK_ERR_INVALID_ARGUMENT, "%s: bytes is NULL", k_fn_size);
    AK_TRY(check_args(ctx, k_fn_size, args));
    return AK_DISPATCH(ctx, ak_cpu_mha_workspace_size(ctx, args, bytes),
                       ak_fail(AK_ERR_UNSUPPORTED,
                               "%s: no CUDA kernel for paged MHA yet; run it on a CPU context",
                               k_fn_size));
}

/* The CPU path: the workspace must be what the size query asked for. */
static ak_status mha_run_cpu(ak_context *ctx, const ak_mha_args *args, void *workspace,
                             size_t workspace_bytes) {
    size_t need = 0;
    AK_TRY(ak_cpu_mha_workspace_size(ctx, args, &need));
    if (workspace_bytes < need || (need > 0 && workspace == NULL))
        return ak_fail(AK_ERR_WORKSPACE_TOO_SMALL,
                       "%s: workspace: %zu bytes at %p, ak_mha_workspace_size asks for %zu",
                       k_fn_run, workspace_bytes, workspace, need);
    return ak_cpu_mha(ctx, args, workspace, workspace_bytes);
}

ak_status ak_mha(ak_context *ctx, const ak_mha_args *args, void *workspace,
                 size_t workspace_bytes) {
    AK_TRY(ak_check_context(ctx, k_fn_run));
    AK_TRY(check_args(ctx, k_fn_run, args));
    return AK_DISPATCH(ctx, mha_run_cpu(ctx, args, workspace, workspace_bytes),
                       ak_fail(AK_ERR_UNSUPPORTED,
                               "%s: no CUDA kernel for paged MHA yet; run it on a CPU context",
                               k_fn_run));
}
