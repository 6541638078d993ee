/*
 * sparse_decode.cu -- sparse MLA decode on CUDA (semantics.md 4; DSA V3.2 and DeepSeek V4).
 *
 * One CTA = (request r, query token i, head tile, KV split); 8 warps. A head tile is MW m16 tiles
 * (MW = 1, 2, 4: 16, 32, 64 heads), so h_q <= 16 pays for 16 rows of MMA but never for the
 * bytes of padded heads; h_q > 64 uses ceil(h_q / 64) tiles. The G = 8 / MW warps of one m16
 * tile split the 64 keys of a tile for QK^T and the 512 value dims for PV, so every warp keeps
 * only 512 / G fp32 accumulators per row pair.
 *
 * Per 64-key tile: gather the 64 slot ids (rule I1 applied here: an invalid id is never read and
 * its key row is zeros with logit -inf), load the records with 128-bit non-coherent loads, all
 * issued before any is used, dequantize once to bf16 in shared memory (layouts.md 4), then
 * S = Q K^T and O += P V with mma.sync m16n8k16 bf16/fp32. The online softmax runs in fp32 in
 * log2 units (logits pre-multiplied by softmax_scale * log2 e); each warp of a group recomputes the
 * identical row statistics from the shared S tile, so no reduction crosses warps.
 *
 * KV splits: the tiles of the main list, then those of the extra list, are cut into `splits`
 * fixed ranges chosen from shapes and the SM count only; a split skips, without loading, every
 * tile that lies wholly past its row's length, which it reads on the device each call. So the
 * schedule needs no host sync, is the same in a captured graph and in replay, and the fixed
 * boundaries plus the fixed-order combine make results bitwise reproducible. With one split the
 * main kernel writes out and lse itself; otherwise it writes normalized partial rows and their
 * lse (log2 units) to the workspace and ak_sd_combine merges them in split order.
 */
#include "cuda/cuda_backend.h"
#include "cuda/cuda_common.cuh"
#include "cuda/ptx.cuh"
#include "cuda/sparse_decode.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <math.h>
#include <string.h>
#include <stdint.h>

#define AK_SD_THREADS 256

/*
 * Loads one 64-key tile into ks[64][KSTR] bf16 (row = key, dims 0..d_qk-1). ids[64] holds the
 * slot or -1. Every load of a thread is issued before the first conversion so each thread keeps
 * NL 16-byte requests in flight.
 */
template <int LAYOUT, int KSTR>
__device__ __forceinline__ void ak_sd_load_tile(const ak_sd_list &l, const int32_t *ids,
                                                uint16_t *ks, float kscale) {
    typedef ak_sd_geo<LAYOUT> G;
    /* NB loads per batch keep the in-flight registers under the 2-CTA/SM budget (bf16: 18 -> 2x9). */
    enum { ITEMS = AK_SD_KEYS * G::CPT, NL = (ITEMS + AK_SD_THREADS - 1) / AK_SD_THREADS,
           NB = NL > 10 ? (NL + 1) / 2 : NL };
#pragma unroll
    for (int k0 = 0; k0 < NL; k0 += NB) {
        uint4 raw[NB];
        float sc[NB];
#pragma unroll
        for (int kb = 0; kb < NB; kb++) {
            int it = (k0 + kb) * AK_SD_THREADS + (int)threadIdx.x;
            raw[kb] = make_uint4(0, 0, 0, 0);
            sc[kb] = 0.0f;
            if (k0 + kb >= NL || (ITEMS % AK_SD_THREADS != 0 && it >= ITEMS)) continue;
            int tok = it / G::CPT, c = it - tok * G::CPT;
            int32_t slot = ids[tok];
            if (slot < 0) continue;
            int32_t page = slot / l.page_size, t = slot - page * l.page_size;
            const uint8_t *pg = l.pool + (int64_t)page * l.page_stride;
            if (LAYOUT == AK_LAYOUT_DSV4_FP8_UE8M0) {
                const uint8_t *row = pg + (int64_t)t * 576;
                raw[kb] = ak_ldg_nc_v4(row + c * 16);
                if (c < 28)
                    sc[kb] = ak_sd_ue8m0(__ldg(pg + (int64_t)l.page_size * 576 + (int64_t)t * 8 + (c >> 2)));
            } else {
                const uint8_t *rec = pg + (int64_t)t * G::REC;
                if (LAYOUT == AK_LAYOUT_DSA_FP8_BLOCKSCALE) {
                    raw[kb] = ak_ldg_nc_v4(rec + (c < 32 ? c * 16 : 528 + (c - 32) * 16));
                    if (c < 32) sc[kb] = __ldg((const float *)(rec + 512) + (c >> 3));
                } else {
                    raw[kb] = ak_ldg_nc_v4(rec + c * 16);
                }
            }
        }
#pragma unroll
        for (int kb = 0; kb < NB; kb++) {
            int it = (k0 + kb) * AK_SD_THREADS + (int)threadIdx.x;
            if (k0 + kb >= NL || (ITEMS % AK_SD_THREADS != 0 && it >= ITEMS)) continue;
            int tok = it / G::CPT, c = it - tok * G::CPT;
            uint16_t *row = ks + tok * KSTR;
            if (LAYOUT == AK_LAYOUT_MLA_BF16) {
                *reinterpret_cast<uint4 *>(row + c * 8) = raw[kb];
                continue;
            }
            const int nq = LAYOUT == AK_LAYOUT_DSV4_FP8_UE8M0 ? 28 : 32; /* e4m3 chunks */
            if (LAYOUT == AK_LAYOUT_MLA_FP8_PERTENSOR || c < nq) {
                /* an invalid key has raw 0 and scale 0: zeros, never NaN, in the V rows */
                float s = LAYOUT == AK_LAYOUT_MLA_FP8_PERTENSOR ? (ids[tok] < 0 ? 0.0f : kscale) : sc[kb];
                uint4 lo, hi;
                ak_sd_dequant16(raw[kb], s, lo, hi);
                *reinterpret_cast<uint4 *>(row + c * 16) = lo;
                *reinterpret_cast<uint4 *>(row + c * 16 + 8) = hi;
            } else {
                *reinterpret_cast<uint4 *>(row + nq * 16 + (c - nq) * 8) = raw[kb];
            }
        }
    }
}

template <int LAYOUT, int MW>
__global__ void __launch_bounds__(AK_SD_THREADS, MW == 1 ? 2 : 1) ak_sd_main(const ak_sd_params p) {
    typedef ak_sd_geo<LAYOUT> G;
    enum {
        DQK = G::DQK,
        KSTR = DQK + 8,           /* bf16 row stride: 16-byte pad keeps ldmatrix conflict-free */
        GW = 8 / MW,              /* warps per m16 tile */
        NKW = AK_SD_KEYS / GW,    /* keys per warp in QK^T */
        DVW = AK_SD_DV / GW,      /* value dims per warp in PV */
        SSTR = AK_SD_KEYS + 4     /* fp32 row stride of the S tile */
    };
    extern __shared__ __align__(16) uint8_t smem[];
    uint16_t *ks = (uint16_t *)smem;                          /* [64][KSTR] bf16 keys */
    uint16_t *qs = ks + AK_SD_KEYS * KSTR;                    /* [16 MW][KSTR] bf16 queries */
    float *ss = (float *)(qs + 16 * MW * KSTR);               /* [16 MW][SSTR] f32 logits */
    int32_t *ids = (int32_t *)(ss + 16 * MW * SSTR);          /* [64] slot or -1 */

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int mt = warp / GW, gw = warp % GW;
    int64_t cta = blockIdx.x;
    const int split = (int)(cta % p.splits);
    cta /= p.splits;
    const int ht = (int)(cta % p.htiles);
    const int64_t ri = cta / p.htiles; /* r * s_q + i */
    const int64_t r = ri / p.s_q, i = ri % p.s_q;
    const int h0 = ht * 16 * MW;

    /* Q tile -> shared, zero rows past h_q. With 16-byte aligned rows every load of a thread is
       issued before the first store (one memory round trip, not one per element). */
    if (p.q_vec) {
        enum { QCH = DQK / 8, QITEMS = 16 * MW * QCH, QN = (QITEMS + AK_SD_THREADS - 1) / AK_SD_THREADS };
        uint4 qv[QN];
#pragma unroll
        for (int k = 0; k < QN; k++) {
            const int it = k * AK_SD_THREADS + tid, row = it / QCH, c = it % QCH;
            qv[k] = make_uint4(0, 0, 0, 0);
            if (it < QITEMS && h0 + row < p.h_q)
                qv[k] = ak_ldg_nc_v4(p.q + r * p.q_s0 + i * p.q_s1 + (int64_t)(h0 + row) * p.q_s2 + c * 8);
        }
#pragma unroll
        for (int k = 0; k < QN; k++) {
            const int it = k * AK_SD_THREADS + tid, row = it / QCH, c = it % QCH;
            if (it < QITEMS) *reinterpret_cast<uint4 *>(qs + row * KSTR + c * 8) = qv[k];
        }
    } else {
        for (int e = tid; e < 16 * MW * (DQK / 2); e += AK_SD_THREADS) {
            int row = e / (DQK / 2), d = (e % (DQK / 2)) * 2;
            uint32_t v = 0;
            if (h0 + row < p.h_q) {
                const uint16_t *src = p.q + r * p.q_s0 + i * p.q_s1 + (int64_t)(h0 + row) * p.q_s2 + d;
                v = (uint32_t)src[0] | ((uint32_t)src[1] << 16);
            }
            *reinterpret_cast<uint32_t *>(qs + row * KSTR + d) = v;
        }
    }

    const int32_t len0 = ak_sd_len(p.list[0], r, i), len1 = ak_sd_len(p.list[1], r, i);
    const int n_tiles = p.list[0].tiles + p.list[1].tiles;
    int t_begin, t_end;
    ak_sd_split_range(split, n_tiles, p.splits, t_begin, t_end);

    float o[DVW / 8][4];
#pragma unroll
    for (int j = 0; j < DVW / 8; j++) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
    float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};
    const int g = lane >> 2, c4 = lane & 3;

    for (int t = t_begin; t < t_end; t++) {
        const int ex = t >= p.list[0].tiles;
        const ak_sd_list &l = p.list[ex];
        const int base = (ex ? t - p.list[0].tiles : t) * AK_SD_KEYS;
        const int32_t len = ex ? len1 : len0;
        if (base >= len) continue; /* uniform across the CTA */
        __syncthreads();           /* previous tile's readers are done with ks, ss, ids */
        if (tid < AK_SD_KEYS) {
            int pos = base + tid;
            int32_t slot = -1;
            if (pos < len) {
                int32_t s = l.idx[r * l.idx_s0 + i * l.idx_s1 + pos];
                if ((uint32_t)s < l.capacity) slot = s; /* rule I1 */
            }
            ids[tid] = slot;
        }
        __syncthreads();
        float kscale = 1.0f;
        if (LAYOUT == AK_LAYOUT_MLA_FP8_PERTENSOR)
            kscale = l.k_scale_ptr != NULL ? *l.k_scale_ptr : l.k_scale;
        ak_sd_load_tile<LAYOUT, KSTR>(l, ids, ks, kscale);
        __syncthreads();

        /* S[16 rows of m-tile mt][NKW keys of warp gw] = Q K^T */
        {
            float sacc[NKW / 8][4];
#pragma unroll
            for (int j = 0; j < NKW / 8; j++) sacc[j][0] = sacc[j][1] = sacc[j][2] = sacc[j][3] = 0.0f;
            const uint32_t qa = ak_smem_addr(qs + (mt * 16 + (lane & 15)) * KSTR + (lane >> 4) * 8);
            const int key0 = gw * NKW;
            const uint32_t ka = ak_smem_addr(ks + (key0 + (lane & 7)) * KSTR + ((lane >> 3) & 1) * 8);
#pragma unroll 4
            for (int kk = 0; kk < DQK / 16; kk++) {
                uint32_t a[4];
                ak_ldmatrix_x4(qa + kk * 32, a[0], a[1], a[2], a[3]);
#pragma unroll
                for (int j = 0; j < NKW / 8; j++) {
                    uint32_t b0, b1;
                    ak_ldmatrix_x2(ka + (j * 8 * KSTR + kk * 16) * 2, b0, b1);
                    ak_mma_bf16_16816(sacc[j], a, b0, b1);
                }
            }
            float *srow = ss + (mt * 16 + g) * SSTR + key0 + c4 * 2;
#pragma unroll
            for (int j = 0; j < NKW / 8; j++) {
                *reinterpret_cast<float2 *>(srow + j * 8) = make_float2(sacc[j][0], sacc[j][1]);
                *reinterpret_cast<float2 *>(srow + 8 * SSTR + j * 8) = make_float2(sacc[j][2], sacc[j][3]);
            }
        }
        __syncthreads();

        /* Online softmax on rows g and g + 8 of the m-tile, then O += P V on dims gw*DVW.. */
        uint32_t pa[4][4], pl[4][4]; /* P as bf16 A fragments: high and low parts */
        {
            float x[2][16];
            float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
            for (int hr = 0; hr < 2; hr++) {
                const float *srow = ss + (mt * 16 + g + hr * 8) * SSTR;
#pragma unroll
                for (int kk = 0; kk < 4; kk++) {
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        int key = kk * 16 + (e >> 1) * 8 + c4 * 2 + (e & 1);
                        float v = ids[key] >= 0 ? srow[key] * p.scale_log2 : -INFINITY;
                        x[hr][kk * 4 + e] = v;
                        mx[hr] = fmaxf(mx[hr], v);
                    }
                }
                mx[hr] = fmaxf(mx[hr], __shfl_xor_sync(0xffffffffu, mx[hr], 1));
                mx[hr] = fmaxf(mx[hr], __shfl_xor_sync(0xffffffffu, mx[hr], 2));
            }
            float alpha[2];
#pragma unroll
            for (int hr = 0; hr < 2; hr++) {
                float m_new = fmaxf(m_run[hr], mx[hr]);
                float m_use = m_new == -INFINITY ? 0.0f : m_new;
                alpha[hr] = exp2f(m_run[hr] - m_use);
                float sum = 0.0f;
#pragma unroll
                for (int e = 0; e < 16; e++) {
                    x[hr][e] = exp2f(x[hr][e] - m_use);
                    sum += x[hr][e];
                }
                sum += __shfl_xor_sync(0xffffffffu, sum, 1);
                sum += __shfl_xor_sync(0xffffffffu, sum, 2);
                l_run[hr] = l_run[hr] * alpha[hr] + sum;
                m_run[hr] = m_new;
            }
            /* P = hi + lo, two bf16 parts: a lone bf16 P carries 2^-9 relative error per weight,
               which on short rows (a few keys, each weight large) exceeds the 1e-3 output
               tolerance; the pair keeps about 16 bits (device run 2: 0.1% of elements failed
               with bf16 P alone, lse all passed). */
#pragma unroll
            for (int kk = 0; kk < 4; kk++) {
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int hr = e & 1, c = kk * 4 + (e >> 1) * 2;
                    pa[kk][e] = ak_sd_pack_bf16(x[hr][c], x[hr][c + 1]);
                    __nv_bfloat162 hi = *reinterpret_cast<__nv_bfloat162 *>(&pa[kk][e]);
                    pl[kk][e] = ak_sd_pack_bf16(x[hr][c] - __bfloat162float(hi.x),
                                                x[hr][c + 1] - __bfloat162float(hi.y));
                }
            }
#pragma unroll
            for (int j = 0; j < DVW / 8; j++) {
                o[j][0] *= alpha[0];
                o[j][1] *= alpha[0];
                o[j][2] *= alpha[1];
                o[j][3] *= alpha[1];
            }
        }
        {
            const int d0 = gw * DVW;
            const uint32_t va = ak_smem_addr(ks + (lane & 15) * KSTR + d0 + (lane >> 4) * 8);
#pragma unroll
            for (int kk = 0; kk < 4; kk++) {
#pragma unroll
                for (int j = 0; j < DVW / 8; j += 2) {
                    uint32_t b0, b1, b2, b3;
                    ak_ldmatrix_x4_trans(va + (kk * 16 * KSTR + j * 8) * 2, b0, b1, b2, b3);
                    ak_mma_bf16_16816(o[j], pa[kk], b0, b1);
                    ak_mma_bf16_16816(o[j + 1], pa[kk], b2, b3);
                    ak_mma_bf16_16816(o[j], pl[kk], b0, b1);
                    ak_mma_bf16_16816(o[j + 1], pl[kk], b2, b3);
                }
            }
        }
    }

    /* Write this split's rows: final out/lse with one split, else normalized partials. */
    const int d0 = gw * DVW;
#pragma unroll
    for (int hr = 0; hr < 2; hr++) {
        const int h = h0 + mt * 16 + g + hr * 8;
        if (h >= p.h_q) continue;
        const float lsum = l_run[hr];
        const float lse2 = lsum > 0.0f ? m_run[hr] + log2f(lsum) : -INFINITY;
        const int64_t row = ri * p.h_q + h;
        if (p.splits == 1) {
            float f = 0.0f, lse_e = INFINITY;
            if (lsum > 0.0f) {
                lse_e = lse2 * 0.69314718055994531f;
                f = 1.0f / lsum;
                if (p.sink != NULL) f = f / (1.0f + expf(p.sink[h] - lse_e));
            }
            if (p.lse != NULL && gw == 0 && c4 == 0)
                p.lse[r * p.l_s0 + i * p.l_s1 + h * p.l_s2] = lse_e;
            int64_t ob = r * p.o_s0 + i * p.o_s1 + h * p.o_s2;
#pragma unroll
            for (int j = 0; j < DVW / 8; j++) {
                int d = d0 + j * 8 + c4 * 2;
                float v0 = o[j][hr * 2] * f, v1 = o[j][hr * 2 + 1] * f;
                if (p.out_f32) {
                    *reinterpret_cast<float2 *>((float *)p.out + ob + d) = make_float2(v0, v1);
                } else {
                    *reinterpret_cast<uint32_t *>((uint16_t *)p.out + ob + d) = ak_sd_pack_bf16(v0, v1);
                }
            }
        } else {
            const int64_t rows = (int64_t)p.b * p.s_q * p.h_q;
            float f = lsum > 0.0f ? 1.0f / lsum : 0.0f;
            if (gw == 0 && c4 == 0) p.lacc[split * rows + row] = lse2;
            float *dst = p.oacc + ((int64_t)split * rows + row) * AK_SD_DV;
#pragma unroll
            for (int j = 0; j < DVW / 8; j++) {
                int d = d0 + j * 8 + c4 * 2;
                *reinterpret_cast<float2 *>(dst + d) = make_float2(o[j][hr * 2] * f, o[j][hr * 2 + 1] * f);
            }
        }
    }
}

/* Merges the splits of one (r, i, h) row in split order; 128 threads x 4 dims. */
__global__ void __launch_bounds__(128) ak_sd_combine(const ak_sd_params p) {
    const int64_t row = blockIdx.x;
    const int64_t rows = (int64_t)p.b * p.s_q * p.h_q;
    const int h = (int)(row % p.h_q);
    const int64_t ri = row / p.h_q, r = ri / p.s_q, i = ri % p.s_q;
    float mx = -INFINITY;
    for (int s = 0; s < p.splits; s++) mx = fmaxf(mx, p.lacc[s * rows + row]);
    const int d = threadIdx.x * 4;
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    float lse_e = INFINITY, f = 0.0f;
    if (mx != -INFINITY) {
        float sum = 0.0f;
        for (int s = 0; s < p.splits; s++) sum += exp2f(p.lacc[s * rows + row] - mx);
        const float lse2 = mx + log2f(sum);
        for (int s = 0; s < p.splits; s++) {
            float ls = p.lacc[s * rows + row];
            if (ls == -INFINITY) continue;
            float w = exp2f(ls - lse2);
            float4 v = *reinterpret_cast<const float4 *>(p.oacc + (s * rows + row) * AK_SD_DV + d);
            acc[0] += w * v.x;
            acc[1] += w * v.y;
            acc[2] += w * v.z;
            acc[3] += w * v.w;
        }
        lse_e = lse2 * 0.69314718055994531f;
        f = 1.0f;
        if (p.sink != NULL) f = 1.0f / (1.0f + expf(p.sink[h] - lse_e));
    }
    if (p.lse != NULL && threadIdx.x == 0) p.lse[r * p.l_s0 + i * p.l_s1 + h * p.l_s2] = lse_e;
    const int64_t ob = r * p.o_s0 + i * p.o_s1 + h * p.o_s2 + d;
    if (p.out_f32) {
        float *o = (float *)p.out + ob;
        for (int k = 0; k < 4; k++) o[k] = acc[k] * f;
    } else {
        uint16_t *o = (uint16_t *)p.out + ob;
        *reinterpret_cast<uint32_t *>(o) = ak_sd_pack_bf16(acc[0] * f, acc[1] * f);
        *reinterpret_cast<uint32_t *>(o + 2) = ak_sd_pack_bf16(acc[2] * f, acc[3] * f);
    }
}

/* ---- host side ----------------------------------------------------------------------------- */

static size_t ak_sd_smem(int dqk, int mw) {
    size_t kstr = (size_t)dqk + 8;
    return (AK_SD_KEYS + 16 * (size_t)mw) * kstr * 2 + 16 * (size_t)mw * (AK_SD_KEYS + 4) * 4 +
           AK_SD_KEYS * 4;
}

/* Shapes and SM count only: never lengths or indices (workspace size and graph stability). */
static void ak_sd_plan_make(const ak_context *ctx, const ak_mla_decode_args *a, ak_sd_plan *pl) {
    if (ak_sdw_plan(ctx, a, pl)) return;
    pl->kernel = 0;
    const int64_t b = a->q->shape[0], s_q = a->q->shape[1], h_q = a->q->shape[2];
    const int dqk = (int)a->q->shape[3];
    const int64_t topk = a->indices->shape[2];
    const int64_t etopk = a->extra_indices != NULL ? a->extra_indices->shape[2] : 0;
    pl->mw = h_q <= 16 ? 1 : (h_q <= 32 ? 2 : 4);
    pl->htiles = (int)((h_q + 16 * pl->mw - 1) / (16 * pl->mw));
    pl->n_tiles = (int)((topk + AK_SD_KEYS - 1) / AK_SD_KEYS + (etopk + AK_SD_KEYS - 1) / AK_SD_KEYS);
    pl->smem = ak_sd_smem(dqk, pl->mw);
    const int sms = ctx->cuda != NULL ? ctx->cuda->prop.multiProcessorCount : 132;
    const int per_sm = pl->smem * 2 <= 227 * 1024 ? 2 : 1;
    const int64_t base = b * s_q * pl->htiles;
    const int64_t slots = (int64_t)sms * per_sm;
    /* Fewest splits minimising waves x tiles per CTA (a proxy of the critical path): b 128,
       h_q 16 takes 2 splits (256 CTAs in 264 slots) rather than 3 (1.45 waves). */
    int64_t splits = 1, best = INT64_MAX;
    for (int64_t sp = 1; sp <= pl->n_tiles; sp++) {
        int64_t waves = (base * sp + slots - 1) / slots, per = (pl->n_tiles + sp - 1) / sp;
        if (waves * per < best) best = waves * per, splits = sp;
    }
    pl->splits = (int)splits;
    pl->rows = b * s_q * h_q;
    pl->ws_bytes = splits > 1 ? (size_t)splits * (size_t)pl->rows * (AK_SD_DV + 1) * sizeof(float) : 0;
}

extern "C" ak_status ak_cuda_mla_decode_workspace_size(ak_context *ctx, const ak_mla_decode_args *args,
                                                       size_t *bytes) {
    if (args->block_table != NULL) {
        *bytes = 0;
        return AK_OK;
    }
    ak_sd_plan pl;
    ak_sd_plan_make(ctx, args, &pl);
    *bytes = pl.ws_bytes;
    return AK_OK;
}

static void ak_sd_list_fill(ak_sd_list *l, const ak_cache *c, const ak_tensor *idx,
                            const ak_tensor *len) {
    l->pool = (const uint8_t *)c->data;
    l->page_stride = ak_cache_stride(c);
    l->page_size = c->page_size;
    l->capacity = (uint32_t)((int64_t)c->num_pages * c->page_size);
    l->k_scale_ptr = c->k_scale_ptr;
    l->k_scale = c->k_scale > 0.0f ? c->k_scale : 1.0f;
    l->idx = (const int32_t *)idx->data;
    l->idx_s0 = idx->strides[0];
    l->idx_s1 = idx->strides[1];
    l->topk = (int32_t)idx->shape[2];
    l->tiles = (int32_t)((idx->shape[2] + AK_SD_KEYS - 1) / AK_SD_KEYS);
    l->len = len != NULL ? (const int32_t *)len->data : NULL;
    l->len_s0 = len != NULL ? len->strides[0] : 0;
    l->len_s1 = len != NULL && len->ndim == 2 ? len->strides[1] : 0;
}

template <int LAYOUT, int MW>
static ak_status ak_sd_launch(ak_context *ctx, const ak_sd_params &p, const ak_sd_plan &pl) {
    AK_CUDA_TRY(cudaFuncSetAttribute(ak_sd_main<LAYOUT, MW>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     (int)pl.smem));
    int64_t grid = (int64_t)p.b * p.s_q * pl.htiles * pl.splits;
    ak_sd_main<LAYOUT, MW><<<(unsigned)grid, AK_SD_THREADS, pl.smem, ak_stream(ctx)>>>(p);
    AK_CUDA_CHECK_LAUNCH("ak_sd_main");
    return AK_OK;
}

template <int LAYOUT>
static ak_status ak_sd_launch_mw(ak_context *ctx, const ak_sd_params &p, const ak_sd_plan &pl) {
    if (pl.mw == 1) return ak_sd_launch<LAYOUT, 1>(ctx, p, pl);
    if (pl.mw == 2) return ak_sd_launch<LAYOUT, 2>(ctx, p, pl);
    return ak_sd_launch<LAYOUT, 4>(ctx, p, pl);
}

extern "C" ak_status ak_cuda_mla_decode(ak_context *ctx, const ak_mla_decode_args *a, void *workspace,
                                        size_t workspace_bytes) {
    if (a->block_table != NULL)
        return ak_fail(AK_ERR_UNSUPPORTED, "dense MLA decode has no CUDA kernel yet");
    AK_CUDA_ENTER(ctx);
    ak_sd_plan pl;
    ak_sd_plan_make(ctx, a, &pl);
    if (workspace_bytes < pl.ws_bytes || (pl.ws_bytes > 0 && workspace == NULL))
        return ak_fail(AK_ERR_INVALID_ARGUMENT,
                       "ak_mla_decode: workspace: %zu bytes, need %zu (ak_mla_decode_workspace_size)",
                       workspace_bytes, pl.ws_bytes);
    if (pl.rows == 0) return AK_OK;
    if (pl.n_tiles == 0) pl.splits = 1; /* every row is empty: the main kernel writes 0 / +inf */
    ak_sd_params p;
    memset(&p, 0, sizeof p);
    p.q = (const uint16_t *)a->q->data;
    p.q_s0 = a->q->strides[0];
    p.q_s1 = a->q->strides[1];
    p.q_s2 = a->q->strides[2];
    p.q_vec = (uintptr_t)a->q->data % 16 == 0 && p.q_s0 % 8 == 0 && p.q_s1 % 8 == 0 && p.q_s2 % 8 == 0;
    p.b = (int32_t)a->q->shape[0];
    p.s_q = (int32_t)a->q->shape[1];
    p.h_q = (int32_t)a->q->shape[2];
    p.htiles = pl.htiles;
    p.splits = pl.splits;
    ak_sd_list_fill(&p.list[0], a->cache, a->indices, a->topk_length);
    if (a->extra_cache != NULL && a->extra_indices != NULL)
        ak_sd_list_fill(&p.list[1], a->extra_cache, a->extra_indices, a->extra_topk_length);
    p.scale_log2 = a->softmax_scale * 1.4426950408889634f;
    p.sink = a->attn_sink != NULL ? (const float *)a->attn_sink->data : NULL;
    p.out = a->out->data;
    p.out_f32 = a->out->dtype == AK_DTYPE_F32;
    p.o_s0 = a->out->strides[0];
    p.o_s1 = a->out->strides[1];
    p.o_s2 = a->out->strides[2];
    if (a->lse != NULL) {
        p.lse = (float *)a->lse->data;
        p.l_s0 = a->lse->strides[0];
        p.l_s1 = a->lse->strides[1];
        p.l_s2 = a->lse->strides[2];
    }
    if (pl.splits > 1) {
        p.oacc = (float *)workspace;
        p.lacc = p.oacc + (size_t)pl.splits * pl.rows * AK_SD_DV;
    }
    ak_status st;
    if (pl.kernel == 1) st = ak_sdw_launch(ctx, p, pl, (int)a->cache->layout);
    else switch (a->cache->layout) {
    case AK_LAYOUT_MLA_BF16: st = ak_sd_launch_mw<AK_LAYOUT_MLA_BF16>(ctx, p, pl); break;
    case AK_LAYOUT_MLA_FP8_PERTENSOR: st = ak_sd_launch_mw<AK_LAYOUT_MLA_FP8_PERTENSOR>(ctx, p, pl); break;
    case AK_LAYOUT_DSA_FP8_BLOCKSCALE: st = ak_sd_launch_mw<AK_LAYOUT_DSA_FP8_BLOCKSCALE>(ctx, p, pl); break;
    case AK_LAYOUT_DSV4_FP8_UE8M0: st = ak_sd_launch_mw<AK_LAYOUT_DSV4_FP8_UE8M0>(ctx, p, pl); break;
    default:
        return ak_fail(AK_ERR_UNSUPPORTED, "ak_mla_decode: cache layout %d has no sparse CUDA kernel",
                       (int)a->cache->layout);
    }
    if (st != AK_OK) return st;
    if (pl.splits > 1) {
        ak_sd_combine<<<(unsigned)pl.rows, 128, 0, ak_stream(ctx)>>>(p);
        AK_CUDA_CHECK_LAUNCH("ak_sd_combine");
    }
    return AK_OK;
}
