/*
 * indexer.c -- public entry points for the DSA lightning indexer logits (ragged and paged) and
 * top-k (semantics.md 8, 9.1). Descriptors are checked here; lengths, ranges and cu_seqlens by
 * the CPU backend before it writes. No CUDA kernels exist for these ops yet.
 */
#include "common/internal.h"
#include "cpu/cpu.h"
#include "cuda/cuda_backend.h"

#define IDX_HEAD_DIM 128
#define TOPK_MAX_K 2048

static const ak_dtype k_i32[] = {AK_DTYPE_I32};
static const ak_dtype k_f32[] = {AK_DTYPE_F32};
static const ak_dtype k_e4m3[] = {AK_DTYPE_E4M3};

static ak_status check_t(const ak_context *ctx, const char *fn, const char *arg, const char *shape,
                         const ak_tensor *t, int32_t ndim, const int64_t *dims, ak_dtype dt) {
    ak_tcheck c = {fn, arg, shape};
    AK_TRY(ak_check_shape(ctx, &c, t, ndim, dims));
    const ak_dtype *ok = dt == AK_DTYPE_I32 ? k_i32 : dt == AK_DTYPE_F32 ? k_f32 : k_e4m3;
    return ak_check_dtype(&c, t, 1, ok);
}

static ak_status check_heads(const char *fn, const char *arg, int64_t h) {
    if (h < 1 || h > 64)
        return ak_fail(AK_ERR_INVALID_ARGUMENT,
                       "%s: %s: %lld heads, expected 1..64 (pad with zero-weight heads)", fn, arg,
                       (long long)h);
    return AK_OK;
}

static ak_status no_cuda(const char *fn) {
    return ak_fail(AK_ERR_UNSUPPORTED,
                   "%s: no CUDA kernel for this op yet; run it on a CPU context", fn);
}

ak_status ak_indexer_logits_ragged(ak_context *ctx, const ak_tensor *q, const ak_tensor *weights,
                                   const ak_tensor *k, const ak_tensor *k_scale,
                                   const ak_tensor *ks, const ak_tensor *ke, int32_t compressed,
                                   int32_t clean_logits, ak_tensor *logits) {
    const char *fn = "ak_indexer_logits_ragged";
    AK_TRY(ak_check_context(ctx, fn));
    int64_t dq[3] = {-1, -1, IDX_HEAD_DIM};
    AK_TRY(check_t(ctx, fn, "q", "[S, H, 128]", q, 3, dq, AK_DTYPE_E4M3));
    AK_TRY(check_heads(fn, "q", q->shape[1]));
    int64_t s = q->shape[0], h = q->shape[1];
    int64_t dw[2] = {s, h};
    AK_TRY(check_t(ctx, fn, "weights", "[S, H]", weights, 2, dw, AK_DTYPE_F32));
    int64_t dk[2] = {-1, IDX_HEAD_DIM};
    AK_TRY(check_t(ctx, fn, "k", "[S_kv, 128]", k, 2, dk, AK_DTYPE_E4M3));
    int64_t dks[1] = {k->shape[0]}, ds[1] = {s};
    AK_TRY(check_t(ctx, fn, "k_scale", "[S_kv]", k_scale, 1, dks, AK_DTYPE_F32));
    AK_TRY(check_t(ctx, fn, "ks", "[S]", ks, 1, ds, AK_DTYPE_I32));
    AK_TRY(check_t(ctx, fn, "ke", "[S]", ke, 1, ds, AK_DTYPE_I32));
    if (compressed != 0 && compressed != 1)
        return ak_fail(AK_ERR_INVALID_ARGUMENT, "%s: compressed is %d, expected 0 or 1", fn,
                       (int)compressed);
    if (clean_logits != 0 && clean_logits != 1)
        return ak_fail(AK_ERR_INVALID_ARGUMENT, "%s: clean_logits is %d, expected 0 or 1", fn,
                       (int)clean_logits);
    int64_t dl[2] = {s, -1};
    AK_TRY(check_t(ctx, fn, "logits", "[S, width]", logits, 2, dl, AK_DTYPE_F32));
    if (!compressed && logits->shape[1] < k->shape[0])
        return ak_fail(AK_ERR_INVALID_ARGUMENT,
                       "%s: logits: width %lld < S_kv %lld; with compressed = 0 column j holds "
                       "key j",
                       fn, (long long)logits->shape[1], (long long)k->shape[0]);
    if (k->shape[0] > INT32_MAX)
        return ak_fail(AK_ERR_INVALID_ARGUMENT, "%s: k: S_kv is %lld, expected <= 2^31 - 1", fn,
                       (long long)k->shape[0]);
    if (ctx->backend == AK_BACKEND_CUDA) return no_cuda(fn);
    return ak_cpu_indexer_logits_ragged(ctx, q, weights, k, k_scale, ks, ke, compressed,
                                        clean_logits, logits);
}

ak_status ak_indexer_logits_paged(ak_context *ctx, const ak_tensor *q, const ak_tensor *weights,
                                  const ak_cache *cache, const ak_tensor *block_table,
                                  const ak_tensor *context_lens, int32_t clean_logits,
                                  ak_tensor *logits) {
    const char *fn = "ak_indexer_logits_paged";
    AK_TRY(ak_check_context(ctx, fn));
    int64_t dq[4] = {-1, -1, -1, IDX_HEAD_DIM};
    AK_TRY(check_t(ctx, fn, "q", "[B, next_n, H, 128]", q, 4, dq, AK_DTYPE_E4M3));
    AK_TRY(check_heads(fn, "q", q->shape[2]));
    int64_t b = q->shape[0], next_n = q->shape[1], rows;
    if (!ak_mul_i64(b, next_n, &rows) || rows > INT32_MAX)
        return ak_fail(AK_ERR_INVALID_ARGUMENT, "%s: q: B * next_n overflows", fn);
    int64_t dw[2] = {rows, q->shape[2]};
    AK_TRY(check_t(ctx, fn, "weights", "[B * next_n, H]", weights, 2, dw, AK_DTYPE_F32));
    const ak_layout want[1] = {AK_LAYOUT_INDEXER_FP8};
    AK_TRY(ak_check_cache(ctx, fn, "cache", cache, 1, want));
    int64_t db[2] = {b, -1};
    AK_TRY(check_t(ctx, fn, "block_table", "[B, max_pages]", block_table, 2, db, AK_DTYPE_I32));
    if (context_lens == NULL || context_lens->ndim != 2) {
        int64_t dc[1] = {b};
        AK_TRY(check_t(ctx, fn, "context_lens", "[B] or [B, next_n]", context_lens, 1, dc,
                       AK_DTYPE_I32));
    } else {
        int64_t dc[2] = {b, next_n};
        AK_TRY(check_t(ctx, fn, "context_lens", "[B] or [B, next_n]", context_lens, 2, dc,
                       AK_DTYPE_I32));
    }
    if (clean_logits != 0 && clean_logits != 1)
        return ak_fail(AK_ERR_INVALID_ARGUMENT, "%s: clean_logits is %d, expected 0 or 1", fn,
                       (int)clean_logits);
    int64_t dl[2] = {rows, -1};
    AK_TRY(check_t(ctx, fn, "logits", "[B * next_n, width]", logits, 2, dl, AK_DTYPE_F32));
    if (ctx->backend == AK_BACKEND_CUDA) return no_cuda(fn);
    return ak_cpu_indexer_logits_paged(ctx, q, weights, cache, block_table, context_lens,
                                       clean_logits, logits);
}

ak_status ak_topk(ak_context *ctx, const ak_tensor *logits, const ak_tensor *lengths,
                  const ak_tensor *row_starts, int32_t k, int32_t deterministic,
                  const ak_transform *tf, ak_tensor *out) {
    const char *fn = "ak_topk";
    AK_TRY(ak_check_context(ctx, fn));
    int64_t d2[2] = {-1, -1};
    AK_TRY(check_t(ctx, fn, "logits", "[rows, width]", logits, 2, d2, AK_DTYPE_F32));
    int64_t rows = logits->shape[0];
    if (logits->shape[1] > INT32_MAX)
        return ak_fail(AK_ERR_INVALID_ARGUMENT, "%s: logits: width %lld, expected <= 2^31 - 1", fn,
                       (long long)logits->shape[1]);
    int64_t dr[1] = {rows};
    AK_TRY(check_t(ctx, fn, "lengths", "[rows]", lengths, 1, dr, AK_DTYPE_I32));
    if (row_starts != NULL)
        AK_TRY(check_t(ctx, fn, "row_starts", "[rows]", row_starts, 1, dr, AK_DTYPE_I32));
    if (k < 1 || k > TOPK_MAX_K)
        return ak_fail(AK_ERR_INVALID_ARGUMENT, "%s: k is %d, expected 1..%d", fn, (int)k,
                       TOPK_MAX_K);
    if (deterministic != 0 && deterministic != 1)
        return ak_fail(AK_ERR_INVALID_ARGUMENT, "%s: deterministic is %d, expected 0 or 1", fn,
                       (int)deterministic);
    AK_TRY(ak_transform_check(ctx, fn, tf));
    int64_t dout[2] = {rows, k};
    AK_TRY(check_t(ctx, fn, "out", "[rows, k]", out, 2, dout, AK_DTYPE_I32));
    if (ctx->backend == AK_BACKEND_CUDA) return no_cuda(fn);
    return ak_cpu_topk(ctx, logits, lengths, row_starts, k, deterministic, tf, out);
}
