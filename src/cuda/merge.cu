/*
 * merge.cu -- merging attention states over disjoint key sets (semantics.md 7, rules M1 and M2).
 * One warp per (row, head): the first partials' first 128 dims of the warp's next pair are
 * loaded (16 bytes per lane) while the lanes reduce this pair's log-sum-exp in double (max, then
 * the sum of exp) and merge it, so the reads overlap that math; then the head dimension is walked
 * in 128-wide chunks, each lane owning 4 consecutive dims, accumulating every partial with its
 * weight exp(lse_i - lse). Non-finite partial lse values have weight 0; an all-empty row gives
 * out 0 and lse +inf. The sink is applied once, after the merge.
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

/* Four consecutive dims [dd, dd + 4) of a row (base: element offset of the row) as fp32; dims
   at or past d read as 0. vec: 16-byte (f32) or 8-byte (bf16) aligned rows and d % 4 == 0. */
__device__ __forceinline__ void ak_merge_load4(const ak_merge_args &a, int64_t base, int32_t dd,
                                               bool vec, float x[4]) {
    if (a.out_dtype_in == AK_DTYPE_F32) {
        const float *p = (const float *)a.outs + base + dd;
        if (vec && dd < a.d) {
            float4 q = *(const float4 *)p;
            x[0] = q.x, x[1] = q.y, x[2] = q.z, x[3] = q.w;
            return;
        }
        for (int k = 0; k < 4; k++) x[k] = dd + k < a.d ? p[k] : 0.0f;
    } else {
        const uint16_t *p = (const uint16_t *)a.outs + base + dd;
        if (vec && dd < a.d) {
            uint2 q = *(const uint2 *)p;
            x[0] = ak_bf16_to_f32((uint16_t)(q.x & 0xffffu));
            x[1] = ak_bf16_to_f32((uint16_t)(q.x >> 16));
            x[2] = ak_bf16_to_f32((uint16_t)(q.y & 0xffffu));
            x[3] = ak_bf16_to_f32((uint16_t)(q.y >> 16));
            return;
        }
        for (int k = 0; k < 4; k++) x[k] = dd + k < a.d ? ak_bf16_to_f32(p[k]) : 0.0f;
    }
}

/* Partials whose first 128 dims are loaded before the lse reduction, so their reads overlap it. */
#define AK_MERGE_PRE 2

/* The first 128 dims of the first AK_MERGE_PRE partials of (row, head) pair pr. */
__device__ __forceinline__ void ak_merge_prefetch(const ak_merge_args &a, int64_t pr, int lane,
                                                  bool vin, float pre[AK_MERGE_PRE][4]) {
    const int32_t r = (int32_t)(pr / a.h), hh = (int32_t)(pr - (int64_t)r * a.h);
    const int64_t rb = (int64_t)r * a.os1 + (int64_t)hh * a.os2;
#pragma unroll
    for (int i = 0; i < AK_MERGE_PRE; i++)
        if (i < a.n) ak_merge_load4(a, (int64_t)i * a.os0 + rb, 4 * lane, vin, pre[i]);
}

/* One warp per (row, head); lane l owns dims [128 c + 4 l, 128 c + 4 l + 4) of 128-dim chunk c.
   Per dim the arithmetic (order of the partials, fp32 acc += w * x, then * factor) is unchanged. */
__global__ void __launch_bounds__(256, 4) ak_merge_kernel(ak_merge_args a, bool vin, bool vout) {
    const int lane = threadIdx.x & 31;
    const int64_t warp = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int64_t nwarps = ((int64_t)gridDim.x * blockDim.x) >> 5;
    const int64_t pairs = (int64_t)a.rows * a.h;
    const double to_e = a.in_base2 ? 0.69314718055994530942 : 1.0;
    /* software pipeline: the next pair's first chunk is loaded while this pair is merged */
    float pre[AK_MERGE_PRE][4], nxt[AK_MERGE_PRE][4];
    if (warp < pairs) ak_merge_prefetch(a, warp, lane, vin, pre);
    for (int64_t pr = warp; pr < pairs; pr += nwarps) {
        const int32_t r = (int32_t)(pr / a.h), hh = (int32_t)(pr - (int64_t)r * a.h);
        const int64_t rb = (int64_t)r * a.os1 + (int64_t)hh * a.os2;
        if (pr + nwarps < pairs) ak_merge_prefetch(a, pr + nwarps, lane, vin, nxt);
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
            const int32_t dd = d0 + 4 * lane;
            float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
            for (int32_t i = 0; i < AK_MERGE_PRE; i++) { /* the prefetched partials, in order */
                if (i >= a.n || empty) break;
                float l = ak_merge_lse_raw(a, i, r, hh);
                if (!ak_isfinite_f32(l)) continue; /* an empty partial's out is never used */
                const float w = (float)exp(l * to_e - L);
                float x[4];
                if (d0 == 0)
                    for (int k = 0; k < 4; k++) x[k] = pre[i][k];
                else
                    ak_merge_load4(a, (int64_t)i * a.os0 + rb, dd, vin, x);
                for (int k = 0; k < 4; k++) acc[k] += w * x[k];
            }
            for (int32_t i = AK_MERGE_PRE; i < a.n && !empty; i++) {
                float l = ak_merge_lse_raw(a, i, r, hh);
                if (!ak_isfinite_f32(l)) continue;
                const float w = (float)exp(l * to_e - L);
                float x[4];
                ak_merge_load4(a, (int64_t)i * a.os0 + rb, dd, vin, x);
                for (int k = 0; k < 4; k++) acc[k] += w * x[k];
            }
            if (dd >= a.d) continue;
            const int64_t ob = (int64_t)r * a.o0 + (int64_t)hh * a.o1 + dd;
            float y[4];
            for (int k = 0; k < 4; k++) y[k] = acc[k] * factor;
            if (a.out_dtype == AK_DTYPE_F32) {
                float *p = (float *)a.out + ob;
                if (vout) *(float4 *)p = make_float4(y[0], y[1], y[2], y[3]);
                else
                    for (int k = 0; k < 4 && dd + k < a.d; k++) p[k] = y[k];
            } else {
                uint16_t *p = (uint16_t *)a.out + ob;
                uint16_t hb[4];
                for (int k = 0; k < 4; k++) hb[k] = ak_f32_to_bf16(y[k]);
                if (vout) {
                    *(uint2 *)p = make_uint2((uint32_t)hb[0] | ((uint32_t)hb[1] << 16),
                                             (uint32_t)hb[2] | ((uint32_t)hb[3] << 16));
                } else {
                    for (int k = 0; k < 4 && dd + k < a.d; k++) p[k] = hb[k];
                }
            }
        }
        if (a.lse != NULL && lane == 0)
            a.lse[(int64_t)r * a.l0 + (int64_t)hh * a.l1] =
                (float)(a.out_base2 ? L * 1.44269504088896340736 : L);
#pragma unroll
        for (int i = 0; i < AK_MERGE_PRE; i++)
            for (int k = 0; k < 4; k++) pre[i][k] = nxt[i][k];
    }
}

/* Rows of `esz`-byte elements at p with the given strides can be read 4 elements at a time. */
static bool ak_merge_vec(const void *p, int64_t esz, int32_t d, int64_t s0, int64_t s1,
                         int64_t s2) {
    const int64_t al = 4 * esz;
    return (uintptr_t)p % (uintptr_t)al == 0 && d % 4 == 0 && (s0 * esz) % al == 0 &&
           (s1 * esz) % al == 0 && (s2 * esz) % al == 0;
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
    /* 8 (row, head) pairs per block, 64 blocks per SM (about two pairs per warp at 4096 rows x 32
       heads): 2% faster than 16 and as fast as 256 (run s74) */
    const int blocks = ak_grid_cap(ctx, pairs, 8, 64);
    const bool vin = ak_merge_vec(a.outs, ak_dtype_size(outs->dtype), a.d, a.os0, a.os1, a.os2);
    const bool vout = ak_merge_vec(a.out, ak_dtype_size(out->dtype), a.d, 0, a.o0, a.o1);
    ak_merge_kernel<<<blocks, 256, 0, ak_stream(ctx)>>>(a, vin, vout);
    AK_CUDA_CHECK_LAUNCH("ak_merge_kernel");
    return AK_OK;
}
