/*
 * pagetable.c -- public entry points for the page-table builders, the top-k index transforms and
 * the DeepSeek V4 index lists (semantics.md 9.2-9.3, 10.2, 10.5, 11). Every descriptor is checked
 * here; values inside the tensors are checked by the CPU backend before it writes anything.
 */
#include "common/internal.h"
#include "cpu/cpu.h"
#include "cuda/cuda_backend.h"

static const ak_dtype k_i32[] = {AK_DTYPE_I32};

/* A required int32 tensor of rank `ndim` with the listed extents (-1 = any). */
static ak_status check_i32(const ak_context *ctx, const char *fn, const char *arg,
                           const char *shape, const ak_tensor *t, int32_t ndim,
                           const int64_t *dims) {
    ak_tcheck c = {fn, arg, shape};
    AK_TRY(ak_check_shape(ctx, &c, t, ndim, dims));
    return ak_check_dtype(&c, t, 1, k_i32);
}

static ak_status check_page_size(const char *fn, int32_t page_size) {
    if (page_size < 1 || page_size > 1024)
        return ak_fail(AK_ERR_INVALID_ARGUMENT, "%s: page_size is %d, expected 1..1024", fn,
                       (int)page_size);
    return AK_OK;
}

/* The token table and the per-request vectors shared by both builders; *b receives B. */
static ak_status check_token_table_args(const ak_context *ctx, const char *fn,
                                        const ak_tensor *req_to_token, const ak_tensor *req_ids,
                                        const ak_tensor *kv_start, const ak_tensor *seq_lens,
                                        int32_t page_size, int64_t *b) {
    int64_t any2[2] = {-1, -1};
    AK_TRY(check_i32(ctx, fn, "req_to_token", "[pool_rows, max_ctx]", req_to_token, 2, any2));
    int64_t any1[1] = {-1};
    AK_TRY(check_i32(ctx, fn, "seq_lens", "[B]", seq_lens, 1, any1));
    int64_t bd[1] = {seq_lens->shape[0]};
    if (req_ids != NULL) AK_TRY(check_i32(ctx, fn, "req_ids", "[B]", req_ids, 1, bd));
    if (kv_start != NULL) AK_TRY(check_i32(ctx, fn, "kv_start", "[B]", kv_start, 1, bd));
    AK_TRY(check_page_size(fn, page_size));
    if (seq_lens->shape[0] > INT32_MAX)
        return ak_fail(AK_ERR_INVALID_ARGUMENT, "%s: seq_lens: B is %lld, expected <= 2^31 - 1", fn,
                       (long long)seq_lens->shape[0]);
    *b = seq_lens->shape[0];
    return AK_OK;
}

ak_status ak_block_table_build(ak_context *ctx, const ak_tensor *req_to_token,
                               const ak_tensor *req_ids, const ak_tensor *kv_start,
                               const ak_tensor *seq_lens, int32_t page_size,
                               ak_tensor *block_table) {
    const char *fn = "ak_block_table_build";
    AK_TRY(ak_check_context(ctx, fn));
    int64_t b = 0;
    AK_TRY(
        check_token_table_args(ctx, fn, req_to_token, req_ids, kv_start, seq_lens, page_size, &b));
    int64_t dims[2] = {b, -1};
    AK_TRY(check_i32(ctx, fn, "block_table", "[B, max_pages]", block_table, 2, dims));
    return AK_DISPATCH(ctx,
                       ak_cpu_block_table_build(ctx, req_to_token, req_ids, kv_start, seq_lens,
                                                page_size, block_table),
                       ak_cuda_block_table_build(ctx, req_to_token, req_ids, kv_start, seq_lens,
                                                 page_size, block_table));
}

ak_status ak_csr_build(ak_context *ctx, const ak_tensor *req_to_token, const ak_tensor *req_ids,
                       const ak_tensor *kv_start, const ak_tensor *seq_lens, int32_t page_size,
                       ak_tensor *kv_indptr, ak_tensor *kv_indices, ak_tensor *kv_last_page_len) {
    const char *fn = "ak_csr_build";
    AK_TRY(ak_check_context(ctx, fn));
    int64_t b = 0;
    AK_TRY(
        check_token_table_args(ctx, fn, req_to_token, req_ids, kv_start, seq_lens, page_size, &b));
    int64_t dp[1] = {b + 1}, di[1] = {-1}, dl[1] = {b};
    AK_TRY(check_i32(ctx, fn, "kv_indptr", "[B+1]", kv_indptr, 1, dp));
    AK_TRY(check_i32(ctx, fn, "kv_indices", "[capacity]", kv_indices, 1, di));
    if (kv_last_page_len != NULL)
        AK_TRY(check_i32(ctx, fn, "kv_last_page_len", "[B]", kv_last_page_len, 1, dl));
    return AK_DISPATCH(ctx,
                       ak_cpu_csr_build(ctx, req_to_token, req_ids, kv_start, seq_lens, page_size,
                                        kv_indptr, kv_indices, kv_last_page_len),
                       ak_cuda_csr_build(ctx, req_to_token, req_ids, kv_start, seq_lens, page_size,
                                         kv_indptr, kv_indices, kv_last_page_len));
}

ak_status ak_transform_check(const ak_context *ctx, const char *fn, const ak_transform *tf) {
    if (tf == NULL) return AK_OK;
    if (tf->kind != AK_TRANSFORM_NONE && tf->kind != AK_TRANSFORM_PAGED &&
        tf->kind != AK_TRANSFORM_RAGGED)
        return ak_fail(AK_ERR_INVALID_ARGUMENT,
                       "%s: tf->kind is %d, expected NONE (0), PAGED (1) or RAGGED (2)", fn,
                       (int)tf->kind);
    int64_t any1[1] = {-1};
    int64_t b = -1; /* requests, when some tensor fixes it */
    if (tf->kind == AK_TRANSFORM_PAGED) {
        int64_t any2[2] = {-1, -1};
        AK_TRY(check_i32(ctx, fn, "tf->table", "[B, width]", tf->table, 2, any2));
        AK_TRY(check_page_size(fn, tf->page_size));
        b = tf->table->shape[0];
    }
    if (tf->kind == AK_TRANSFORM_RAGGED) {
        AK_TRY(check_i32(ctx, fn, "tf->cu_seqlens_k", "[B+1]", tf->cu_seqlens_k, 1, any1));
        if (tf->cu_seqlens_k->shape[0] < 1)
            return ak_fail(AK_ERR_INVALID_ARGUMENT,
                           "%s: tf->cu_seqlens_k: shape[0] is 0, expected B + 1 >= 1", fn);
        b = tf->cu_seqlens_k->shape[0] - 1;
    }
    if (tf->cu_seqlens_q != NULL) {
        int64_t dq[1] = {b >= 0 ? b + 1 : -1};
        AK_TRY(check_i32(ctx, fn, "tf->cu_seqlens_q", "[B+1]", tf->cu_seqlens_q, 1, dq));
        if (tf->cu_seqlens_q->shape[0] < 1)
            return ak_fail(AK_ERR_INVALID_ARGUMENT,
                           "%s: tf->cu_seqlens_q: shape[0] is 0, expected B + 1 >= 1", fn);
    }
    return AK_OK;
}

ak_status ak_topk_transform(ak_context *ctx, const ak_transform *tf, const ak_tensor *idx,
                            ak_tensor *out) {
    const char *fn = "ak_topk_transform";
    AK_TRY(ak_check_context(ctx, fn));
    if (tf == NULL) return ak_fail(AK_ERR_INVALID_ARGUMENT, "%s: tf is NULL", fn);
    AK_TRY(ak_transform_check(ctx, fn, tf));
    int64_t any2[2] = {-1, -1};
    AK_TRY(check_i32(ctx, fn, "idx", "[rows, k]", idx, 2, any2));
    int64_t d[2] = {idx->shape[0], idx->shape[1]};
    AK_TRY(check_i32(ctx, fn, "out", "[rows, k]", out, 2, d));
    if (idx->data == out->data && idx->strides[0] != out->strides[0])
        return ak_fail(AK_ERR_INVALID_ARGUMENT,
                       "%s: out aliases idx with row stride %lld != %lld; an aliased out must "
                       "have idx's strides",
                       fn, (long long)out->strides[0], (long long)idx->strides[0]);
    return AK_DISPATCH(ctx, ak_cpu_topk_transform(ctx, tf, idx, out),
                       ak_cuda_topk_transform(ctx, tf, idx, out));
}

/* seq_lens [B] and the optional cu_seqlens_q [B+1] of the V4 builders. */
static ak_status check_v4_rows(const ak_context *ctx, const char *fn, const ak_tensor *seq_lens,
                               const ak_tensor *cu_seqlens_q) {
    int64_t any1[1] = {-1};
    AK_TRY(check_i32(ctx, fn, "seq_lens", "[B]", seq_lens, 1, any1));
    if (cu_seqlens_q != NULL) {
        int64_t dq[1] = {seq_lens->shape[0] + 1};
        AK_TRY(check_i32(ctx, fn, "cu_seqlens_q", "[B+1]", cu_seqlens_q, 1, dq));
    }
    return AK_OK;
}

static ak_status check_window(const char *fn, int32_t window) {
    if (window < 1 || window > 65536)
        return ak_fail(AK_ERR_INVALID_ARGUMENT, "%s: window is %d, expected 1..65536 (128 in V4)",
                       fn, (int)window);
    return AK_OK;
}

ak_status ak_dsv4_swa_indices(ak_context *ctx, const ak_tensor *seq_lens,
                              const ak_tensor *cu_seqlens_q, const ak_tensor *table,
                              int32_t page_size, int32_t window, ak_tensor *indices,
                              ak_tensor *lengths) {
    const char *fn = "ak_dsv4_swa_indices";
    AK_TRY(ak_check_context(ctx, fn));
    AK_TRY(check_v4_rows(ctx, fn, seq_lens, cu_seqlens_q));
    int64_t dt[2] = {seq_lens->shape[0], -1};
    AK_TRY(check_i32(ctx, fn, "table", "[B, width]", table, 2, dt));
    AK_TRY(check_page_size(fn, page_size));
    AK_TRY(check_window(fn, window));
    int64_t di[2] = {-1, window};
    AK_TRY(check_i32(ctx, fn, "indices", "[rows, window]", indices, 2, di));
    int64_t dl[1] = {indices->shape[0]};
    AK_TRY(check_i32(ctx, fn, "lengths", "[rows]", lengths, 1, dl));
    return AK_DISPATCH(ctx,
                       ak_cpu_dsv4_swa_indices(ctx, seq_lens, cu_seqlens_q, table, page_size,
                                               window, indices, lengths),
                       ak_cuda_dsv4_swa_indices(ctx, seq_lens, cu_seqlens_q, table, page_size,
                                                window, indices, lengths));
}

ak_status ak_dsv4_combine_indices(ak_context *ctx, const ak_tensor *raw_topk,
                                  const ak_tensor *seq_lens, const ak_tensor *cu_seqlens_q,
                                  int32_t ratio, int32_t topk, int32_t c_max, int32_t window,
                                  ak_tensor *indices, ak_tensor *lengths, ak_tensor *swa_offsets) {
    const char *fn = "ak_dsv4_combine_indices";
    AK_TRY(ak_check_context(ctx, fn));
    AK_TRY(check_v4_rows(ctx, fn, seq_lens, cu_seqlens_q));
    if (ratio != 0 && ratio != 4 && ratio != 128)
        return ak_fail(AK_ERR_INVALID_ARGUMENT, "%s: ratio is %d, expected 0, 4 or 128", fn,
                       (int)ratio);
    if (topk < 0 || topk > 1048576)
        return ak_fail(AK_ERR_INVALID_ARGUMENT, "%s: topk is %d, expected 0..1048576", fn,
                       (int)topk);
    if (ratio == 0 && topk != 0)
        return ak_fail(AK_ERR_INVALID_ARGUMENT,
                       "%s: topk is %d with ratio 0 (SWA only), expected 0", fn, (int)topk);
    if (ratio == 0 && raw_topk != NULL)
        return ak_fail(AK_ERR_INVALID_ARGUMENT,
                       "%s: raw_topk is given with ratio 0 (SWA only), expected NULL", fn);
    if (c_max < (ratio != 0 ? 1 : 0) || c_max > INT32_MAX / 2)
        return ak_fail(AK_ERR_INVALID_ARGUMENT, "%s: c_max is %d, expected %s", fn, (int)c_max,
                       ratio != 0 ? ">= 1 (max(max_seq_len / ratio, 1))" : ">= 0");
    AK_TRY(check_window(fn, window));
    int64_t di[2] = {-1, -1};
    AK_TRY(check_i32(ctx, fn, "indices", "[T, W]", indices, 2, di));
    if (indices->shape[1] < (int64_t)topk + window)
        return ak_fail(AK_ERR_INVALID_ARGUMENT,
                       "%s: indices: width W is %lld, expected >= topk + window = %lld "
                       "(align_up(topk + window, 128) is customary)",
                       fn, (long long)indices->shape[1], (long long)topk + window);
    int64_t t = indices->shape[0];
    if (raw_topk != NULL) {
        int64_t dr[2] = {t, topk};
        AK_TRY(check_i32(ctx, fn, "raw_topk", "[T, topk]", raw_topk, 2, dr));
    }
    int64_t dl[1] = {t};
    AK_TRY(check_i32(ctx, fn, "lengths", "[T]", lengths, 1, dl));
    if (swa_offsets != NULL) {
        int64_t ds[1] = {seq_lens->shape[0] + 1};
        AK_TRY(check_i32(ctx, fn, "swa_offsets", "[B+1]", swa_offsets, 1, ds));
    }
    return AK_DISPATCH(
        ctx,
        ak_cpu_dsv4_combine_indices(ctx, raw_topk, seq_lens, cu_seqlens_q, ratio, topk, c_max,
                                    window, indices, lengths, swa_offsets),
        ak_cuda_dsv4_combine_indices(ctx, raw_topk, seq_lens, cu_seqlens_q, ratio, topk, c_max,
                                     window, indices, lengths, swa_offsets));
}
