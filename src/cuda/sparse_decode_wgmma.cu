/*
 * sparse_decode_wgmma.cu -- sparse MLA decode for h_q > 32 on Hopper tensor cores (wgmma), same
 * semantics, split rule and partial-row format as sparse_decode.cu (see its header comment).
 *
 * One CTA = (request r, query token i, 64-head tile, KV split), two warpgroups (256 threads).
 * Shared memory holds Q [64 heads x d_qk] bf16 (loaded once) and two K tiles [64 keys x d_qk]
 * bf16 (dequantized key tiles t and t + 1; 221 KB for d_qk 576). Q and K use the canonical
 * 128-byte-swizzled K-major layout: 64-dim column blocks of 64 rows x 128 bytes (8 KB each), the
 * 16-byte chunk index of row n XORed with n % 8, every tile 1024-byte aligned (so descriptors
 * carry base offset 0).
 *
 * Per key tile, both warpgroups compute all of S = Q K^T (wgmma m64n64k16, A and B from shared
 * memory), so each has whole rows: the same running max, row sum and P in both, no exchange. P,
 * rounded to bf16, stays in registers as the A operand of P V (the D fragment of keys 16k..16k+15
 * is the A fragment of step k), and warpgroup w accumulates O[:, 256 w .. 256 w + 255] += P V with
 * wgmma m64n256k16 (64 x 256 f32 = 128 registers per thread), B = V read MN-major from the same K
 * tile: a K-major [key][dim] 128-byte-swizzled block of 64 dims is exactly an MN-major swizzle
 * atom column of V (dims contiguous, 8 keys per 1024-byte atom), so its descriptor has leading
 * byte offset 8192 (next 64 dims) and stride byte offset 1024 (next 8 keys).
 * tests/gpu_test_wgmma.cu checks these layouts.
 *
 * Pipeline: the wgmma products are asynchronous, so the same warps that issue them work beside
 * them. While the tensor cores compute S for tile t + 1, the warps dequantize tile t + 2 (whose
 * records they loaded into registers one tile earlier, a warp per record) into the K buffer P V
 * of tile t has just released, then issue the register loads of tile t + 3. The proxy fence of
 * the K writes precedes those loads: the fence is a MEMBAR that would wait for them.
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

/* Shared-memory map (bytes from the 1024-aligned base). Two K tiles: the tensor cores read tile t
   from one while the warps dequantize tile t + 1 into the other (221 KB for d_qk 576). */
template <int LAYOUT> struct ak_sdw_smem_map {
    enum {
        KB = ak_sd_geo<LAYOUT>::DQK / 64,
        Q = 0,                                       /* [KB][64 heads][128 B] bf16 swizzled */
        K = Q + KB * AK_SDW_TILE,                    /* [2][KB][64 keys][128 B] bf16 swizzled */
        VALID = K + 2 * KB * AK_SDW_TILE,            /* [2][64] u8: key of K tile holds a valid slot */
        BYTES = VALID + 2 * AK_SD_KEYS
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

/* Index value of key k of tile t (a tile of this row's lists) as stored, checked by ak_sdw_locate
   when used, so nothing waits for the load here; ok says whether the position is inside the row's
   length. The load itself is unconditional (past the length it reads the list's last entry):
   a conditional write of the register would make the compiler wait, at the next write, for
   every load in flight, the tile's record loads included. */
__device__ __forceinline__ int32_t ak_sdw_slot(const ak_sd_params &p, int64_t r, int64_t i, int t,
                                               int k, int32_t len0, int32_t len1, bool &ok) {
    const int ex = t >= p.list[0].tiles;
    const ak_sd_list &l = p.list[ex];
    const int pos = (ex ? t - p.list[0].tiles : t) * AK_SD_KEYS + k;
    ok = pos < (ex ? len1 : len0);
    return l.idx[r * l.idx_s0 + i * l.idx_s1 + min(pos, l.topk - 1)];
}

/* Byte offsets from the list's pool of slot `slot`'s record (ro) and, for V4, of its scale bytes
   (so); -1 for an invalid slot (rule I1: negative or >= capacity). */
template <int LAYOUT>
__device__ __forceinline__ void ak_sdw_locate(const ak_sd_list &l, int32_t slot, int64_t &ro, int64_t &so) {
    ro = so = -1;
    if ((uint32_t)slot >= l.capacity) return;
    const int32_t page = ak_sd_page(l, slot), ts = slot - page * l.page_size;
    const int64_t pg = (int64_t)page * l.page_stride;
    ro = pg + (int64_t)ts * ak_sd_geo<LAYOUT>::REC;
    if (LAYOUT == AK_LAYOUT_DSV4_FP8_UE8M0) so = pg + (int64_t)l.page_size * 576 + (int64_t)ts * 8;
}

/* A warp's eight keys w, w + 8, ..., w + 56 of a tile in registers, loaded a warp per record so that
   every load instruction reads one record's 512 contiguous fp8 bytes (a quarter-record map, 8
   records x 64 bytes per instruction, backed up the load queue: 23% of the stall samples): lane l
   holds fp8 chunk l (16 values) of each key in f[i] and, for 656 / V4, that chunk's block scale in
   s[i] (656: fp32 of block l / 8; V4: ue8m0 byte l / 4); the bf16 RoPE (656, V4) or the last 64 fp8
   bytes (per-tensor) of four (eight) keys per instruction in r[]. MLA_BF16 keeps nothing here: its
   records go to the K tile by cp.async (72 chunks would not fit beside the 128 O accumulators). */
template <int LAYOUT> struct ak_sdw_raw {
    enum {
        BF16 = LAYOUT == AK_LAYOUT_MLA_BF16,
        PT = LAYOUT == AK_LAYOUT_MLA_FP8_PERTENSOR,
        V4 = LAYOUT == AK_LAYOUT_DSV4_FP8_UE8M0,
        NQL = V4 ? 28 : 32,           /* lanes holding an fp8 chunk */
        ROPE = V4 ? 448 : 528,        /* bf16 RoPE byte offset (656, V4) */
        NF = BF16 ? 1 : 8,
        NR = BF16 ? 1 : PT ? 1 : 2
    };
    uint4 f[NF];
    uint32_t s[NF]; /* raw: fp32 bits (656) or the ue8m0 byte (V4), converted when used */
    uint4 r[NR];
};

/* Loads the warp's keys (ro[i] / so[i] of key w + 8 i held by lane i % 8, shuffled to the warp);
   ro -1 (invalid key, rule I1) reads nothing and gives zeros, so the key's K row is 0. */
template <int LAYOUT>
__device__ __forceinline__ void ak_sdw_load(const uint8_t *pool, int64_t ro_l, int64_t so_l, int lane,
                                            ak_sdw_raw<LAYOUT> &x) {
    typedef ak_sdw_raw<LAYOUT> R;
#pragma unroll
    for (int i = 0; i < (R::BF16 ? 0 : 8); i++) {
        const int64_t ro = __shfl_sync(0xffffffffu, ro_l, i);
        x.f[i] = make_uint4(0, 0, 0, 0);
        x.s[i] = 0u;
        if (ro >= 0 && lane < R::NQL) {
            x.f[i] = ak_ldg_nc_v4(pool + ro + 16 * lane);
            if (LAYOUT == AK_LAYOUT_DSA_FP8_BLOCKSCALE)
                x.s[i] = __ldg(reinterpret_cast<const uint32_t *>(pool + ro + 512) + (lane >> 3));
        }
        if (R::V4) {
            const int64_t so = __shfl_sync(0xffffffffu, so_l, i);
            if (ro >= 0 && lane < R::NQL) x.s[i] = __ldg(pool + so + (lane >> 2));
        }
    }
    if (R::BF16) return;
    if (R::PT) { /* fp8 bytes 512..575 of key w + 8 (l / 4), chunk l % 4 */
        const int64_t ro = __shfl_sync(0xffffffffu, ro_l, lane >> 2);
        x.r[0] = ro >= 0 ? ak_ldg_nc_v4(pool + ro + 512 + 16 * (lane & 3)) : make_uint4(0, 0, 0, 0);
    } else { /* RoPE chunk l % 8 of key w + 8 (4 g + l / 8) */
#pragma unroll
        for (int g = 0; g < 2; g++) {
            const int64_t ro = __shfl_sync(0xffffffffu, ro_l, 4 * g + (lane >> 3));
            x.r[g] = ro >= 0 ? ak_ldg_nc_v4(pool + ro + R::ROPE + 16 * (lane & 7)) : make_uint4(0, 0, 0, 0);
        }
    }
}

/* Dequantizes the warp's keys (layouts.md 4) into the swizzled bf16 K tile ks. */
template <int LAYOUT>
__device__ __forceinline__ void ak_sdw_dequant(const ak_sdw_raw<LAYOUT> &x, int w, int lane, uint8_t *ks,
                                               float kscale) {
    typedef ak_sdw_raw<LAYOUT> R;
#pragma unroll
    for (int i = 0; i < 8; i++) {
        if (lane < R::NQL) {
            uint4 lo, hi;
            const float sc = R::PT ? kscale : R::V4 ? ak_sd_ue8m0(x.s[i]) : __uint_as_float(x.s[i]);
            ak_sd_dequant16(x.f[i], sc, lo, hi);
            *reinterpret_cast<uint4 *>(ks + ak_sdw_off(w + 8 * i, lane * 16)) = lo;
            *reinterpret_cast<uint4 *>(ks + ak_sdw_off(w + 8 * i, lane * 16 + 8)) = hi;
        }
    }
    if (R::PT) {
        const int k = w + 8 * (lane >> 2), c = 32 + (lane & 3);
        uint4 lo, hi;
        ak_sd_dequant16(x.r[0], kscale, lo, hi);
        *reinterpret_cast<uint4 *>(ks + ak_sdw_off(k, c * 16)) = lo;
        *reinterpret_cast<uint4 *>(ks + ak_sdw_off(k, c * 16 + 8)) = hi;
    } else {
#pragma unroll
        for (int g = 0; g < 2; g++)
            *reinterpret_cast<uint4 *>(ks + ak_sdw_off(w + 8 * (4 * g + (lane >> 3)), R::NQL * 16 + (lane & 7) * 8)) =
                x.r[g];
    }
}

/* The per-tensor fp8 scale of list l (1 for the other layouts). */
template <int LAYOUT> __device__ __forceinline__ float ak_sdw_kscale(const ak_sd_list &l) {
    if (LAYOUT != AK_LAYOUT_MLA_FP8_PERTENSOR) return 1.0f;
    return l.k_scale_ptr != NULL ? *l.k_scale_ptr : l.k_scale;
}

/* MLA_BF16: this thread's quarter of key `tok`'s record (chunks j, j + 4, ... of 72) straight into
   the swizzled K tile by cp.async; ro -1 zero-fills (rule I1). */
__device__ __forceinline__ void ak_sdw_copy_bf16(const uint8_t *pool, int64_t ro, int tok, int j, uint8_t *ks) {
    const uint8_t *src = pool + (ro < 0 ? 0 : ro);
    const uint32_t n = ro < 0 ? 0u : 16u, base = ak_smem_addr(ks);
#pragma unroll
    for (int u = 0; u < 18; u++) {
        const int c = j + 4 * u;
        ak_cp_async16(base + ak_sdw_off(tok, c * 8), src + 16 * c, n);
    }
    ak_cp_async_commit();
}

/* One pipeline step of the loader map (thread = quarter q4 of key tok): dequantize the records
   held in x (tile tn, offsets xro) into K tile kn and mark its valid keys; then locate tile tnn's
   keys from their raw slot ids (sraw, sok) and load its records into x (MLA_BF16: tile tn goes to
   kn by cp.async, waited before the next barrier); then read tile tnnn's raw slot ids (any tile
   tv of the row stands in past the end). */
template <int LAYOUT>
__device__ __forceinline__ void ak_sdw_stage(const ak_sd_params &p, int64_t r, int64_t i, int32_t len0,
                                             int32_t len1, int tn, int tnn, int tnnn, int tv, int t_end,
                                             int tok, int q4, uint8_t *kn, uint8_t *kvalid,
                                             ak_sdw_raw<LAYOUT> &x, int64_t &xro, int32_t &sraw, bool &sok) {
    const int w = (int)threadIdx.x >> 5, lane = (int)threadIdx.x & 31;
    /* read on every path (an iteration old, so already here): the new slot load below then writes
       a register with no load in flight */
    const int32_t slot = sok ? sraw : -1;
    if (tn < t_end) {
        const ak_sd_list &l = p.list[tn >= p.list[0].tiles];
        if (LAYOUT == AK_LAYOUT_MLA_BF16) ak_sdw_copy_bf16(l.pool, xro, tok, q4, kn);
        else ak_sdw_dequant<LAYOUT>(x, w, lane, kn, ak_sdw_kscale<LAYOUT>(l));
        if (LAYOUT == AK_LAYOUT_MLA_BF16) {
            if (q4 == 0) kvalid[tok] = xro >= 0;
        } else if (lane < 8) {
            kvalid[w + 8 * lane] = xro >= 0;
        }
        /* K tile writes -> the wgmma (async proxy) reads, before the record loads below: the
           fence (a MEMBAR) would otherwise wait for them */
        if (LAYOUT != AK_LAYOUT_MLA_BF16) ak_fence_proxy_async();
    }
    if (tnn < t_end) {
        const ak_sd_list &l = p.list[tnn >= p.list[0].tiles];
        int64_t xso;
        ak_sdw_locate<LAYOUT>(l, slot, xro, xso);
        ak_sdw_load<LAYOUT>(l.pool, xro, xso, lane, x);
    }
    bool ok;
    sraw = ak_sdw_slot(p, r, i, tnnn < t_end ? tnnn : tv, tok, len0, len1, ok);
    sok = ok && tnnn < t_end;
}

/* Issues S = Q K^T for the 64 keys of a K tile (every warpgroup computes all of S, so P stays in
   registers as the A operand of its P V): descriptors of the first k16 step of Q and of the K
   tile; a step adds its byte offset >> 4 to the start address field (bits 0-13, no carry: shared
   addresses stay below 256 KB). */
template <int KSTEPS>
__device__ __forceinline__ void ak_sdw_qk(float *s, uint64_t dq0, uint64_t dk0) {
    ak_wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < KSTEPS; kk++) {
        const uint32_t off = (kk >> 2) * AK_SDW_TILE + (kk & 3) * 32;
        ak_wgmma_m64n64k16_ss(s, dq0 + (off >> 4), dk0 + (off >> 4), kk > 0);
    }
    ak_wgmma_commit();
}

template <int LAYOUT>
__global__ void __launch_bounds__(AK_SDW_THREADS, 1) ak_sdw_main(const ak_sd_params p) {
    typedef ak_sd_geo<LAYOUT> G;
    enum { DQK = G::DQK, KB = DQK / 64, KSTEPS = DQK / 16, BF16 = LAYOUT == AK_LAYOUT_MLA_BF16 };
    extern __shared__ __align__(16) uint8_t smem_raw[];
    /* 1024-byte aligned for the 128-byte swizzle; offsetting the __shared__ array itself (not an
       integer-cast address) keeps every access a shared-memory one (LDS/STS, not generic LD/ST) */
    uint8_t *smem = smem_raw + ((1024u - (ak_smem_addr(smem_raw) & 1023u)) & 1023u);
    typedef ak_sdw_smem_map<LAYOUT> M;
    uint8_t *qs = smem + M::Q, *valid = smem + M::VALID;

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wg = warp >> 2, wr = warp & 3; /* warpgroup, warp within it (rows 16 wr..) */
    const int g = lane >> 2, c4 = lane & 3;
    /* loader map: MLA_BF16 copies a quarter of key tid / 4's record per thread; the fp8 layouts load
       a warp per record, lane l % 8 holding the slot and offsets of key warp + 8 (l % 8) */
    const int tok = BF16 ? tid >> 2 : warp + 8 * (lane & 7), q4 = tid & 3;
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
    /* Tiles t (in K buffer kb), tn (its records in x, or for MLA_BF16 its offset in xro) and tnn
       (its raw slot id for key `tok` in sraw) of the pipeline. */
    int t = ak_sdw_next(p, t_begin, t_end, len0, len1);
    int tn = t < t_end ? ak_sdw_next(p, t + 1, t_end, len0, len1) : t_end;
    int tnn = tn < t_end ? ak_sdw_next(p, tn + 1, t_end, len0, len1) : t_end;
    ak_sdw_raw<LAYOUT> x;
    int64_t xro = -1;
    int32_t sraw = -1;
    bool sok = false;
    int kb = 0;

    /* Prologue: tile t's records, then the Q tile, then t's dequantization into K buffer 0 and
       tile tn's loads. */
    if (t < t_end) {
        const ak_sd_list &l = p.list[t >= p.list[0].tiles];
        int64_t xso;
        bool ok;
        const int32_t slot = ak_sdw_slot(p, r, i, t, tok, len0, len1, ok);
        ak_sdw_locate<LAYOUT>(l, ok ? slot : -1, xro, xso);
        ak_sdw_load<LAYOUT>(l.pool, xro, xso, lane, x);
        sraw = ak_sdw_slot(p, r, i, tn < t_end ? tn : t, tok, len0, len1, ok);
        sok = ok && tn < t_end;
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
        ak_sdw_stage<LAYOUT>(p, r, i, len0, len1, t, tn, tnn, t, t_end, tok, q4, smem + M::K, valid, x, xro, sraw, sok);
        if (BF16) ak_cp_async_wait_all();
    }
    ak_fence_proxy_async(); /* Q (and MLA_BF16 K) tile writes -> the wgmma (async proxy) reads */
    __syncthreads();

    float o[128];
#pragma unroll
    for (int j = 0; j < 128; j++) o[j] = 0.0f;
    float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};
    const uint32_t ka = ak_smem_addr(smem + M::K);
    /* Descriptors of each operand's first k16 step (one add per step in the loops); the second K
       buffer is KBUF further. */
    const uint64_t dq0 = ak_wgmma_desc_sw128(ak_smem_addr(qs), 16, 1024);
    const uint64_t dk0 = ak_wgmma_desc_sw128(ka, 16, 1024);
    const uint64_t dv0 = ak_wgmma_desc_sw128(ka + wg * 4 * AK_SDW_TILE, AK_SDW_TILE, 1024);
    enum { KBUF = KB * AK_SDW_TILE >> 4 }; /* descriptor step between the K buffers */

    /* Pipeline, entering iteration t with S_t computed, tile tn dequantized in K buffer kb ^ 1 (or
       on its way by cp.async) and tile tnn's records in registers: softmax of S_t into P (bf16
       registers); issue O += P V_t and wait for it (both warpgroups: its K buffer is free; issuing
       S_tn before it measured slower, the two warpgroups' products interleave in the tensor pipe
       and P V_t finishes late); issue S_tn = Q K_tn^T, dequantize tile tnn into buffer kb and load
       tile tnnn's records while it runs. No wgmma is in flight across the loop's back edge (ptxas
       serializes them otherwise), and no proxy fence follows the record loads. */
    float s[32];
    int tnnn = tnn < t_end ? ak_sdw_next(p, tnn + 1, t_end, len0, len1) : t_end;
    if (t < t_end) {
        ak_sdw_qk<KSTEPS>(s, dq0, dk0);
        ak_sdw_stage<LAYOUT>(p, r, i, len0, len1, tn, tnn, tnnn, t, t_end, tok, q4,
                             smem + M::K + KB * AK_SDW_TILE, valid + AK_SD_KEYS, x, xro, sraw, sok);
        ak_wgmma_wait0();
    }
    while (t < t_end) {
#pragma unroll
        for (int j = 0; j < 32; j++) ak_reg_fence(s[j]);
        /* Online softmax on rows 16 wr + g (hr 0) and + 8 (hr 1); fragment s[4j + 2hr + e] is key
           8j + 2c4 + e. Both warpgroups hold the same S and compute the same m, l and P. */
        const uint8_t *kv = valid + kb * AK_SD_KEYS;
        float mx[2];
#pragma unroll
        for (int hr = 0; hr < 2; hr++) {
            mx[hr] = -INFINITY;
#pragma unroll
            for (int j = 0; j < 8; j++) {
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const float v = kv[8 * j + 2 * c4 + e] ? s[4 * j + 2 * hr + e] * p.scale_log2 : -INFINITY;
                    s[4 * j + 2 * hr + e] = v;
                    mx[hr] = fmaxf(mx[hr], v);
                }
            }
            mx[hr] = fmaxf(mx[hr], __shfl_xor_sync(0xffffffffu, mx[hr], 1));
            mx[hr] = fmaxf(mx[hr], __shfl_xor_sync(0xffffffffu, mx[hr], 2));
        }
        /* Lazy rescaling: while no row of the warp's 16 gains more than 8 (log2 units) over its
           running max, the max stays (P <= 2^8, the same relative rounding in bf16) and the 128
           O accumulators are not rescaled. */
        const bool keep = __all_sync(0xffffffffu, mx[0] <= m_run[0] + 8.0f && mx[1] <= m_run[1] + 8.0f);
        float alpha[2];
#pragma unroll
        for (int hr = 0; hr < 2; hr++) {
            const float m_new = keep ? m_run[hr] : fmaxf(m_run[hr], mx[hr]);
            const float m_use = m_new == -INFINITY ? 0.0f : m_new;
            alpha[hr] = keep ? 1.0f : ak_ex2(m_run[hr] - m_use);
            float sum = 0.0f;
#pragma unroll
            for (int j = 0; j < 8; j++) {
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const float v = ak_ex2(s[4 * j + 2 * hr + e] - m_use);
                    s[4 * j + 2 * hr + e] = v;
                    sum += v;
                }
            }
            sum += __shfl_xor_sync(0xffffffffu, sum, 1);
            sum += __shfl_xor_sync(0xffffffffu, sum, 2);
            l_run[hr] = l_run[hr] * alpha[hr] + sum;
            m_run[hr] = m_new;
        }
        /* P rounded to bf16 as the A fragments of the four k16 steps of P V (the D fragment of
           keys 16kk .. 16kk + 15 is the A fragment of step kk) */
        uint32_t pa[16];
#pragma unroll
        for (int kk = 0; kk < 4; kk++) {
            pa[4 * kk + 0] = ak_sd_pack_bf16(s[8 * kk + 0], s[8 * kk + 1]);
            pa[4 * kk + 1] = ak_sd_pack_bf16(s[8 * kk + 2], s[8 * kk + 3]);
            pa[4 * kk + 2] = ak_sd_pack_bf16(s[8 * kk + 4], s[8 * kk + 5]);
            pa[4 * kk + 3] = ak_sd_pack_bf16(s[8 * kk + 6], s[8 * kk + 7]);
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
        if (BF16) {
            ak_cp_async_wait_all();
            ak_fence_proxy_async(); /* K tile tn (cp.async) -> wgmma reads */
        }
        __syncthreads(); /* every thread's part of K tile tn is written */

        /* O[:, 256 wg ..] += P V; V = K tile dims 256 wg .., MN-major */
#pragma unroll
        for (int j = 0; j < 128; j++) ak_reg_fence(o[j]);
        ak_wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < 4; kk++)
            ak_wgmma_m64n256k16_rs_tb(o, pa + 4 * kk, dv0 + kb * KBUF + (kk * 2048 >> 4));
        ak_wgmma_commit();
        const int t4 = tnnn < t_end ? ak_sdw_next(p, tnnn + 1, t_end, len0, len1) : t_end;
        ak_wgmma_wait0();
        __syncthreads(); /* both warpgroups' P V_t is done: K buffer kb is free */
        if (tn < t_end) ak_sdw_qk<KSTEPS>(s, dq0, dk0 + (kb ^ 1) * KBUF);
        ak_sdw_stage<LAYOUT>(p, r, i, len0, len1, tnn, tnnn, t4, t, t_end, tok, q4,
                             smem + M::K + kb * KB * AK_SDW_TILE, valid + kb * AK_SD_KEYS, x, xro, sraw, sok);
        ak_wgmma_wait0();
#pragma unroll
        for (int j = 0; j < 128; j++) ak_reg_fence(o[j]);
        kb ^= 1;
        t = tn;
        tn = tnn;
        tnn = tnnn;
        tnnn = t4;
    }

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
