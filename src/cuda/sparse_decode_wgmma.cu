/*
 * sparse_decode_wgmma.cu -- sparse MLA decode for h_q > 32 on Hopper tensor cores (wgmma), same
 * semantics, split rule and partial-row format as sparse_decode.cu (see its header comment).
 *
 * One CTA = (request r, query token i, 64-head tile, KV split), two warpgroups (256 threads).
 * Shared memory holds Q [64 heads x d_qk] bf16 (loaded once), K [64 keys x d_qk] bf16 (the
 * dequantized current key tile), P [64 x 64] bf16 and the raw records of the next key tile, which
 * cp.async fetches (rule I1: an invalid slot is never read, its bytes are zero-filled) while the
 * tensor cores work on the current one. Q, K and P use the canonical 128-byte-swizzled K-major
 * layout: 64-dim column blocks of 64 rows x 128 bytes (8 KB each), the 16-byte chunk index of row
 * n XORed with n % 8, every tile 1024-byte aligned (so descriptors carry base offset 0).
 *
 * Per key tile, warpgroup w computes S_w = Q K[32 w .. 32 w + 31]^T (wgmma m64n32k16, A and B
 * from shared memory); the two merge their row maxima through shared memory, so both apply the
 * same m and rescale factor, and each keeps the partial row sum of its own keys (merged once at
 * the end). P, rounded to bf16, goes to a swizzled [64 heads x 64 keys] shared tile, and warpgroup
 * w accumulates O[:, 256 w .. 256 w + 255] += P V with wgmma m64n256k16 (64 x 256 f32 = 128
 * registers per thread), B = V read MN-major from the same K tile: a K-major [key][dim]
 * 128-byte-swizzled block of 64 dims is exactly an MN-major swizzle atom column of V (dims
 * contiguous, 8 keys per 1024-byte atom), so its descriptor has leading byte offset 8192 (next 64
 * dims) and stride byte offset 1024 (next 8 keys). tests/gpu_test_wgmma.cu checks these layouts.
 *
 * Latency: the records of tile t+1 are fetched by cp.async during tile t's products, and those of
 * tile t+2 are prefetched into L2 (their slot ids are loaded a tile ahead), so the cp.async of
 * the next tile mostly hits L2.
 */
#include "cuda/cuda_backend.h"
#include "cuda/cuda_common.cuh"
#include "cuda/ptx.cuh"
#include "cuda/sparse_decode.cuh"

#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>

#define AK_SDW_THREADS 256
#define AK_SDW_HEADS 64
#define AK_SDW_TILE 8192 /* bytes of one 64-row x 64-dim bf16 swizzled column block */

/* Byte offset of the 16-byte chunk holding dims d..d+7 (d % 8 == 0) of row n in a swizzled tile. */
__device__ __forceinline__ uint32_t ak_sdw_off(int n, int d) {
    return (uint32_t)((d >> 6) * AK_SDW_TILE + n * 128 + ((((d >> 3) & 7) ^ (n & 7)) << 4));
}

/* Record bytes staged per key (16-byte multiple) and 16-byte chunks per record. */
template <int LAYOUT> struct ak_sdw_rec { enum { BYTES = ak_sd_geo<LAYOUT>::REC, CH = BYTES / 16 }; };

/* Shared-memory map (bytes from the 1024-aligned base); the V4 scale arrays exist only for V4,
   which keeps MLA_BF16 (three 73.7 KB tiles) under the 227 KB limit. */
template <int LAYOUT> struct ak_sdw_smem_map {
    enum {
        V4 = LAYOUT == AK_LAYOUT_DSV4_FP8_UE8M0,
        KB = ak_sd_geo<LAYOUT>::DQK / 64,
        Q = 0,                                       /* [KB][64 heads][128 B] bf16 swizzled */
        K = Q + KB * AK_SDW_TILE,                    /* [KB][64 keys][128 B] bf16 swizzled */
        P = K + KB * AK_SDW_TILE,                    /* [64 heads][64 keys] bf16 swizzled */
        RAW = P + AK_SDW_TILE,                       /* [64][REC] staged records */
        SC8 = RAW + AK_SD_KEYS * ak_sdw_rec<LAYOUT>::BYTES, /* V4: [64][8] scale bytes */
        RO = SC8 + (V4 ? AK_SD_KEYS * 8 : 0),        /* [2][64] int64 record offset or -1 */
        SO = RO + 2 * AK_SD_KEYS * 8,                /* V4: [2][64] int64 scale offset or -1 */
        RED = SO + (V4 ? 2 * AK_SD_KEYS * 8 : 0),    /* [2 warpgroups][64 rows] f32 max, then sum */
        BYTES = RED + 2 * 64 * 4
    };
};

/* First tile >= t of [t, t_end) that starts before its row's length, else t_end. */
__device__ __forceinline__ int ak_sdw_next(const ak_sd_params &p, int t, int t_end, int32_t len0,
                                           int32_t len1) {
    for (; t < t_end; t++) {
        const int ex = t >= p.list[0].tiles;
        const int base = (ex ? t - p.list[0].tiles : t) * AK_SD_KEYS;
        if (base < (ex ? len1 : len0)) break;
    }
    return t;
}

/* Index value of key k of tile t as stored (checked by ak_sdw_locate when used, so nothing waits
   for the load here), or -1 past the row's length. */
__device__ __forceinline__ int32_t ak_sdw_slot(const ak_sd_params &p, int64_t r, int64_t i, int t,
                                               int k, int32_t len0, int32_t len1) {
    const int ex = t >= p.list[0].tiles;
    const ak_sd_list &l = p.list[ex];
    const int pos = (ex ? t - p.list[0].tiles : t) * AK_SD_KEYS + k;
    if (pos >= (ex ? len1 : len0)) return -1;
    return l.idx[r * l.idx_s0 + i * l.idx_s1 + pos];
}

/* Byte offsets from the list's pool of slot `slot`'s record (ro) and, for V4, of its scale bytes
   (so); -1 for an invalid slot (rule I1: negative or >= capacity). Computed once per key, so the
   per-chunk copies need no division. */
template <int LAYOUT>
__device__ __forceinline__ void ak_sdw_locate(const ak_sd_list &l, int32_t slot, int64_t &ro, int64_t &so) {
    ro = so = -1;
    if ((uint32_t)slot >= l.capacity) return;
    const int32_t page = ak_sd_page(l, slot), ts = slot - page * l.page_size;
    const int64_t pg = (int64_t)page * l.page_stride;
    ro = pg + (int64_t)ts * ak_sdw_rec<LAYOUT>::BYTES;
    if (LAYOUT == AK_LAYOUT_DSV4_FP8_UE8M0) so = pg + (int64_t)l.page_size * 576 + (int64_t)ts * 8;
}

/* Issues the cp.async of one tile's records into raw [64][REC] (V4: scale bytes into sc8 [64][8]);
   ro / so [64] from ak_sdw_locate. */
template <int LAYOUT>
__device__ __forceinline__ void ak_sdw_fetch(const uint8_t *pool, const int64_t *ro, const int64_t *so,
                                             uint8_t *raw, uint8_t *sc8) {
    typedef ak_sdw_rec<LAYOUT> R;
    ak_sd_copy_tile<R::CH, AK_SDW_THREADS>(pool, ro, ak_smem_addr(raw), R::BYTES);
    if (LAYOUT == AK_LAYOUT_DSV4_FP8_UE8M0 && threadIdx.x < AK_SD_KEYS) {
        const int64_t o = so[threadIdx.x];
        ak_cp_async8(ak_smem_addr(sc8 + threadIdx.x * 8), o >= 0 ? pool + o : pool, o >= 0 ? 8u : 0u);
    }
    ak_cp_async_commit();
}

/* Prefetches into L2 the record (and V4 scale bytes) at offsets ro / so of `pool`; ro -1 does
   nothing. */
template <int LAYOUT>
__device__ __forceinline__ void ak_sdw_prefetch(const uint8_t *pool, int64_t ro, int64_t so) {
    if (ro < 0) return;
    typedef ak_sdw_rec<LAYOUT> R;
#pragma unroll
    for (int off = 0; off < R::BYTES; off += 128) ak_prefetch_l2(pool + ro + off);
    ak_prefetch_l2(pool + ro + R::BYTES - 1);
    if (LAYOUT == AK_LAYOUT_DSV4_FP8_UE8M0) ak_prefetch_l2(pool + so);
}

/* Dequantizes the staged records into the swizzled bf16 K tile (layouts.md 4). Zero-filled
   records of invalid keys give zero rows (scale 0 or a finite tiny ue8m0 times 0). Four threads
   per key, each taking every fourth 16-byte output chunk, so which chunks are fp8 (and their
   scale block) and which are bf16 RoPE is known at compile time; shared-memory reads are issued
   in batches of NB before the first conversion. */
template <int LAYOUT>
__device__ __forceinline__ void ak_sdw_dequant(const uint8_t *raw, const uint8_t *sc8, uint8_t *ks,
                                               float kscale) {
    typedef ak_sdw_rec<LAYOUT> R;
    enum {
        TPK = AK_SDW_THREADS / AK_SD_KEYS,
        CH = ak_sd_geo<LAYOUT>::CPT, /* output chunks per key: 16 fp8 or 8 bf16 values each */
        PER = CH / TPK,
        NQ = LAYOUT == AK_LAYOUT_MLA_BF16 ? 0 : LAYOUT == AK_LAYOUT_MLA_FP8_PERTENSOR ? 36
           : LAYOUT == AK_LAYOUT_DSV4_FP8_UE8M0 ? 28 : 32, /* fp8 chunks */
        ROPE = LAYOUT == AK_LAYOUT_DSA_FP8_BLOCKSCALE ? 528 : 448, /* bf16 rope byte offset */
        NB = 5 /* batch of chunk loads beside the 128 O accumulators */
    };
    static_assert(CH % TPK == 0 && NQ % TPK == 0, "chunks split evenly over a key's threads");
    const int tok = (int)threadIdx.x / TPK, j = (int)threadIdx.x % TPK;
    const uint8_t *rec = raw + tok * R::BYTES;
#pragma unroll
    for (int u0 = 0; u0 < PER; u0 += NB) {
        uint4 v[NB];
#pragma unroll
        for (int u = u0; u < u0 + NB && u < PER; u++) {
            const int c = j + u * TPK;
            v[u - u0] = *reinterpret_cast<const uint4 *>(
                rec + (LAYOUT == AK_LAYOUT_MLA_BF16 || u < NQ / TPK ? c * 16 : ROPE + (c - NQ) * 16));
        }
#pragma unroll
        for (int u = u0; u < u0 + NB && u < PER; u++) {
            const int c = j + u * TPK;
            if (LAYOUT == AK_LAYOUT_MLA_BF16) {
                *reinterpret_cast<uint4 *>(ks + ak_sdw_off(tok, c * 8)) = v[u - u0];
            } else if (u < NQ / TPK) {
                const float sc = ak_sd_chunk_scale<LAYOUT>(rec, sc8 + tok * 8, u, kscale);
                uint4 lo, hi;
                ak_sd_dequant16(v[u - u0], sc, lo, hi);
                *reinterpret_cast<uint4 *>(ks + ak_sdw_off(tok, c * 16)) = lo;
                *reinterpret_cast<uint4 *>(ks + ak_sdw_off(tok, c * 16 + 8)) = hi;
            } else {
                *reinterpret_cast<uint4 *>(ks + ak_sdw_off(tok, NQ * 16 + (c - NQ) * 8)) = v[u - u0];
            }
        }
    }
}

template <int LAYOUT>
__global__ void __launch_bounds__(AK_SDW_THREADS, 1) ak_sdw_main(const ak_sd_params p) {
    typedef ak_sd_geo<LAYOUT> G;
    enum { DQK = G::DQK, KB = DQK / 64, KSTEPS = DQK / 16 };
    extern __shared__ __align__(16) uint8_t smem_raw[];
    /* 1024-byte aligned for the 128-byte swizzle; offsetting the __shared__ array itself (not an
       integer-cast address) keeps every access a shared-memory one (LDS/STS, not generic LD/ST:
       21% of the stall samples were generic loads of the staged records, device run 4) */
    uint8_t *smem = smem_raw + ((1024u - (ak_smem_addr(smem_raw) & 1023u)) & 1023u);
    typedef ak_sdw_smem_map<LAYOUT> M;
    uint8_t *qs = smem + M::Q, *ks = smem + M::K, *ps = smem + M::P, *raw = smem + M::RAW;
    uint8_t *sc8 = smem + M::SC8;
    int64_t *ros = (int64_t *)(smem + M::RO);
    int64_t *sos = (int64_t *)(smem + (M::V4 ? (int)M::SO : (int)M::RO)); /* read only for V4 */
    float *red = (float *)(smem + M::RED);

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wg = warp >> 2, wr = warp & 3; /* warpgroup, warp within it (rows 16 wr..) */
    const int g = lane >> 2, c4 = lane & 3;
    int64_t cta = blockIdx.x;
    const int split = (int)(cta % p.splits);
    cta /= p.splits;
    const int ht = (int)(cta % p.htiles);
    const int64_t ri = cta / p.htiles; /* r * s_q + i */
    const int64_t r = ri / p.s_q, i = ri % p.s_q;
    const int h0 = ht * AK_SDW_HEADS;

    const int32_t len0 = ak_sd_len(p.list[0], r, i), len1 = ak_sd_len(p.list[1], r, i);
    const int n_tiles = p.list[0].tiles + p.list[1].tiles;
    int t_begin, t_end;
    ak_sd_split_range(split, n_tiles, p.splits, t_begin, t_end);
    int t = ak_sdw_next(p, t_begin, t_end, len0, len1);

    /* The first tile's records go out before the Q tile is loaded; the second tile's record
       offsets (threads < 64) are computed too, so its records can be prefetched into L2 below. */
    int64_t nro = -1, nso = -1; /* offsets of the next tile's key `tid` (threads < 64) */
    if (t < t_end) {
        const int t1 = ak_sdw_next(p, t + 1, t_end, len0, len1);
        if (tid < AK_SD_KEYS) {
            int64_t ro, so;
            ak_sdw_locate<LAYOUT>(p.list[t >= p.list[0].tiles], ak_sdw_slot(p, r, i, t, tid, len0, len1), ro, so);
            ros[tid] = ro;
            if (M::V4) sos[tid] = so;
            if (t1 < t_end)
                ak_sdw_locate<LAYOUT>(p.list[t1 >= p.list[0].tiles], ak_sdw_slot(p, r, i, t1, tid, len0, len1),
                                      nro, nso);
        }
        __syncthreads();
        ak_sdw_fetch<LAYOUT>(p.list[t >= p.list[0].tiles].pool, ros, sos, raw, sc8);
    }

    /* Q tile -> swizzled shared memory, zero rows past h_q; 9 loads in flight per batch. */
    {
        enum { QCH = DQK / 8, QITEMS = AK_SDW_HEADS * QCH, QN = QITEMS / AK_SDW_THREADS, QB = 9 };
        const uint16_t *qb = p.q + r * p.q_s0 + i * p.q_s1;
#pragma unroll
        for (int k0 = 0; k0 < QN; k0 += QB) {
            uint4 qv[QB];
#pragma unroll
            for (int k = 0; k < QB; k++) {
                const int it = (k0 + k) * AK_SDW_THREADS + tid, row = it / QCH, c = it % QCH;
                qv[k] = make_uint4(0, 0, 0, 0);
                if (k0 + k < QN && h0 + row < p.h_q) {
                    const uint16_t *src = qb + (int64_t)(h0 + row) * p.q_s2 + c * 8;
                    if (p.q_vec) {
                        qv[k] = ak_ldg_nc_v4(src);
                    } else {
                        uint32_t w[4];
                        for (int e = 0; e < 4; e++) w[e] = (uint32_t)src[2 * e] | ((uint32_t)src[2 * e + 1] << 16);
                        qv[k] = make_uint4(w[0], w[1], w[2], w[3]);
                    }
                }
            }
#pragma unroll
            for (int k = 0; k < QB; k++) {
                const int it = (k0 + k) * AK_SDW_THREADS + tid, row = it / QCH, c = it % QCH;
                if (k0 + k < QN) *reinterpret_cast<uint4 *>(qs + ak_sdw_off(row, c * 8)) = qv[k];
            }
        }
    }
    if (t < t_end) {
        const int t1 = ak_sdw_next(p, t + 1, t_end, len0, len1);
        if (t1 < t_end) ak_sdw_prefetch<LAYOUT>(p.list[t1 >= p.list[0].tiles].pool, nro, nso);
    }

    float o[128];
#pragma unroll
    for (int j = 0; j < 128; j++) o[j] = 0.0f;
    float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};
    const uint32_t qa = ak_smem_addr(qs), ka = ak_smem_addr(ks);
    /* Descriptors of each operand's first k16 step; a step adds its byte offset >> 4 to the start
       address field (bits 0-13, no carry: shared addresses stay below 256 KB), so the loops do one
       add per descriptor instead of rebuilding it (13 instructions per QK^T step before). */
    const uint64_t dq0 = ak_wgmma_desc_sw128(qa, 16, 1024);
    const uint64_t dk0 = ak_wgmma_desc_sw128(ka + wg * 32 * 128, 16, 1024);
    const uint64_t dp0 = ak_wgmma_desc_sw128(ak_smem_addr(ps), 16, 1024);
    const uint64_t dv0 = ak_wgmma_desc_sw128(ka + wg * 4 * AK_SDW_TILE, AK_SDW_TILE, 1024);
    int cur = 0;

    while (t < t_end) {
        const int tn = ak_sdw_next(p, t + 1, t_end, len0, len1);
        const int tnn = tn < t_end ? ak_sdw_next(p, tn + 1, t_end, len0, len1) : t_end;
        /* slot ids two tiles ahead: they arrive during this tile's work, then their records are
           prefetched into L2, so the cp.async of that tile (next iteration) mostly hits L2 */
        int32_t pslot = -1;
        if (tnn < t_end && tid < AK_SD_KEYS) pslot = ak_sdw_slot(p, r, i, tnn, tid, len0, len1);
        float kscale = 1.0f;
        if (LAYOUT == AK_LAYOUT_MLA_FP8_PERTENSOR) {
            const ak_sd_list &l = p.list[t >= p.list[0].tiles];
            kscale = l.k_scale_ptr != NULL ? *l.k_scale_ptr : l.k_scale;
        }
        ak_cp_async_wait_all();
        __syncthreads(); /* raw holds tile t; the previous tile's wgmma reads of ks are done */
        ak_sdw_dequant<LAYOUT>(raw, sc8, ks, kscale);
        if (tid < AK_SD_KEYS) {
            ros[(cur ^ 1) * AK_SD_KEYS + tid] = nro;
            if (M::V4) sos[(cur ^ 1) * AK_SD_KEYS + tid] = nso;
        }
        ak_fence_proxy_async(); /* Q and K tile writes -> the wgmma (async proxy) reads */
        __syncthreads();
        if (tn < t_end)
            ak_sdw_fetch<LAYOUT>(p.list[tn >= p.list[0].tiles].pool, ros + (cur ^ 1) * AK_SD_KEYS,
                                 sos + (cur ^ 1) * AK_SD_KEYS, raw, sc8);

        /* S = Q K^T for the 32 keys 32 wg .. 32 wg + 31 of this warpgroup */
        float s[16];
#pragma unroll
        for (int j = 0; j < 16; j++) s[j] = 0.0f;
        ak_wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < KSTEPS; kk++) {
            const uint32_t off = (kk >> 2) * AK_SDW_TILE + (kk & 3) * 32;
            ak_wgmma_m64n32k16_ss(s, dq0 + (off >> 4), dk0 + (off >> 4), kk > 0);
        }
        ak_wgmma_commit();
        ak_wgmma_wait0();
#pragma unroll
        for (int j = 0; j < 16; j++) ak_reg_fence(s[j]);

        /* Online softmax on rows 16 wr + g (hr 0) and + 8 (hr 1); fragment s[4j + 2hr + e] is
           key 32 wg + 8j + 2c4 + e. The row max of the tile is merged across the two
           warpgroups through `red`, so both apply the same m and alpha; each keeps the partial
           sum of its own keys (merged at the end). */
        const int64_t *key_ro = ros + cur * AK_SD_KEYS;
        float mx[2];
#pragma unroll
        for (int hr = 0; hr < 2; hr++) {
            mx[hr] = -INFINITY;
#pragma unroll
            for (int j = 0; j < 4; j++) {
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const int key = 32 * wg + 8 * j + 2 * c4 + e;
                    float v = key_ro[key] >= 0 ? s[4 * j + 2 * hr + e] * p.scale_log2 : -INFINITY;
                    s[4 * j + 2 * hr + e] = v;
                    mx[hr] = fmaxf(mx[hr], v);
                }
            }
            mx[hr] = fmaxf(mx[hr], __shfl_xor_sync(0xffffffffu, mx[hr], 1));
            mx[hr] = fmaxf(mx[hr], __shfl_xor_sync(0xffffffffu, mx[hr], 2));
            if (c4 == 0) red[wg * 64 + 16 * wr + g + 8 * hr] = mx[hr];
        }
        __syncthreads();
        /* Lazy rescaling: while no row of the warp's 16 gains more than 8 (log2 units) over its
           running max, the max stays (P <= 2^8, the same relative rounding in bf16) and the 128
           O accumulators are not rescaled; both warpgroups' warps of these rows decide alike. */
        float mtile[2];
#pragma unroll
        for (int hr = 0; hr < 2; hr++) {
            const int row = 16 * wr + g + 8 * hr;
            mtile[hr] = fmaxf(red[row], red[64 + row]);
        }
        const bool keep = __all_sync(0xffffffffu, mtile[0] <= m_run[0] + 8.0f && mtile[1] <= m_run[1] + 8.0f);
        float alpha[2];
#pragma unroll
        for (int hr = 0; hr < 2; hr++) {
            const int row = 16 * wr + g + 8 * hr;
            const float m_new = keep ? m_run[hr] : fmaxf(m_run[hr], mtile[hr]);
            const float m_use = m_new == -INFINITY ? 0.0f : m_new;
            alpha[hr] = keep ? 1.0f : ak_ex2(m_run[hr] - m_use);
            float sum = 0.0f;
#pragma unroll
            for (int j = 0; j < 4; j++) {
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const float x = ak_ex2(s[4 * j + 2 * hr + e] - m_use);
                    s[4 * j + 2 * hr + e] = x;
                    sum += x;
                }
            }
            sum += __shfl_xor_sync(0xffffffffu, sum, 1);
            sum += __shfl_xor_sync(0xffffffffu, sum, 2);
            l_run[hr] = l_run[hr] * alpha[hr] + sum;
            m_run[hr] = m_new;
            /* P rounded to bf16 into the swizzled [head][key] tile (the A operand of P V) */
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const int key = 32 * wg + 8 * j + 2 * c4;
                *reinterpret_cast<uint32_t *>(ps + ak_sdw_off(row, key & ~7) + (key & 7) * 2) =
                    ak_sd_pack_bf16(s[4 * j + 2 * hr], s[4 * j + 2 * hr + 1]);
            }
        }
        if (!keep) {
#pragma unroll
            for (int j = 0; j < 32; j++) {
                o[4 * j] *= alpha[0];
                o[4 * j + 1] *= alpha[0];
                o[4 * j + 2] *= alpha[1];
                o[4 * j + 3] *= alpha[1];
            }
        }
        ak_fence_proxy_async(); /* P tile writes -> wgmma reads */
        __syncthreads();

        /* O[:, 256 wg ..] += P V; P K-major from ps, V = K tile dims 256 wg .., MN-major */
#pragma unroll
        for (int j = 0; j < 128; j++) ak_reg_fence(o[j]);
        ak_wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < 4; kk++)
            ak_wgmma_m64n256k16_ss_tb(o, dp0 + (kk * 32 >> 4), dv0 + (kk * 2048 >> 4));
        ak_wgmma_commit();
        /* tile tnn's records -> L2 while the tensor cores run */
        nro = nso = -1;
        if (tnn < t_end) {
            const ak_sd_list &l = p.list[tnn >= p.list[0].tiles];
            ak_sdw_locate<LAYOUT>(l, pslot, nro, nso);
            ak_sdw_prefetch<LAYOUT>(l.pool, nro, nso);
        }
        ak_wgmma_wait0();
#pragma unroll
        for (int j = 0; j < 128; j++) ak_reg_fence(o[j]);
        cur ^= 1;
        t = tn;
    }

    /* Both warpgroups' partial sums -> the row sum (red is free: the loop ended on a barrier
       after its last read, or never ran). */
#pragma unroll
    for (int hr = 0; hr < 2; hr++)
        if (c4 == 0) red[(wg ^ 1) * 64 + 16 * wr + g + 8 * hr] = l_run[hr];
    __syncthreads();
#pragma unroll
    for (int hr = 0; hr < 2; hr++) l_run[hr] += red[wg * 64 + 16 * wr + g + 8 * hr];

    /* Write this split's rows: final out/lse with one split, else normalized partials. */
    const int d0 = wg * 256;
#pragma unroll
    for (int hr = 0; hr < 2; hr++) {
        const int h = h0 + 16 * wr + g + hr * 8;
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
            if (p.lse != NULL && wg == 0 && c4 == 0) p.lse[r * p.l_s0 + i * p.l_s1 + h * p.l_s2] = lse_e;
            const int64_t ob = r * p.o_s0 + i * p.o_s1 + h * p.o_s2;
#pragma unroll
            for (int j = 0; j < 32; j++) {
                const int d = d0 + j * 8 + c4 * 2;
                const float v0 = o[4 * j + 2 * hr] * f, v1 = o[4 * j + 2 * hr + 1] * f;
                if (p.out_f32)
                    *reinterpret_cast<float2 *>((float *)p.out + ob + d) = make_float2(v0, v1);
                else
                    *reinterpret_cast<uint32_t *>((uint16_t *)p.out + ob + d) = ak_sd_pack_bf16(v0, v1);
            }
        } else {
            const int64_t rows = (int64_t)p.b * p.s_q * p.h_q;
            const float f = lsum > 0.0f ? 1.0f / lsum : 0.0f;
            if (wg == 0 && c4 == 0) p.lacc[split * rows + row] = lse2;
            float *dst = p.oacc + ((int64_t)split * rows + row) * AK_SD_DV;
#pragma unroll
            for (int j = 0; j < 32; j++) {
                const int d = d0 + j * 8 + c4 * 2;
                *reinterpret_cast<float2 *>(dst + d) = make_float2(o[4 * j + 2 * hr] * f, o[4 * j + 2 * hr + 1] * f);
            }
        }
    }
}

/* ---- host side ----------------------------------------------------------------------------- */

static size_t ak_sdw_smem(int layout) {
    size_t bytes = (size_t)ak_sdw_smem_map<AK_LAYOUT_DSV4_FP8_UE8M0>::BYTES;
    if (layout == AK_LAYOUT_MLA_BF16) bytes = (size_t)ak_sdw_smem_map<AK_LAYOUT_MLA_BF16>::BYTES;
    if (layout == AK_LAYOUT_MLA_FP8_PERTENSOR) bytes = (size_t)ak_sdw_smem_map<AK_LAYOUT_MLA_FP8_PERTENSOR>::BYTES;
    if (layout == AK_LAYOUT_DSA_FP8_BLOCKSCALE) bytes = (size_t)ak_sdw_smem_map<AK_LAYOUT_DSA_FP8_BLOCKSCALE>::BYTES;
    return 1024 /* alignment slack */ + bytes;
}

/* Serves sparse decode with h_q > 32 on the four MLA layouts. Splits from shapes and the SM count
   only (one CTA per SM): the fewest splits minimising waves x (tiles per CTA + 2), the 2 standing
   for a CTA's fixed work (Q tile, row writes). Without it b 128 h_q 128 took 32 splits (63 waves
   of one tile each, then a combine of 1 GB of partial rows: 1140 us in device run w1) over one
   split (2 waves of 32 tiles). Declines fewer than 8 (token, 64-head tile) units: there the
   16-head mma.sync tiles fill the SMs with fewer splits (b 1 h_q 128: 16.6 us against 24.5 here;
   b 8 h_q 128, 16 units: 38.7 here against 42.7). */
int ak_sdw_plan(const ak_context *ctx, const ak_mla_decode_args *a, ak_sd_plan *pl) {
    const int layout = (int)a->cache->layout;
    if (a->block_table != NULL || a->q->shape[2] <= 32) return 0;
    if (layout != AK_LAYOUT_DSA_FP8_BLOCKSCALE && layout != AK_LAYOUT_DSV4_FP8_UE8M0 &&
        layout != AK_LAYOUT_MLA_BF16 && layout != AK_LAYOUT_MLA_FP8_PERTENSOR)
        return 0;
    const int64_t b = a->q->shape[0], s_q = a->q->shape[1], h_q = a->q->shape[2];
    const int64_t topk = a->indices->shape[2];
    const int64_t etopk = a->extra_indices != NULL ? a->extra_indices->shape[2] : 0;
    if (b * s_q * ((h_q + AK_SDW_HEADS - 1) / AK_SDW_HEADS) < 8) return 0;
    pl->kernel = 1;
    pl->mw = 4;
    pl->htiles = (int)((h_q + AK_SDW_HEADS - 1) / AK_SDW_HEADS);
    pl->n_tiles = (int)((topk + AK_SD_KEYS - 1) / AK_SD_KEYS + (etopk + AK_SD_KEYS - 1) / AK_SD_KEYS);
    pl->smem = ak_sdw_smem(layout);
    const int64_t slots = ctx->cuda != NULL ? ctx->cuda->prop.multiProcessorCount : 132;
    const int64_t base = b * s_q * pl->htiles;
    int64_t splits = 1, best = INT64_MAX;
    for (int64_t sp = 1; sp <= pl->n_tiles; sp++) {
        const int64_t waves = (base * sp + slots - 1) / slots, per = (pl->n_tiles + sp - 1) / sp;
        if (waves * (per + 2) < best) best = waves * (per + 2), splits = sp;
    }
    pl->splits = (int)splits;
    pl->rows = b * s_q * h_q;
    pl->ws_bytes = splits > 1 ? (size_t)splits * (size_t)pl->rows * (AK_SD_DV + 1) * sizeof(float) : 0;
    return 1;
}

template <int LAYOUT>
static ak_status ak_sdw_launch_t(ak_context *ctx, const ak_sd_params &p, const ak_sd_plan &pl) {
    AK_CUDA_TRY(cudaFuncSetAttribute(ak_sdw_main<LAYOUT>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     (int)pl.smem));
    const int64_t grid = (int64_t)p.b * p.s_q * pl.htiles * pl.splits;
    ak_sdw_main<LAYOUT><<<(unsigned)grid, AK_SDW_THREADS, pl.smem, ak_stream(ctx)>>>(p);
    AK_CUDA_CHECK_LAUNCH("ak_sdw_main");
    return AK_OK;
}

ak_status ak_sdw_launch(ak_context *ctx, const ak_sd_params &p, const ak_sd_plan &pl, int layout) {
    switch (layout) {
    case AK_LAYOUT_MLA_BF16: return ak_sdw_launch_t<AK_LAYOUT_MLA_BF16>(ctx, p, pl);
    case AK_LAYOUT_MLA_FP8_PERTENSOR: return ak_sdw_launch_t<AK_LAYOUT_MLA_FP8_PERTENSOR>(ctx, p, pl);
    case AK_LAYOUT_DSA_FP8_BLOCKSCALE: return ak_sdw_launch_t<AK_LAYOUT_DSA_FP8_BLOCKSCALE>(ctx, p, pl);
    case AK_LAYOUT_DSV4_FP8_UE8M0: return ak_sdw_launch_t<AK_LAYOUT_DSV4_FP8_UE8M0>(ctx, p, pl);
    default:
        return ak_fail(AK_ERR_UNSUPPORTED, "ak_mla_decode: cache layout %d has no sparse CUDA kernel", layout);
    }
}
