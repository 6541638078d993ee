/*
 * pagetable.cu -- CUDA page-table builders and index transforms (semantics.md 9.2-9.3, 10.2,
 * 10.5, 11). One launch each, sequence lengths read on the device only (no host synchronisation),
 * fixed-width outputs padded with -1, so every function is capturable in a CUDA graph. Values the
 * CPU backend rejects (out-of-range request ids, positions, pages) give -1 entries here (rule I1).
 * Prefix sums over the requests are recomputed by each block that needs one: B is at most a few
 * thousand, so a block-wide reduction is cheaper than a second launch and needs no scratch memory.
 */
#include "cuda/cuda_backend.h"
#include "cuda/cuda_common.cuh"

#include <stdint.h>

#define AK_PT_THREADS 256
#define AK_CSR_PER 16                             /* csr entries per thread and block step */
#define AK_CSR_CHUNK (AK_CSR_PER * AK_PT_THREADS) /* csr entries per block step */

/* A 1-D int32 view with a stride (NULL data = absent). */
struct ak_i32v {
    const int32_t *p;
    int64_t s;
};
static ak_i32v ak_i32v_of(const ak_tensor *t) {
    ak_i32v v;
    v.p = t ? (const int32_t *)t->data : NULL;
    v.s = t ? t->strides[0] : 0;
    return v;
}
__device__ __forceinline__ int32_t ak_at(ak_i32v v, int64_t i) { return v.p[i * v.s]; }

/* A 2-D int32 view. */
struct ak_i32m {
    const int32_t *p;
    int64_t rs;
    int32_t rows, cols;
};
static ak_i32m ak_i32m_of(const ak_tensor *t) {
    ak_i32m m;
    m.p = t ? (const int32_t *)t->data : NULL;
    m.rs = t ? t->strides[0] : 0;
    m.rows = t ? (int32_t)t->shape[0] : 0;
    m.cols = t ? (int32_t)t->shape[1] : 0;
    return m;
}

/* Sum over the block (up to 1024 threads) of one int64 per thread; every thread gets it. */
__device__ int64_t ak_block_sum(int64_t v) {
    __shared__ int64_t part[32];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    const int w = threadIdx.x >> 5;
    __syncthreads(); /* part[] may still be read by a previous call */
    if ((threadIdx.x & 31) == 0) part[w] = v;
    __syncthreads();
    int64_t s = 0;
    for (int i = 0; i < (int)(blockDim.x >> 5); i++) s += part[i];
    return s;
}

/* Token-table entry (request row `req`, position pos), -1 when either is out of range. */
__device__ __forceinline__ int32_t ak_r2t(ak_i32m r2t, int64_t req, int64_t pos) {
    if ((uint64_t)req >= (uint64_t)r2t.rows || (uint64_t)pos >= (uint64_t)r2t.cols) return -1;
    return r2t.p[req * r2t.rs + pos];
}

/* Entry count of a request: tokens (P = 1) or pages. */
__device__ __forceinline__ int64_t ak_entry_count(int32_t len, int32_t P) {
    return len <= 0 ? 0 : ((int64_t)len + P - 1) / P;
}

/* ---- block table --------------------------------------------------------------------------- */

__global__ void ak_block_table_kernel(ak_i32m r2t, ak_i32v req_ids, ak_i32v kv_start,
                                      ak_i32v seq_lens, int32_t P, int32_t B, int32_t W,
                                      int32_t *bt, int64_t bt_rs) {
    const int64_t total = (int64_t)B * W;
    for (int64_t it = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; it < total;
         it += (int64_t)gridDim.x * blockDim.x) {
        const int32_t b = (int32_t)(it / W), p = (int32_t)(it - (int64_t)b * W);
        int32_t v = -1;
        if (p < ak_entry_count(ak_at(seq_lens, b), P)) {
            int64_t req = req_ids.p ? ak_at(req_ids, b) : b;
            int64_t pos = (kv_start.p ? ak_at(kv_start, b) : 0) + (int64_t)p * P;
            int32_t slot = ak_r2t(r2t, req, pos);
            v = slot >= 0 ? slot / P : -1;
        }
        bt[(int64_t)b * bt_rs + p] = v;
    }
}

extern "C" ak_status ak_cuda_block_table_build(ak_context *ctx, const ak_tensor *req_to_token,
                                               const ak_tensor *req_ids, const ak_tensor *kv_start,
                                               const ak_tensor *seq_lens, int32_t page_size,
                                               ak_tensor *block_table) {
    AK_CUDA_ENTER(ctx);
    const int32_t B = (int32_t)block_table->shape[0], W = (int32_t)block_table->shape[1];
    const int64_t total = (int64_t)B * W;
    if (total == 0) return AK_OK;
    int64_t blocks = (total + AK_PT_THREADS - 1) / AK_PT_THREADS;
    if (blocks > 65535) blocks = 65535;
    ak_block_table_kernel<<<(int)blocks, AK_PT_THREADS, 0, ak_stream(ctx)>>>(
        ak_i32m_of(req_to_token), ak_i32v_of(req_ids), ak_i32v_of(kv_start), ak_i32v_of(seq_lens),
        page_size, B, W, (int32_t *)block_table->data, block_table->strides[0]);
    AK_CUDA_CHECK_LAUNCH("ak_block_table_kernel");
    return AK_OK;
}

/* ---- CSR ------------------------------------------------------------------------------------- */

/* grid (X, min(B, 65535)): block (x, y) handles requests y, y + gridDim.y, ... and in each the
   entry chunks x, x + X, ... of AK_CSR_CHUNK entries (every thread AK_CSR_PER independent reads in
   flight); a request's start is a block-wide sum over the earlier requests. The total (for
   indptr[B] and the -1 tail) is summed after the copy, off its critical path. Entries past the
   capacity are dropped (truncation); [total, capacity) gets -1. */
__global__ void ak_csr_kernel(ak_i32m r2t, ak_i32v req_ids, ak_i32v kv_start, ak_i32v seq_lens,
                              int32_t P, int32_t B, int32_t *indptr, int64_t indptr_s,
                              int32_t *indices, int64_t indices_s, int64_t cap, int32_t *last,
                              int64_t last_s) {
    for (int32_t b = blockIdx.y; b < B; b += gridDim.y) {
        int64_t part = 0;
        for (int32_t j = threadIdx.x; j < b; j += blockDim.x)
            part += ak_entry_count(ak_at(seq_lens, j), P);
        const int64_t start = ak_block_sum(part);
        const int32_t len = ak_at(seq_lens, b);
        const int64_t cnt = ak_entry_count(len, P);
        if (blockIdx.x == 0 && threadIdx.x == 0) {
            indptr[(int64_t)b * indptr_s] = (int32_t)(start < cap ? start : cap);
            if (last)
                last[(int64_t)b * last_s] = cnt > 0 ? (int32_t)(len - (int64_t)P * (cnt - 1)) : 0;
        }
        const int64_t req = req_ids.p ? ak_at(req_ids, b) : b;
        const int64_t s0 = kv_start.p ? ak_at(kv_start, b) : 0;
        const int64_t end = cnt < cap - start ? cnt : cap - start; /* entries that fit */
        for (int64_t c0 = (int64_t)blockIdx.x * AK_CSR_CHUNK; c0 < end;
             c0 += (int64_t)gridDim.x * AK_CSR_CHUNK) {
            int32_t v[AK_CSR_PER];
#pragma unroll
            for (int k = 0; k < AK_CSR_PER; k++) {
                const int64_t e = c0 + k * AK_PT_THREADS + threadIdx.x;
                v[k] = e < end ? ak_r2t(r2t, req, s0 + e * P) : -1;
            }
#pragma unroll
            for (int k = 0; k < AK_CSR_PER; k++) {
                const int64_t e = c0 + k * AK_PT_THREADS + threadIdx.x;
                if (e < end) indices[(start + e) * indices_s] = v[k] >= 0 ? v[k] / P : -1;
            }
        }
    }
    int64_t tot = 0;
    for (int32_t j = threadIdx.x; j < B; j += blockDim.x)
        tot += ak_entry_count(ak_at(seq_lens, j), P);
    const int64_t total = ak_block_sum(tot);
    const int32_t bid = blockIdx.y * gridDim.x + blockIdx.x, nb = gridDim.x * gridDim.y;
    if (bid == 0 && threadIdx.x == 0)
        indptr[(int64_t)B * indptr_s] = (int32_t)(total < cap ? total : cap);
    const int64_t first = total < cap ? total : cap;
    for (int64_t e = first + (int64_t)bid * blockDim.x + threadIdx.x; e < cap;
         e += (int64_t)nb * blockDim.x)
        indices[e * indices_s] = -1;
}

extern "C" ak_status ak_cuda_csr_build(ak_context *ctx, const ak_tensor *req_to_token,
                                       const ak_tensor *req_ids, const ak_tensor *kv_start,
                                       const ak_tensor *seq_lens, int32_t page_size,
                                       ak_tensor *kv_indptr, ak_tensor *kv_indices,
                                       ak_tensor *kv_last_page_len) {
    AK_CUDA_ENTER(ctx);
    const int32_t B = (int32_t)seq_lens->shape[0];
    const int64_t cap = kv_indices->shape[0];
    /* chunks per request from the table width (a request's entries rarely exceed it; more are
       still covered by the grid-stride loop), so long requests spread over many SMs */
    const int64_t per_req = (req_to_token->shape[1] + page_size - 1) / page_size;
    int64_t x = (per_req + AK_CSR_CHUNK - 1) / AK_CSR_CHUNK;
    x = x < 1 ? 1 : x > 64 ? 64 : x;
    dim3 grid((unsigned)x, (unsigned)(B < 1 ? 1 : B > 65535 ? 65535 : B));
    ak_csr_kernel<<<grid, AK_PT_THREADS, 0, ak_stream(ctx)>>>(
        ak_i32m_of(req_to_token), ak_i32v_of(req_ids), ak_i32v_of(kv_start), ak_i32v_of(seq_lens),
        page_size, B, (int32_t *)kv_indptr->data, kv_indptr->strides[0],
        (int32_t *)kv_indices->data, cap > 0 ? kv_indices->strides[0] : 0, cap,
        kv_last_page_len ? (int32_t *)kv_last_page_len->data : NULL,
        kv_last_page_len ? kv_last_page_len->strides[0] : 0);
    AK_CUDA_CHECK_LAUNCH("ak_csr_kernel");
    return AK_OK;
}

/* ---- row -> request ----------------------------------------------------------------------------- */

/* Request of row t: t itself without cu_seqlens_q (valid below nreq), else the b with
   cu[b] <= t < cu[b+1]; -1 when none. The V4 lists (below_first = 0) give rows before cu[0] to
   request 0, as the CPU backend does. */
__device__ __forceinline__ int32_t ak_row_request(ak_i32v cu, int32_t nreq, int64_t t,
                                                  bool below_first = true) {
    if (cu.p == NULL) return t < nreq ? (int32_t)t : -1;
    if (nreq <= 0 || (below_first && t < ak_at(cu, 0)) || t >= ak_at(cu, nreq)) return -1;
    int32_t lo = 0, hi = nreq - 1; /* largest b with cu[b] <= t */
    while (lo < hi) {
        int32_t mid = (lo + hi + 1) >> 1;
        if (ak_at(cu, mid) <= t) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

/* Slot of request-local position p through a token table (P = 1) or a block table. */
__device__ __forceinline__ int32_t ak_paged_slot(ak_i32m table, int32_t P, int32_t b, int64_t p) {
    if (p < 0 || b < 0 || b >= table.rows) return -1;
    const int64_t col = p / P;
    if (col >= table.cols) return -1;
    const int32_t e = table.p[(int64_t)b * table.rs + col];
    if (e < 0) return -1;
    const int64_t s = (int64_t)e * P + (p - col * P);
    return s <= INT32_MAX ? (int32_t)s : -1;
}

/* ---- top-k transform ----------------------------------------------------------------------------- */

/* Request of row t for a whole block (every thread calls it): with cu_seqlens_q the threads test
   the requests in parallel (one round of loads instead of a dependent binary search); a request
   with cu[b] <= t < cu[b + 1] is unique when cu is non-decreasing, as the CPU backend requires. */
__device__ int32_t ak_block_row_request(ak_i32v cu, int32_t nreq, int64_t t) {
    if (cu.p == NULL) return t < nreq ? (int32_t)t : -1;
    __shared__ int32_t found;
    __syncthreads(); /* found may still be read for the previous row */
    if (threadIdx.x == 0) found = -1;
    __syncthreads();
    for (int32_t b = threadIdx.x; b < nreq; b += blockDim.x)
        if (ak_at(cu, b) <= t && t < ak_at(cu, b + 1)) found = b;
    __syncthreads();
    return found;
}

/* grid (X, min(rows, 65535)): block (x, y) handles rows y, y + gridDim.y, ... and in each the
   4-column groups x * 256 + thread, stepping by X * 256; the thread's first indices are loaded
   before the row's request is looked up. vec: idx and out rows 16-byte aligned, k % 4 == 0. */
__global__ void ak_transform_kernel(int32_t kind, ak_i32m table, int32_t P, ak_i32v cu_q,
                                    int32_t nreq, ak_i32v cu_k, const int32_t *idx, int64_t idx_rs,
                                    int32_t *out, int64_t out_rs, int32_t rows, int32_t k,
                                    bool vec) {
    const int64_t step = (int64_t)gridDim.x * blockDim.x * 4;
    for (int64_t t = blockIdx.y; t < rows; t += gridDim.y) {
        int64_t j = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * 4;
        int32_t x[4];
        const int32_t *ip = idx + t * idx_rs;
        int32_t *op = out + t * out_rs;
        /* read before the write: out may alias idx (each thread owns its 4 entries) */
        if (vec && j < k) {
            int4 q = *(const int4 *)(ip + j);
            x[0] = q.x, x[1] = q.y, x[2] = q.z, x[3] = q.w;
        } else {
            for (int c = 0; c < 4; c++) x[c] = j + c < k ? ip[j + c] : -1;
        }
        const int32_t b = ak_block_row_request(cu_q, nreq, t);
        int32_t off = 0, len = 0;
        if (kind == AK_TRANSFORM_RAGGED && b >= 0) {
            off = ak_at(cu_k, b);
            len = ak_at(cu_k, b + 1) - off;
        }
        while (j < k) {
            int32_t v[4];
            for (int c = 0; c < 4; c++) {
                v[c] = -1;
                if (x[c] < 0 || b < 0) continue;
                if (kind == AK_TRANSFORM_PAGED) v[c] = ak_paged_slot(table, P, b, x[c]);
                /* a position past the request's keys would address the next request: -1 */
                else if (kind == AK_TRANSFORM_RAGGED)
                    v[c] = (uint32_t)x[c] < (uint32_t)len ? x[c] + off : -1;
                else v[c] = x[c];
            }
            if (vec) {
                *(int4 *)(op + j) = make_int4(v[0], v[1], v[2], v[3]);
            } else {
                for (int c = 0; c < 4; c++)
                    if (j + c < k) op[j + c] = v[c];
            }
            j += step;
            if (j >= k) break;
            if (vec) {
                int4 q = *(const int4 *)(ip + j);
                x[0] = q.x, x[1] = q.y, x[2] = q.z, x[3] = q.w;
            } else {
                for (int c = 0; c < 4; c++) x[c] = j + c < k ? ip[j + c] : -1;
            }
        }
    }
}

extern "C" ak_status ak_cuda_topk_transform(ak_context *ctx, const ak_transform *tf,
                                            const ak_tensor *idx, ak_tensor *out) {
    AK_CUDA_ENTER(ctx);
    const int32_t rows = (int32_t)idx->shape[0], k = (int32_t)idx->shape[1];
    const int64_t total = (int64_t)rows * k;
    if (total == 0) return AK_OK;
    ak_i32m table = ak_i32m_of(tf->kind == AK_TRANSFORM_PAGED ? tf->table : NULL);
    int32_t nreq;
    if (tf->cu_seqlens_q != NULL) nreq = (int32_t)tf->cu_seqlens_q->shape[0] - 1;
    else if (tf->kind == AK_TRANSFORM_PAGED) nreq = table.rows;
    else if (tf->kind == AK_TRANSFORM_RAGGED) nreq = (int32_t)tf->cu_seqlens_k->shape[0] - 1;
    else nreq = rows;
    const bool vec = k % 4 == 0 && (uintptr_t)idx->data % 16 == 0 &&
                     (uintptr_t)out->data % 16 == 0 && idx->strides[0] % 4 == 0 &&
                     out->strides[0] % 4 == 0;
    int64_t x = ((int64_t)k + 4 * AK_PT_THREADS - 1) / (4 * AK_PT_THREADS);
    x = x > 64 ? 64 : x;
    dim3 grid((unsigned)x, (unsigned)(rows > 65535 ? 65535 : rows));
    ak_transform_kernel<<<grid, AK_PT_THREADS, 0, ak_stream(ctx)>>>(
        (int32_t)tf->kind, table, tf->kind == AK_TRANSFORM_PAGED ? tf->page_size : 1,
        ak_i32v_of(tf->cu_seqlens_q), nreq,
        ak_i32v_of(tf->kind == AK_TRANSFORM_RAGGED ? tf->cu_seqlens_k : NULL),
        (const int32_t *)idx->data, idx->strides[0], (int32_t *)out->data, out->strides[0], rows, k,
        vec);
    AK_CUDA_CHECK_LAUNCH("ak_transform_kernel");
    return AK_OK;
}

/* ---- DeepSeek V4 sliding-window indices ------------------------------------------------------- */

__global__ void ak_swa_kernel(ak_i32v seq_lens, int32_t B, ak_i32v cu, ak_i32m table, int32_t P,
                              int32_t window, int32_t *indices, int64_t ind_rs, int32_t *lengths,
                              int64_t len_s, int32_t rows) {
    const int64_t total = (int64_t)rows * window;
    for (int64_t it = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; it < total;
         it += (int64_t)gridDim.x * blockDim.x) {
        const int64_t t = it / window, j = it - t * window;
        const int32_t b = ak_row_request(cu, B, t, false);
        int64_t pos = -1;
        if (b >= 0) {
            const int64_t sl = ak_at(seq_lens, b);
            pos = cu.p == NULL ? sl - 1 : sl - (ak_at(cu, b + 1) - ak_at(cu, b)) + (t - ak_at(cu, b));
        }
        indices[t * ind_rs + j] = pos - j >= 0 ? ak_paged_slot(table, P, b, pos - j) : -1;
        if (j == 0) {
            int64_t l = pos + 1 < window ? pos + 1 : window;
            lengths[t * len_s] = (int32_t)(l > 0 ? l : 0);
        }
    }
}

extern "C" ak_status ak_cuda_dsv4_swa_indices(ak_context *ctx, const ak_tensor *seq_lens,
                                              const ak_tensor *cu_seqlens_q,
                                              const ak_tensor *table, int32_t page_size,
                                              int32_t window, ak_tensor *indices,
                                              ak_tensor *lengths) {
    AK_CUDA_ENTER(ctx);
    const int32_t rows = (int32_t)indices->shape[0];
    const int64_t total = (int64_t)rows * window;
    if (total == 0) return AK_OK;
    int64_t blocks = (total + AK_PT_THREADS - 1) / AK_PT_THREADS;
    if (blocks > 65535) blocks = 65535;
    const int32_t B = cu_seqlens_q ? (int32_t)cu_seqlens_q->shape[0] - 1 : (int32_t)seq_lens->shape[0];
    ak_swa_kernel<<<(int)blocks, AK_PT_THREADS, 0, ak_stream(ctx)>>>(
        ak_i32v_of(seq_lens), B, ak_i32v_of(cu_seqlens_q), ak_i32m_of(table), page_size, window,
        (int32_t *)indices->data, indices->strides[0], (int32_t *)lengths->data,
        lengths->strides[0], rows);
    AK_CUDA_CHECK_LAUNCH("ak_swa_kernel");
    return AK_OK;
}

/* ---- DeepSeek V4 sparse-prefill index combiner ---------------------------------------------- */

__device__ __forceinline__ int64_t ak_gather_len(ak_i32v seq_lens, ak_i32v cu, int32_t r,
                                                 int32_t window) {
    const int64_t sl = ak_at(seq_lens, r);
    const int64_t ql = cu.p ? (int64_t)ak_at(cu, r + 1) - ak_at(cu, r) : 1;
    int64_t g = sl < ql + window - 1 ? sl : ql + window - 1;
    return g > 0 ? g : 0;
}

#define AK_CB_PRE 4 /* 128-entry chunks of raw top-k preloaded per warp */

/* grid (X, B + 1), one warp per query row: block (x, r < B) covers request r's rows with its 8
   warps, x-strided; y = B fills rows past the last request with -1 and length 0. Each lane writes
   4 consecutive entries per step (16-byte stores when vec: rows 16-byte aligned, W % 4 == 0). */
__global__ void ak_combine_kernel(ak_i32m raw, ak_i32v seq_lens, ak_i32v cu, int32_t B,
                                  int32_t ratio, int32_t topk, int32_t c_max, int32_t window,
                                  int32_t *indices, int64_t ind_rs, int32_t W, int32_t *lengths,
                                  int64_t len_s, int32_t T, int32_t *swa_off, int64_t off_s,
                                  bool vec) {
    const int32_t r = blockIdx.y;
    const int lane = threadIdx.x & 31;
    const int64_t w0 = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    const int64_t nw = (int64_t)gridDim.x * (blockDim.x >> 5);
    const int64_t cu0 = cu.p ? ak_at(cu, 0) : 0;
    if (r == B) {
        if (B == 0 && swa_off != NULL && blockIdx.x == 0 && threadIdx.x == 0) swa_off[0] = 0;
        const int64_t first = cu.p ? (int64_t)ak_at(cu, B) - cu0 : B;
        for (int64_t t = (first > 0 ? first : 0) + w0; t < T; t += nw) {
            int32_t *op = indices + t * ind_rs;
            for (int32_t j = 4 * lane; j < W; j += 128) {
                if (vec) *(int4 *)(op + j) = make_int4(-1, -1, -1, -1);
                else
                    for (int c = 0; c < 4 && j + c < W; c++) op[j + c] = -1;
            }
            if (lane == 0) lengths[t * len_s] = 0;
        }
        return;
    }
    const int64_t sl = ak_at(seq_lens, r);
    const int64_t row0 = cu.p ? (int64_t)ak_at(cu, r) - cu0 : r;
    const int64_t ql = cu.p ? (int64_t)ak_at(cu, r + 1) - ak_at(cu, r) : 1;
    /* the warp's first row: its raw entries are loaded before the prefix sum, so both reads
       overlap (the sum's barrier would otherwise order them) */
    int32_t pre[AK_CB_PRE][4];
    const bool pre_ok = vec && raw.p != NULL && w0 < ql && row0 + w0 >= 0 && row0 + w0 < T;
    if (pre_ok) {
        const int32_t *rp = raw.p + (row0 + w0) * raw.rs;
#pragma unroll
        for (int m = 0; m < AK_CB_PRE; m++) {
            const int32_t j = 4 * lane + 128 * m;
            if (j + 3 < topk) {
                int4 q = *(const int4 *)(rp + j);
                pre[m][0] = q.x, pre[m][1] = q.y, pre[m][2] = q.z, pre[m][3] = q.w;
            }
        }
    }
    int64_t part = 0;
    for (int32_t j = threadIdx.x; j < r; j += blockDim.x) part += ak_gather_len(seq_lens, cu, j, window);
    const int64_t off = ak_block_sum(part);
    const int64_t glen = ak_gather_len(seq_lens, cu, r, window);
    if (swa_off != NULL && blockIdx.x == 0 && threadIdx.x == 0) {
        swa_off[(int64_t)r * off_s] = (int32_t)off;
        if (r == B - 1) swa_off[(int64_t)B * off_s] = (int32_t)(off + glen);
    }
    const int64_t gstart = sl - glen;
    const int64_t swa_base = (ratio > 0 ? (int64_t)B * c_max : 0) + off;
    for (int64_t i = w0; i < ql; i += nw) {
        const int64_t t = row0 + i;
        if (t < 0 || t >= T) continue;
        const int64_t pos = sl - ql + i;
        /* a raw entry outside the causally visible entries is invalid: -1 */
        const int64_t visible = ratio > 0 && pos >= 0 ? (pos + 1) / ratio : 0;
        const int32_t tl = (int32_t)(visible < topk ? visible : topk);
        int64_t wl = pos + 1 < window ? pos + 1 : window;
        if (wl < 0) wl = 0;
        const int64_t swa0 = swa_base + (pos - wl + 1 - gstart) - tl; /* + j for entry j */
        const int32_t *rp = raw.p ? raw.p + t * raw.rs : NULL;
        int32_t *op = indices + t * ind_rs;
        int m = 0;
        for (int32_t j = 4 * lane; j < W; j += 128, m++) {
            int32_t c4[4] = {0, 1, 2, 3};
            if (j < tl && rp != NULL) {
                if (pre_ok && i == w0 && m < AK_CB_PRE && j + 3 < topk) {
#pragma unroll
                    for (int mm = 0; mm < AK_CB_PRE; mm++) /* static indices: registers */
                        if (mm == m)
                            for (int c = 0; c < 4; c++) c4[c] = pre[mm][c];
                } else if (vec && j + 3 < topk) {
                    int4 q = *(const int4 *)(rp + j);
                    c4[0] = q.x, c4[1] = q.y, c4[2] = q.z, c4[3] = q.w;
                } else {
                    for (int c = 0; c < 4; c++) c4[c] = j + c < tl ? rp[j + c] : 0;
                }
            } else {
                for (int c = 0; c < 4; c++) c4[c] += j;
            }
            int32_t v[4];
            for (int c = 0; c < 4; c++) {
                const int32_t jj = j + c;
                const int64_t cc = c4[c];
                if (jj < tl)
                    v[c] = cc >= 0 && cc < visible ? (int32_t)((int64_t)r * c_max + cc) : -1;
                else if (jj < tl + wl) v[c] = (int32_t)(swa0 + jj);
                else v[c] = -1;
            }
            if (vec) {
                *(int4 *)(op + j) = make_int4(v[0], v[1], v[2], v[3]);
            } else {
                for (int c = 0; c < 4 && j + c < W; c++) op[j + c] = v[c];
            }
        }
        if (lane == 0) lengths[t * len_s] = (int32_t)(tl + wl);
    }
}

extern "C" ak_status ak_cuda_dsv4_combine_indices(ak_context *ctx, const ak_tensor *raw_topk,
                                                  const ak_tensor *seq_lens,
                                                  const ak_tensor *cu_seqlens_q, int32_t ratio,
                                                  int32_t topk, int32_t c_max, int32_t window,
                                                  ak_tensor *indices, ak_tensor *lengths,
                                                  ak_tensor *swa_offsets) {
    AK_CUDA_ENTER(ctx);
    const int32_t B = (int32_t)seq_lens->shape[0];
    if (B + 1 > 65535)
        return ak_fail(AK_ERR_UNSUPPORTED,
                       "ak_dsv4_combine_indices: seq_lens: %d requests, the CUDA kernel takes at "
                       "most 65534", (int)B);
    /* warps along x: enough for the average request (T / B rows), at most 64 blocks */
    const int32_t T = (int32_t)indices->shape[0], W = (int32_t)indices->shape[1];
    const int32_t wpb = AK_PT_THREADS / 32;
    int64_t x = B > 0 ? ((int64_t)T / B + wpb - 1) / wpb : 1;
    x = x < 1 ? 1 : x > 64 ? 64 : x;
    const bool vec = W % 4 == 0 && (uintptr_t)indices->data % 16 == 0 &&
                     indices->strides[0] % 4 == 0 &&
                     (raw_topk == NULL ||
                      ((uintptr_t)raw_topk->data % 16 == 0 && raw_topk->strides[0] % 4 == 0));
    dim3 grid((unsigned)x, (unsigned)(B + 1));
    ak_combine_kernel<<<grid, AK_PT_THREADS, 0, ak_stream(ctx)>>>(
        ak_i32m_of(raw_topk), ak_i32v_of(seq_lens), ak_i32v_of(cu_seqlens_q), B, ratio, topk,
        c_max, window, (int32_t *)indices->data, indices->strides[0], W, (int32_t *)lengths->data,
        lengths->strides[0], T,
        swa_offsets ? (int32_t *)swa_offsets->data : NULL,
        swa_offsets ? swa_offsets->strides[0] : 0, vec);
    AK_CUDA_CHECK_LAUNCH("ak_combine_kernel");
    return AK_OK;
}
