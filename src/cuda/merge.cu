/*
 * merge.cu -- merging attention states over disjoint key sets (semantics.md 7, rules M1 and M2).
 * One warp per (row, head): the lanes first reduce the partials' log-sum-exp in double (max, then
 * the sum of exp), then walk the head dimension in 128-wide chunks, each lane owning 4 dims, and accumulate
 * every partial with its weight exp(lse_i - lse). Non-finite partial lse values have weight 0; an
 * all-empty row gives out 0 and lse +inf. The sink is applied once, after the merge.
 */
#include "cuda/cuda_backend.h"
#include "cuda/cuda_common.cuh"

#include "common/numeric.h"

#include <math.h>
#include <stdint.h>

struct ak_merge_args {
    const void *outs;       /* [n, rows, h, d] f32 or bf16 */
    int64_t os0, os1, os2;  /* strides of outs, elements */
    int32_t out_dtype_in;
    const float *lses;      /* [n, rows, h] f32 */
    int64_t ls0, ls1, ls2;
    int32_t in_base2;
    const float *sink;      /* [h] f32 or NULL */
    int64_t sink_s;
    void *out;              /* [rows, h, d] f32 or bf16 */
    int64_t o0, o1;
    int32_t out_dtype;
    float *lse;             /* [rows, h] f32 or NULL */
    int64_t l0, l1;
    int32_t out_base2;
    int32_t n, rows, h, d;
};

/* Partial i's lse as read (any base); the merge works in natural log, in double precision like
   the CPU backend, so both pick the same weights up to the last fp32 rounding. */
__device__ __forceinline__ float ak_merge_lse_raw(const ak_merge_args &a, int32_t i, int32_t r,
                                                  int32_t hh) {
    return a.lses[(int64_t)i * a.ls0 + (int64_t)r * a.ls1 + (int64_t)hh * a.ls2];
}

__global__ void ak_merge_kernel(ak_merge_args a) {
    const int lane = threadIdx.x & 31;
    const int64_t warp = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int64_t nwarps = ((int64_t)gridDim.x * blockDim.x) >> 5;
    const int64_t pairs = (int64_t)a.rows * a.h;
    const double to_e = a.in_base2 ? 0.69314718055994530942 : 1.0;
    for (int64_t pr = warp; pr < pairs; pr += nwarps) {
        const int32_t r = (int32_t)(pr / a.h), hh = (int32_t)(pr - (int64_t)r * a.h);
        double m = -INFINITY;
        for (int32_t i = lane; i < a.n; i += 32) {
            float l = ak_merge_lse_raw(a, i, r, hh);
            if (ak_isfinite_f32(l)) m = fmax(m, l * to_e);
        }
        for (int o = 16; o > 0; o >>= 1) m = fmax(m, __shfl_xor_sync(0xffffffffu, m, o));
        const bool empty = m == -INFINITY;
        double sum = 0.0;
        if (!empty)
            for (int32_t i = lane; i < a.n; i += 32) {
                float l = ak_merge_lse_raw(a, i, r, hh);
                if (ak_isfinite_f32(l)) sum += exp(l * to_e - m);
            }
        for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
        const double L = empty ? (double)INFINITY : m + log(sum);
        float factor = empty ? 0.0f : 1.0f;
        if (a.sink != NULL && !empty)
            factor = (float)(1.0 / (1.0 + exp((double)a.sink[(int64_t)hh * a.sink_s] - L)));
        for (int32_t d0 = 0; d0 < a.d; d0 += 128) {
            float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            for (int32_t i = 0; i < a.n && !empty; i++) {
                float l = ak_merge_lse_raw(a, i, r, hh);
                if (!ak_isfinite_f32(l)) continue; /* an empty partial's out is never read */
                const float w = (float)exp(l * to_e - L);
                const int64_t base = (int64_t)i * a.os0 + (int64_t)r * a.os1 + (int64_t)hh * a.os2;
                for (int k = 0; k < 4; k++) {
                    int32_t dd = d0 + k * 32 + lane;
                    if (dd >= a.d) break;
                    float x = a.out_dtype_in == AK_DTYPE_F32
                                  ? ((const float *)a.outs)[base + dd]
                                  : ak_bf16_to_f32(((const uint16_t *)a.outs)[base + dd]);
                    acc[k] += w * x;
                }
            }
            const int64_t ob = (int64_t)r * a.o0 + (int64_t)hh * a.o1;
            for (int k = 0; k < 4; k++) {
                int32_t dd = d0 + k * 32 + lane;
                if (dd >= a.d) break;
                float y = acc[k] * factor;
                if (a.out_dtype == AK_DTYPE_F32) ((float *)a.out)[ob + dd] = y;
                else ((uint16_t *)a.out)[ob + dd] = ak_f32_to_bf16(y);
            }
        }
        if (a.lse != NULL && lane == 0)
            a.lse[(int64_t)r * a.l0 + (int64_t)hh * a.l1] =
                (float)(a.out_base2 ? L * 1.44269504088896340736 : L);
    }
}

extern "C" ak_status ak_cuda_merge_states(ak_context *ctx, const ak_tensor *outs,
                                          const ak_tensor *lses, ak_lse_base in_base,
                                          const ak_tensor *attn_sink, ak_tensor *out,
                                          ak_tensor *lse, ak_lse_base out_base) {
    AK_CUDA_ENTER(ctx);
    ak_merge_args a;
    a.outs = outs->data;
    a.os0 = outs->strides[0];
    a.os1 = outs->strides[1];
    a.os2 = outs->strides[2];
    a.out_dtype_in = outs->dtype;
    a.lses = (const float *)lses->data;
    a.ls0 = lses->strides[0];
    a.ls1 = lses->strides[1];
    a.ls2 = lses->strides[2];
    a.in_base2 = in_base == AK_LSE_BASE_2;
    a.sink = attn_sink ? (const float *)attn_sink->data : NULL;
    a.sink_s = attn_sink ? attn_sink->strides[0] : 0;
    a.out = out->data;
    a.o0 = out->strides[0];
    a.o1 = out->strides[1];
    a.out_dtype = out->dtype;
    a.lse = lse ? (float *)lse->data : NULL;
    a.l0 = lse ? lse->strides[0] : 0;
    a.l1 = lse ? lse->strides[1] : 0;
    a.out_base2 = out_base == AK_LSE_BASE_2;
    a.n = (int32_t)outs->shape[0];
    a.rows = (int32_t)out->shape[0];
    a.h = (int32_t)out->shape[1];
    a.d = (int32_t)out->shape[2];
    const int64_t pairs = (int64_t)a.rows * a.h;
    if (pairs == 0) return AK_OK;
    int64_t blocks = (pairs + 7) / 8;
    int64_t cap = (int64_t)(ctx->info.sm_count > 0 ? ctx->info.sm_count : 132) * 16;
    if (blocks > cap) blocks = cap;
    ak_merge_kernel<<<(int)blocks, 256, 0, ak_stream(ctx)>>>(a);
    AK_CUDA_CHECK_LAUNCH("ak_merge_kernel");
    return AK_OK;
}
