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
 * lse (log2 units) to the workspace and ak_sd_combine merges them in split order. Where the
 * shapes give the wgmma kernels one split (large batches): with the caller's AK_BALANCE_MAKE a
 * one-CTA kernel (ak_sd_balance) first cuts the token rows by their lengths into pieces of equal
 * work, longest first, into the workspace, each CTA takes its piece from that schedule and
 * ak_sd_bal_combine merges the split rows (AK_BALANCE_REUSE runs on a schedule made earlier: a
 * step's later layers); without it, where one split's CTAs fill several waves and lengths are
 * given, a one-CTA kernel (ak_sd_lpt_order) orders the rows longest first.
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

/* Issues the cp.async copies of one tile's records: CH 16-byte chunks of key k from pool + off[k]
   to the shared address dst + k * stride, by NT threads. Warp w copies keys w, w + NT/32, ..., lane
   l taking chunks l, l + 32, ...: every copy instruction of a warp reads one record's contiguous
   512 bytes (four lines: fewest L2 requests), a thread reads each key's offset once, and no
   chunk index needs a division (one per chunk cost 17% of the mma.sync kernel's instructions;
   four threads per key, 64 bytes each, measured 5% slower there for the 3x line requests).
   off[k] < 0 (invalid key): zero-filled, never read. */
template <int CH, int NT>
__device__ __forceinline__ void ak_sd_copy_tile(const uint8_t *pool, const int64_t *off, uint32_t dst,
                                                int stride) {
    enum { NW = NT / 32, KPW = AK_SD_KEYS / NW, PASS = (CH + 31) / 32 };
    const int lane = (int)threadIdx.x & 31, w = (int)threadIdx.x >> 5;
#pragma unroll
    for (int kk = 0; kk < KPW; kk++) {
        const int k = w + kk * NW;
        const int64_t o = off[k];
        const uint8_t *src = pool + (o < 0 ? 0 : o) + lane * 16;
        const uint32_t d = dst + (uint32_t)(k * stride + lane * 16), n = o < 0 ? 0u : 16u;
#pragma unroll
        for (int ps = 0; ps < PASS; ps++)
            if (CH % 32 == 0 || lane + 32 * ps < CH) ak_cp_async16(d + 512 * ps, src + 512 * ps, n);
    }
}

/* Scale of fp8 chunk u (dims 16 c .. with c = j + 4 u, j < 4) of a staged record under the
   four-threads-per-key dequantization map: 656's fp32 scale of 128-dim block u / 2
   (after its 512 data bytes), V4's ue8m0 byte u of the key's scale row `v4sc`, else 1 (per-tensor
   keys stay bf16(q): ak_sd_kscale). */
template <int LAYOUT>
__device__ __forceinline__ float ak_sd_chunk_scale(const uint8_t *rec, const uint8_t *v4sc, int u) {
    if (LAYOUT == AK_LAYOUT_DSA_FP8_BLOCKSCALE) return reinterpret_cast<const float *>(rec + 512)[u >> 1];
    if (LAYOUT == AK_LAYOUT_DSV4_FP8_UE8M0) return ak_ue8m0_to_f32(v4sc[u]);
    return 1.0f;
}


#define AK_SD_THREADS 256

/* Staging of the raw records of one tile for the fp8 layouts: bytes per key (the whole record, or
   for 584 the 576-byte row then its 8 scale bytes at +576). MLA_BF16 copies straight into ks. A
   quarter warp of ak_sd_dequant's loads reads chunks j + 4 u (j < 4) of two keys, which fall on
   distinct 16-byte bank groups when the keys are 4 mod 8 groups apart: 576 is, 656 and 592 are
   padded to 704 (at 41 and 37 groups each load took two wavefronts, x222). */
template <int LAYOUT> struct ak_sd_stg { enum { STG = 0 }; };
template <> struct ak_sd_stg<AK_LAYOUT_MLA_FP8_PERTENSOR> { enum { STG = 576 }; };
template <> struct ak_sd_stg<AK_LAYOUT_DSA_FP8_BLOCKSCALE> { enum { STG = 704 }; };
template <> struct ak_sd_stg<AK_LAYOUT_DSV4_FP8_UE8M0> { enum { STG = 704 }; };

/* Byte offset of slot `s`'s record (584: its 576-byte data row) in the pool, or -1 for an invalid
   slot (rule I1). */
template <int LAYOUT>
__device__ __forceinline__ int64_t ak_sd_rec_off(const ak_sd_list &l, int32_t s) {
    if ((uint32_t)s >= l.capacity) return -1;
    const int32_t page = ak_sd_page(l, s), t = s - page * l.page_size;
    return (int64_t)page * l.page_stride + (int64_t)t * (LAYOUT == AK_LAYOUT_MLA_BF16 ? 1152 : ak_sd_geo<LAYOUT>::REC);
}

/* Issues the cp.async copies of one tile: off[64] are record offsets (-1 = invalid: zero-filled,
   never read). MLA_BF16 lands in dst as bf16 rows of KSTR; the fp8 layouts land raw in the stage. */
template <int LAYOUT, int KSTR>
__device__ __forceinline__ void ak_sd_issue(const ak_sd_list &l, const int64_t *off, uint8_t *dst) {
    enum { STG = ak_sd_stg<LAYOUT>::STG,
           CH = LAYOUT == AK_LAYOUT_MLA_BF16 ? 72 : LAYOUT == AK_LAYOUT_DSA_FP8_BLOCKSCALE ? 41 : 36 };
    const uint32_t base = ak_smem_addr(dst);
    ak_sd_copy_tile<CH, AK_SD_THREADS>(l.pool, off, base, LAYOUT == AK_LAYOUT_MLA_BF16 ? KSTR * 2 : STG);
    if (LAYOUT == AK_LAYOUT_DSV4_FP8_UE8M0 && threadIdx.x < AK_SD_KEYS) {
        const int64_t o = off[threadIdx.x];
        const int32_t t = o < 0 ? 0 : (int32_t)((o % l.page_stride) / 576);
        const uint8_t *src = l.pool + (o < 0 ? 0 : o - (int64_t)t * 576 + (int64_t)l.page_size * 576 + t * 8);
        ak_cp_async8(base + threadIdx.x * STG + 576, src, o >= 0 ? 8 : 0);
    }
    ak_cp_async_commit();
}

/* Stage (raw fp8 records) -> ks[64][KSTR] bf16 (layouts.md 4). Zero-filled invalid keys give zero
   rows: zero bytes times any scale, never NaN. Four threads per key, each taking every fourth
   16-byte chunk, so chunk kinds and scale blocks are known at compile time (no division per
   chunk); NB chunk loads are issued before the first conversion. */
template <int LAYOUT, int KSTR>
__device__ __forceinline__ void ak_sd_dequant(const uint8_t *stage, uint16_t *ks) {
    enum { STG = ak_sd_stg<LAYOUT>::STG, TPK = AK_SD_THREADS / AK_SD_KEYS,
           NQ = LAYOUT == AK_LAYOUT_MLA_FP8_PERTENSOR ? 36 : LAYOUT == AK_LAYOUT_DSV4_FP8_UE8M0 ? 28 : 32,
           CH = LAYOUT == AK_LAYOUT_MLA_FP8_PERTENSOR ? 36 : NQ + 8, /* chunks out per key */
           PER = CH / TPK, NB = PER < 5 ? PER : 5,
           ROPE = LAYOUT == AK_LAYOUT_DSA_FP8_BLOCKSCALE ? 528 : 448 /* bf16 rope byte offset */ };
    static_assert(CH % TPK == 0 && NQ % TPK == 0, "chunks split evenly over a key's threads");
    const int tok = (int)threadIdx.x / TPK, j = (int)threadIdx.x % TPK;
    const uint8_t *rec = stage + tok * STG;
    uint16_t *row = ks + tok * KSTR;
#pragma unroll
    for (int u0 = 0; u0 < PER; u0 += NB) {
        uint4 v[NB];
#pragma unroll
        for (int u = u0; u < u0 + NB && u < PER; u++) {
            const int c = j + u * TPK;
            v[u - u0] = *reinterpret_cast<const uint4 *>(rec + (u < NQ / TPK ? c * 16 : ROPE + (c - NQ) * 16));
        }
#pragma unroll
        for (int u = u0; u < u0 + NB && u < PER; u++) {
            const int c = j + u * TPK;
            if (u < NQ / TPK) {
                const float sc = ak_sd_chunk_scale<LAYOUT>(rec, rec + 576 /* V4 scale bytes */, u);
                uint4 lo, hi;
                ak_sd_dequant16(v[u - u0], sc, lo, hi);
                *reinterpret_cast<uint4 *>(row + c * 16) = lo;
                *reinterpret_cast<uint4 *>(row + c * 16 + 8) = hi;
            } else { /* bf16 RoPE chunk: 656 at byte 528, 584 at byte 448 */
                *reinterpret_cast<uint4 *>(row + NQ * 16 + (c - NQ) * 8) = v[u - u0];
            }
        }
    }
}

/* First tile >= t of [t, t_end) with keys below its row's length, or t_end. */
__device__ __forceinline__ int ak_sd_next(int t, int t_end, int nt0, int32_t len0, int32_t len1) {
    if (t < nt0) {
        if (t * AK_SD_KEYS < len0) return t < t_end ? t : t_end;
        t = nt0;
    }
    return t < t_end && (t - nt0) * AK_SD_KEYS < len1 ? t : t_end;
}

/* Slot id of position `pos_in_tile` of tile t for row (r, i), or -1 past the length or the width. */
__device__ __forceinline__ int32_t ak_sd_slot(const ak_sd_params &p, int t, int pos_in_tile, int64_t r,
                                              int64_t i, int32_t len0, int32_t len1) {
    const int ex = t >= p.list[0].tiles;
    const ak_sd_list &l = p.list[ex];
    const int pos = (ex ? t - p.list[0].tiles : t) * AK_SD_KEYS + pos_in_tile;
    if (pos >= (ex ? len1 : len0) || pos >= l.topk) return -1;
    return l.idx[r * l.idx_s0 + i * l.idx_s1 + pos];
}

template <int LAYOUT, int MW>
struct ak_sd_cfg {
    typedef ak_sd_geo<LAYOUT> G;
    enum {
        DQK = G::DQK,
        KSTR = DQK + 8, /* bf16 row stride: 16-byte pad keeps ldmatrix conflict-free */
        SSTR = AK_SD_KEYS + 4,
        STG = ak_sd_stg<LAYOUT>::STG,
        /* MLA_BF16 double-buffers ks itself (the copy of the next tile lands in the other half)
           except at MW 4, where two ks buffers do not fit in 227 KB */
        NKB = LAYOUT == AK_LAYOUT_MLA_BF16 && MW < 4 ? 2 : 1,
        PREF = LAYOUT != AK_LAYOUT_MLA_BF16 || NKB == 2,
        /* fp8 layouts at MW <= 2 keep two stages, so the next tile's copies start before this
           tile's dequantization (at MW 4 a second stage does not fit) */
        NSTG = STG > 0 && MW <= 2 ? 2 : 1,
        EARLY = NKB == 2 || NSTG == 2, /* the next tile's copies are issued right after the wait */
        KS_BYTES = AK_SD_KEYS * KSTR * 2,
        PSTR = AK_SD_KEYS + 8, /* bf16 row stride of the P tile (16-byte pad: ldmatrix conflict-free) */
        SMEM = NKB * KS_BYTES + 16 * MW * KSTR * 2 + 16 * MW * SSTR * 4 + NSTG * AK_SD_KEYS * STG +
               3 * AK_SD_KEYS * 8 + 16 * MW * PSTR * 2 + 2 * 16 * MW * 4
    };
};

/*
 * Per tile k (three barriers): wait for its copies, barrier; issue the copies of tile k + 1 into the
 * other stage (other ks half for MLA_BF16); dequantize this stage into ks, barrier (MLA_BF16 has
 * nothing to convert); issue the slot-id loads of tile k + 2 (kept in a register until PV is done);
 * S = Q K^T, barrier; softmax and O += P V; turn the slot ids of k + 2 into record offsets in the
 * third offset buffer. So the records of the next tile and the slot ids of the one after are in
 * flight during the dequantization and the MMAs. With one stage (MW 4) the copies of k + 1 start
 * after the dequantization; MLA_BF16 at MW 4 (one ks) loads each tile after the previous PV.
 */
template <int LAYOUT, int MW>
__global__ void __launch_bounds__(AK_SD_THREADS, 1) ak_sd_main(const ak_sd_params p) {
    typedef ak_sd_cfg<LAYOUT, MW> C;
    enum {
        DQK = C::DQK, KSTR = C::KSTR, SSTR = C::SSTR,
        GW = 8 / MW,           /* warps per m16 tile */
        NKW = AK_SD_KEYS / GW, /* keys per warp in QK^T */
        DVW = AK_SD_DV / GW,   /* value dims per warp in PV */
        NJ = NKW / 8,          /* n8 key tiles per warp */
        NCH = NJ >= 4 ? 1 : 4 / NJ, /* independent accumulator chains over d_qk */
        QREG = MW == 1,        /* Q fragments live in registers (one CTA per SM leaves room) */
        QB = MW == 4 ? 2 : 4,  /* k16 steps per batch of QK^T fragment loads */
        RPW = 2 * MW,          /* rows whose softmax statistics a warp owns */
        PB = DVW / 16 < 4 ? DVW / 16 : 4 /* x4 fragment loads per batch in PV */
    };
    extern __shared__ __align__(16) uint8_t smem[];
    uint16_t *ks0 = (uint16_t *)smem;                                /* [NKB][64][KSTR] bf16 */
    uint16_t *qs = (uint16_t *)(smem + C::NKB * C::KS_BYTES);        /* [16 MW][KSTR] bf16 */
    float *ss = (float *)(qs + 16 * MW * KSTR);                      /* [16 MW][SSTR] f32 logits */
    uint8_t *stage = (uint8_t *)(ss + 16 * MW * SSTR);               /* [NSTG][64][STG] raw records */
    int64_t *offs = (int64_t *)(stage + C::NSTG * AK_SD_KEYS * C::STG); /* [3][64] record offset or -1 */
    uint16_t *psm = (uint16_t *)(offs + 3 * AK_SD_KEYS);             /* [16 MW][PSTR] bf16 P */
    float *rst = (float *)(psm + 16 * MW * C::PSTR);                 /* [2][16 MW] f32 row alpha; factor, lse */


    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int mt = warp / GW, gw = warp % GW;
    int split, ht;
    uint32_t ri; /* r * s_q + i */
    ak_sd_cta_of(p, split, ht, ri);
    int64_t r, i;
    ak_sd_row_of(p, ri, r, i);
    const int h0 = ht * 16 * MW;
    const int nt0 = p.list[0].tiles;
    int t_begin, t_end;
    ak_sd_split_range(p, split, t_begin, t_end);
    const int pslot = ak_sd_split_slot(p, split, ri);
    ak_sd_prefetch_q<16 * MW, DQK>(p, r, i, h0, tid);

    /* A programmatic dependent launch: the work above reads only parameters and runs while the
       previous kernel finishes (~0.7 us of divisions and parameter loads at the small batches,
       session 24, before the divisions became ak_divu's); inputs and workspace are free to use
       after this. */
    ak_grid_dep_wait();
    /* Slot ids of the first two tiles, loaded speculatively (before the lengths are known) so the
       first record copies wait for one memory round trip, not two. */
    int32_t spec0 = -1, spec1 = -1;
    if (tid < AK_SD_KEYS) {
        if (t_begin < t_end) spec0 = ak_sd_slot(p, t_begin, tid, r, i, INT32_MAX, INT32_MAX);
        if (t_begin + 1 < t_end) spec1 = ak_sd_slot(p, t_begin + 1, tid, r, i, INT32_MAX, INT32_MAX);
    }
    const int32_t len0 = ak_sd_len(p.list[0], r, i), len1 = ak_sd_len(p.list[1], r, i);

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

    /* The active tiles of this split: cur, nxt, nxt2 (t_end = none). */
    int cur = ak_sd_next(t_begin, t_end, nt0, len0, len1);
    int nxt = cur < t_end ? ak_sd_next(cur + 1, t_end, nt0, len0, len1) : t_end;
    if (tid < AK_SD_KEYS) {
        const int pos0 = (cur >= nt0 ? cur - nt0 : cur) * AK_SD_KEYS + tid;
        const int pos1 = (nxt >= nt0 ? nxt - nt0 : nxt) * AK_SD_KEYS + tid;
        int32_t s0 = cur == t_begin ? spec0 : cur < t_end ? ak_sd_slot(p, cur, tid, r, i, len0, len1) : -1;
        int32_t s1 = nxt == t_begin + 1 ? spec1 : nxt < t_end ? ak_sd_slot(p, nxt, tid, r, i, len0, len1) : -1;
        if (cur >= t_end || pos0 >= (cur >= nt0 ? len1 : len0)) s0 = -1;
        if (nxt >= t_end || pos1 >= (nxt >= nt0 ? len1 : len0)) s1 = -1;
        offs[tid] = cur < t_end ? ak_sd_rec_off<LAYOUT>(p.list[cur >= nt0], s0) : -1;
        offs[AK_SD_KEYS + tid] = nxt < t_end ? ak_sd_rec_off<LAYOUT>(p.list[nxt >= nt0], s1) : -1;
    }
    __syncthreads();
    if (C::PREF && cur < t_end) ak_sd_issue<LAYOUT, KSTR>(p.list[cur >= nt0], offs, C::STG ? stage : (uint8_t *)ks0);

    const int g = lane >> 2, c4 = lane & 3;
    uint32_t qf[QREG ? DQK / 16 : 1][4];
    if (QREG) {
        const uint32_t qa = ak_smem_addr(qs + (lane & 15) * KSTR + (lane >> 4) * 8);
#pragma unroll
        for (int kk = 0; kk < (QREG ? DQK / 16 : 0); kk++)
            ak_ldmatrix_x4(qa + kk * 32, qf[kk][0], qf[kk][1], qf[kk][2], qf[kk][3]);
    }

    float o[DVW / 8][4];
#pragma unroll
    for (int j = 0; j < DVW / 8; j++) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
    float m_own[RPW], l_own[RPW]; /* running max and sum of rows warp * RPW .. */
#pragma unroll
    for (int rr = 0; rr < RPW; rr++) m_own[rr] = -INFINITY, l_own[rr] = 0.0f;
    const ak_sd_kscale kq = ak_sd_kscales<LAYOUT>(p);

    for (int k = 0; cur < t_end; k++) {
        const int64_t *off = offs + (k % 3) * AK_SD_KEYS;
        const int nxt2 = nxt < t_end ? ak_sd_next(nxt + 1, t_end, nt0, len0, len1) : t_end;
        uint16_t *ks = ks0 + (C::NKB == 2 ? (k & 1) * AK_SD_KEYS * KSTR : 0);
        if (!C::PREF) {
            __syncthreads(); /* the previous tile's PV is done with ks */
            ak_sd_issue<LAYOUT, KSTR>(p.list[cur >= nt0], off, (uint8_t *)ks);
        }
        ak_cp_async_wait_all();
        __syncthreads();
        uint8_t *stg = stage + (C::NSTG == 2 ? (k & 1) * AK_SD_KEYS * C::STG : 0);
        if (C::EARLY && nxt < t_end) {
            uint8_t *dst = C::STG ? stage + ((k + 1) & 1) * AK_SD_KEYS * C::STG
                                  : (uint8_t *)(ks0 + ((k + 1) & 1) * AK_SD_KEYS * KSTR);
            ak_sd_issue<LAYOUT, KSTR>(p.list[nxt >= nt0], offs + ((k + 1) % 3) * AK_SD_KEYS, dst);
        }
        if (C::STG) {
            ak_sd_dequant<LAYOUT, KSTR>(stg, ks);
            __syncthreads();
        }
        if (C::PREF && !C::EARLY && nxt < t_end)
            ak_sd_issue<LAYOUT, KSTR>(p.list[nxt >= nt0], offs + ((k + 1) % 3) * AK_SD_KEYS, stage);
        int32_t pf = -1;
        if (tid < AK_SD_KEYS && nxt2 < t_end) pf = ak_sd_slot(p, nxt2, tid, r, i, len0, len1);

        /* S[16 rows of m-tile mt][NKW keys of warp gw] = Q K^T */
        {
            float sacc[NCH][NJ][4];
#pragma unroll
            for (int c = 0; c < NCH; c++)
#pragma unroll
                for (int j = 0; j < NJ; j++) sacc[c][j][0] = sacc[c][j][1] = sacc[c][j][2] = sacc[c][j][3] = 0.0f;
            const uint32_t qa = ak_smem_addr(qs + (mt * 16 + (lane & 15)) * KSTR + (lane >> 4) * 8);
            const int key0 = gw * NKW;
            /* one x4 ldmatrix = the B fragments of two k16 steps (lanes 16..31 address dims +16) */
            const uint32_t ka = ak_smem_addr(ks + (key0 + (lane & 7)) * KSTR + (lane >> 3) * 8);
            /* QB steps of fragments are loaded, then their MMAs run, instead of one load-use stall
               per step; ptxas also moves the next batch's loads in among these MMAs (the SASS
               interleaves LDSM and HMMA although both are volatile asm: session 26) */
#pragma unroll
            for (int kk0 = 0; kk0 < DQK / 16; kk0 += QB) {
                uint32_t b[QB / 2][NJ][4], a[QREG ? 1 : QB][4];
#pragma unroll
                for (int u = 0; u < QB / 2; u++)
#pragma unroll
                    for (int j = 0; j < NJ; j++)
                        ak_ldmatrix_x4(ka + (j * 8 * KSTR + (kk0 + 2 * u) * 16) * 2, b[u][j][0], b[u][j][1],
                                       b[u][j][2], b[u][j][3]);
                if (!QREG) {
#pragma unroll
                    for (int u = 0; u < (QREG ? 0 : QB); u++)
                        ak_ldmatrix_x4(qa + (kk0 + u) * 32, a[u][0], a[u][1], a[u][2], a[u][3]);
                }
#pragma unroll
                for (int u = 0; u < QB; u++) {
                    const uint32_t *au = QREG ? qf[QREG ? kk0 + u : 0] : a[QREG ? 0 : u];
#pragma unroll
                    for (int j = 0; j < NJ; j++)
                        ak_mma_bf16_16816(sacc[(kk0 + u) % NCH][j], au, b[u / 2][j][(u & 1) * 2],
                                          b[u / 2][j][(u & 1) * 2 + 1]);
                }
            }
            float *srow = ss + (mt * 16 + g) * SSTR + key0 + c4 * 2;
#pragma unroll
            for (int j = 0; j < NJ; j++) {
                float v[4];
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    v[e] = sacc[0][j][e];
#pragma unroll
                    for (int c = 1; c < NCH; c++) v[e] += sacc[c][j][e];
                }
                *reinterpret_cast<float2 *>(srow + j * 8) = make_float2(v[0], v[1]);
                *reinterpret_cast<float2 *>(srow + 8 * SSTR + j * 8) = make_float2(v[2], v[3]);
            }
        }
        __syncthreads();

        /* Online softmax, once per row: warp w owns rows RPW w .. (a lane takes keys lane and
           lane + 32), writes P rounded to bf16 (as FlashMLA; l sums the unrounded weights, so the
           rounding is a 2^-9 relative error per weight in O, within semantics.md 14.2 for the
           anchor data of targets.md 2) and the row's rescale factor; after a barrier every warp
           loads its P fragments and rescales its O rows. Lazy rescaling: while a row gains no
           more than 8 (log2 units) over its running max, the max stays (P <= 2^8) and alpha = 1.
           Per-tensor fp8: the tile's list scale in S, P times its rel (ak_sd_kscale). */
        const float sl = cur >= nt0 ? kq.sl[1] : kq.sl[0], prel = cur >= nt0 ? kq.rel[1] : kq.rel[0];
#pragma unroll
        for (int rr = 0; rr < RPW; rr++) {
            const int row = warp * RPW + rr;
            const float *srow = ss + row * SSTR;
            const float v0 = off[lane] >= 0 ? srow[lane] * sl : -INFINITY;
            const float v1 = off[lane + 32] >= 0 ? srow[lane + 32] * sl : -INFINITY;
            float mx = fmaxf(v0, v1);
#pragma unroll
            for (int o2 = 16; o2 > 0; o2 >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o2));
            const bool keep = mx <= m_own[rr] + 8.0f;
            const float m_new = keep ? m_own[rr] : fmaxf(m_own[rr], mx);
            const float m_use = m_new == -INFINITY ? 0.0f : m_new;
            const float alpha = keep ? 1.0f : ak_ex2(m_own[rr] - m_use);
            const float p0 = ak_ex2(v0 - m_use), p1 = ak_ex2(v1 - m_use);
            float sum = p0 + p1;
#pragma unroll
            for (int o2 = 16; o2 > 0; o2 >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o2);
            l_own[rr] = l_own[rr] * alpha + sum;
            m_own[rr] = m_new;
            const uint32_t pb = ak_sd_pack_bf16(p0 * prel, p1 * prel);
            psm[row * C::PSTR + lane] = (uint16_t)(pb & 0xffffu);
            psm[row * C::PSTR + lane + 32] = (uint16_t)(pb >> 16);
            if (lane == 0) rst[row] = alpha;
        }
        __syncthreads();
        uint32_t pa[4][4]; /* P as bf16 A fragments of this warp's m-tile */
        {
            const uint32_t pa0 = ak_smem_addr(psm + (mt * 16 + (lane & 15)) * C::PSTR + (lane >> 4) * 8);
#pragma unroll
            for (int kk = 0; kk < 4; kk++) ak_ldmatrix_x4(pa0 + kk * 32, pa[kk][0], pa[kk][1], pa[kk][2], pa[kk][3]);
            const float a0 = rst[mt * 16 + g], a1 = rst[mt * 16 + g + 8];
            if (!__all_sync(0xffffffffu, a0 == 1.0f && a1 == 1.0f)) {
#pragma unroll
                for (int j = 0; j < DVW / 8; j++) {
                    o[j][0] *= a0;
                    o[j][1] *= a0;
                    o[j][2] *= a1;
                    o[j][3] *= a1;
                }
            }
        }
        {
            const int d0 = gw * DVW;
            const uint32_t va = ak_smem_addr(ks + (lane & 15) * KSTR + d0 + (lane >> 4) * 8);
#pragma unroll
            for (int kk = 0; kk < 4; kk++) {
#pragma unroll
                for (int j0 = 0; j0 < DVW / 8; j0 += 2 * PB) { /* PB fragment loads, then their MMAs */
                    uint32_t b[PB][4];
#pragma unroll
                    for (int u = 0; u < PB; u++)
                        ak_ldmatrix_x4_trans(va + (kk * 16 * KSTR + (j0 + 2 * u) * 8) * 2, b[u][0], b[u][1],
                                             b[u][2], b[u][3]);
#pragma unroll
                    for (int u = 0; u < PB; u++) {
                        ak_mma_bf16_16816(o[j0 + 2 * u], pa[kk], b[u][0], b[u][1]);
                        ak_mma_bf16_16816(o[j0 + 2 * u + 1], pa[kk], b[u][2], b[u][3]);
                    }
                }
            }
        }
        if (tid < AK_SD_KEYS)
            offs[((k + 2) % 3) * AK_SD_KEYS + tid] =
                nxt2 < t_end ? ak_sd_rec_off<LAYOUT>(p.list[nxt2 >= nt0], pf) : -1;
        cur = nxt;
        nxt = nxt2;
    }

    ak_grid_dep_launch(); /* the next kernel may start its CTAs during this epilogue */
    /* Write this split's rows: final out/lse with one split, else normalized partials. Each warp
       makes its own rows' factor and lse (ak_sd_row_scale, lane rr taking row RPW warp + rr; the
       statistics are the same in every lane) before the first barrier, so that the division and
       the logarithm stay off the fragment threads' path, and hands them over through shared memory
       (rst is free after that barrier: the last read of the alphas precedes it in every warp); so
       do the warps' largest |O| for the partial rows' fp16 scale (ak_sd_part_scale, in the S tile,
       free after the first barrier), whose hand-off rides on the second barrier. */
    float own_f = 0.0f, own_lse = 0.0f;
    {
        float m = m_own[0], l = l_own[0];
#pragma unroll
        for (int rr = 1; rr < RPW; rr++)
            if (lane == rr) m = m_own[rr], l = l_own[rr];
        if (lane < RPW)
            own_f = ak_sd_row_scale(p.splits > 1, m, l, ak_sd_sink(p, p.splits > 1, h0 + warp * RPW + lane), kq.ref,
                                    own_lse);
    }
    float am = 0.0f;
    if (p.splits > 1)
#pragma unroll
        for (int hr = 0; hr < 2; hr++)
            if (h0 + mt * 16 + g + hr * 8 < p.h_q)
                am = ak_sd_amax_add(am, ak_sd_frag_amax<DVW / 8>(&o[0][0], hr));
    __syncthreads();
    if (lane < RPW) rst[warp * RPW + lane] = own_f, rst[16 * MW + warp * RPW + lane] = own_lse;
    uint32_t *amax = reinterpret_cast<uint32_t *>(ss);
    if (p.splits > 1) ak_sd_part_put(am, amax, AK_SD_THREADS / 32);
    __syncthreads();
    float sc = 1.0f, inv = 1.0f;
    if (p.splits > 1) sc = ak_sd_part_get(amax, AK_SD_THREADS / 32, inv);
    const int d0 = gw * DVW;
#pragma unroll
    for (int hr = 0; hr < 2; hr++) {
        const int hl = mt * 16 + g + hr * 8;
        const float f = rst[hl], lse = rst[16 * MW + hl];
        if (p.splits == 1)
            ak_sd_write_out_row<DVW / 8>(p, &o[0][0], hr, r, i, h0 + hl, f, lse, d0, c4, gw == 0 && c4 == 0);
        else
            ak_sd_write_part_row<DVW / 8>(p, &o[0][0], hr, r, i, h0 + hl, pslot, f, lse, sc, inv, d0, c4,
                                          gw == 0 && c4 == 0);
    }
}

/* Merges the splits of one (r, i, h) row: 512 / DPT threads x DPT dims. Every warp makes the
   split weights itself, lane j from the (lse, factor) pairs of splits j, j + 32, .. (a max by one
   redux, a sum by a fixed shuffle tree), so no shared memory and no barrier sits between the lse
   values' arrival and the sums: the CTA's warps repeat ~30 instructions instead of waiting on three
   barriers and their shared-memory round trips (x192). That chain is the small calls' critical
   path after the grid boundary (session 44's trace: V4 b 1's rows and pairs in ~0.3 us after the
   wait, its end 1.4 us after it), so it is kept short: 2^x and log2 are the SFU's (ak_ex2: a split
   more than 126 log2 units below the largest weighs 0, not a subnormal; otherwise the same bits as
   exp2f), the row addresses are stepped, not multiplied (x211). Each weight carries its split's factor (the
   partial rows are scaled fp16, ak_sd_part_scale); a thread sums its dims over the splits in split
   order, taking weight s from lane s % 32, so the result is the same bits on every run. At the
   batches that split there are few rows per SM and the kernel is latency-bound, so the first CH
   partial rows are loaded right behind the split lse values, before the weights exist (one L2
   round trip for up to CH splits); further chunks are loaded after the previous one is summed, so
   the registers stay those of one chunk. With 2 dims and at most 16 splits (BULK) the rows come
   instead by the bulk copy engine into shared memory, 1 KB a copy (V4's 128-row and b 1 calls
   -1..2.5%, x252); at 32 splits the copies' issue, serial within a warp, cost more than that
   (+1..3%). A thread's work is a chain of dependent instructions per
   split (a weight, a conversion from fp16, a multiply-add per dim): with at most one row per SM the
   call waits for that chain, so 2 dims per thread over 256 threads (b 1 h_q 16 9.6 -> 9.3 us, b 1
   h_q 128 13.9 -> 13.3); with more rows the CTAs' fixed work dominates and 4 dims over 128 threads
   is faster (b 8 h_q 128, 1024 rows: 24.5 against 26.1; session 25). The launch bounds keep, for 4
   dims, CH 8 at 64 registers (8 CTAs per SM: b 8 h_q 128's 1024 rows in one wave; 72 put them in
   two, x147) and CH 16 at 96 (5 CTAs per SM); for 2 dims CH 32 takes 80. The workspace holds every
   split, so the loads stay in bounds even for an empty split, whose weight is 0 and whose
   (unwritten) row is never used. */
template <int CH, int DPT>
__device__ __forceinline__ void ak_sd_combine_load(uint32_t (*v)[DPT / 2], const __half *src, int s0, int splits,
                                                   int64_t step) {
    const __half *q = src + s0 * step; /* stepped by one 64-bit add per split, not a multiply each */
#pragma unroll
    for (int k = 0; k < CH; k++, q += step) {
        if (s0 + k >= splits) continue;
        if (DPT == 4) {
            const uint2 x = *reinterpret_cast<const uint2 *>(q);
            v[k][0] = x.x, v[k][DPT / 2 - 1] = x.y;
        } else {
            v[k][0] = *reinterpret_cast<const uint32_t *>(q);
        }
    }
}

/* Adds splits s0 .. s0 + CH - 1 (CH divides 32): weight s0 + k is lane (s0 + k) % 32's w. The
   weights of eight splits are shuffled before their sums, and an empty split's row (never written:
   weight 0) is selected out, not branched around: a branch on each shuffled weight kept the next
   shuffle behind it, a chain of ~60-85 cycles per split (session 43's trace: b 1 h_q 16's 32
   splits took 0.93 us after their weights). acc is never -0, so adding the 0 leaves it unchanged. */
template <int CH, int DPT>
__device__ __forceinline__ void ak_sd_combine_add(float *acc, const uint32_t (*v)[DPT / 2], float w, int s0,
                                                  int splits) {
    enum { G = CH < 8 ? CH : 8 };
#pragma unroll
    for (int k0 = 0; k0 < CH; k0 += G) {
        float wk[G];
#pragma unroll
        for (int k = 0; k < G; k++) wk[k] = __shfl_sync(0xffffffffu, w, (s0 + k0 + k) & 31);
#pragma unroll
        for (int k = 0; k < G; k++) {
            if (s0 + k0 + k >= splits) break;
            const bool used = wk[k] != 0.0f;
#pragma unroll
            for (int e = 0; e < DPT / 2; e++) {
                const float2 a = __half22float2(*reinterpret_cast<const __half2 *>(&v[k0 + k][e]));
                acc[2 * e] += wk[k] * (used ? a.x : 0.0f);
                acc[2 * e + 1] += wk[k] * (used ? a.y : 0.0f);
            }
        }
    }
}

/* Weight of a split (lse, factor) pair, lse2 the merged lse (log2 units). */
__device__ __forceinline__ float ak_sd_combine_weight(float2 li, float lse2) {
    return li.x == -INFINITY || lse2 == -INFINITY ? 0.0f : ak_ex2(li.x - lse2) * li.y;
}

/* CTAs per SM that ak_sd_combine<CH, DPT>'s launch bounds leave registers for. */
static constexpr int ak_sd_combine_occ(int ch, int dpt) { return dpt == 4 ? (ch == 8 ? 8 : 5) : (ch == 8 ? 4 : 3); }

/* ak_sd_combine<CH, DPT> takes its rows by bulk copy (BULK) at 2 dims and at most 16 splits. Its
   dynamic shared memory then holds [CH splits][1 KB] the partial rows, at ak_sd_cmb_bar the
   mbarrier of their copies (16 B), at ak_sd_cmb_wts [8 warps][CH] f32 the split weights. */
static __host__ __device__ constexpr bool ak_sd_combine_bulk(int ch, int dpt) { return dpt == 2 && ch <= 16; }
static __host__ __device__ constexpr int ak_sd_cmb_bar(int ch) { return ch * AK_SD_DV * 2; }
static __host__ __device__ constexpr int ak_sd_cmb_wts(int ch) { return ak_sd_cmb_bar(ch) + 16; }
static constexpr size_t ak_sd_combine_smem(int ch, int dpt) {
    return ak_sd_combine_bulk(ch, dpt) ? (size_t)ak_sd_cmb_wts(ch) + 8 * (size_t)ch * 4 : 0;
}

template <int CH, int DPT>
__global__ void __launch_bounds__(512 / DPT, ak_sd_combine_occ(CH, DPT)) ak_sd_combine(const ak_sd_params p) {
    enum { BULK = ak_sd_combine_bulk(CH, DPT) }; /* the layout at ak_sd_combine_bulk */
    extern __shared__ __align__(16) uint8_t ak_sd_cmb_smem[];
    const int64_t row = blockIdx.x;
    const int64_t rows = (int64_t)p.b * p.s_q * p.h_q;
    const int h = (int)(row % p.h_q);
    const int64_t ri = row / p.h_q, r = ri / p.s_q, i = ri % p.s_q;
    const int tid = threadIdx.x, lane = tid & 31;
    const int d = tid * DPT, splits = p.splits;
    const __half *src = p.oacc + row * AK_SD_DV + d;
    const int64_t step = rows * AK_SD_DV;
    const float2 *lacc = p.lacc + row; /* split s at lacc[s rows] */
    const uint32_t rows_s = ak_smem_addr(ak_sd_cmb_smem), bar = rows_s + ak_sd_cmb_bar(CH);
    if (BULK) {
        if (tid == 0) ak_mbar_init(bar, 1);
        __syncthreads();
    }
    uint32_t v[CH][DPT / 2];
    const int nb = splits < CH ? splits : CH;
    /* With at most one row per SM the call waits for this CTA's loads: the rows (1 KB each, splits
       <= CH) come by the bulk copy engine, split s issued by lane s of warp s % 8, the lane that
       loads its pair, with the expected bytes set before the wait (V4's 128-row and b 1 calls
       -0.6..1.3%, 656 -0.5..1% against lane s / 8: x256). */
    if (BULK && tid == 0) ak_mbar_arrive_tx(bar, (uint32_t)nb * (AK_SD_DV * 2));
    const bool issuer = BULK && lane < nb && (lane & 7) == (tid >> 5);
    ak_grid_dep_wait(); /* the main kernel's partial rows (the index math above overlaps its end) */
    ak_grid_dep_launch();
    /* each lane's first (lse, factor) pair is loaded ahead of the partial rows, so the weights are
       made while the rows arrive (b 1 h_q 128: the max known 1.4 us after the wait, not 1.9); the
       sink beside them, not after the merge */
    const float2 li = lane < splits ? lacc[lane * rows] : make_float2(-INFINITY, 0.0f);
    if (issuer)
        ak_bulk_g2s_hint(rows_s + (uint32_t)lane * (AK_SD_DV * 2), p.oacc + row * AK_SD_DV + lane * step, AK_SD_DV * 2,
                         bar, ak_l2_policy(true));
    const float sink = ak_sd_sink(p, false, h);
    if (!BULK) ak_sd_combine_load<CH, DPT>(v, src, 0, splits, step);
    float mx = li.x;
    for (int s = lane + 32; s < splits; s += 32) mx = fmaxf(mx, lacc[s * rows].x);
    mx = ak_warp_max(mx);
    float sum = 0.0f;
    if (mx != -INFINITY) {
        sum = ak_ex2(li.x - mx);
        for (int s = lane + 32; s < splits; s += 32) sum += ak_ex2(lacc[s * rows].x - mx);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    const float lse2 = mx != -INFINITY ? mx + ak_lg2(sum) : -INFINITY; /* sum >= 1: the max's term */
    float w = ak_sd_combine_weight(li, lse2); /* split lane's, then lane + 32's from s0 = 32 on */
    float wk[BULK ? CH : 1];
    if (BULK) {
        /* every split's weight to every lane through this warp's slot of shared memory: one store
           and CH / 4 broadcast loads instead of CH shuffles, whose throughput bound the merge of
           two CTAs per SM (~850 -> ~560 cycles; b 8 h_q 16, b 1 h_q 128 -1.8..2.3%, x253) */
        float *ws = reinterpret_cast<float *>(ak_sd_cmb_smem + ak_sd_cmb_wts(CH)) + (tid >> 5) * CH;
        if (lane < CH) ws[lane] = w;
        __syncwarp();
#pragma unroll
        for (int q = 0; q < CH / 4; q++) {
            const float4 x = reinterpret_cast<const float4 *>(ws)[q];
            wk[4 * q] = x.x, wk[4 * q + 1] = x.y, wk[4 * q + 2] = x.z, wk[4 * q + 3] = x.w;
        }
        ak_mbar_wait(bar, 0); /* every path: no copy may still be writing when the CTA exits */
#pragma unroll
        for (int k = 0; k < CH; k++)
            if (k < nb)
                v[k][0] = *reinterpret_cast<const uint32_t *>(ak_sd_cmb_smem + k * (AK_SD_DV * 2) + 4 * tid);
    }
    float acc[DPT];
#pragma unroll
    for (int e = 0; e < DPT; e++) acc[e] = 0.0f;
    float lse_e = INFINITY, f = 1.0f;
    if (mx != -INFINITY) {
        if (BULK) {
            /* one chunk (splits <= CH), in split order as ak_sd_combine_add: the same bits */
#pragma unroll
            for (int k = 0; k < CH; k++) {
                if (k >= splits) break;
                const bool used = wk[k] != 0.0f;
                const float2 a = __half22float2(*reinterpret_cast<const __half2 *>(&v[k][0]));
                acc[0] += wk[k] * (used ? a.x : 0.0f);
                acc[1] += wk[k] * (used ? a.y : 0.0f);
            }
        } else {
            for (int s0 = 0; s0 < splits; s0 += CH) {
                if (s0 > 0) {
                    ak_sd_combine_load<CH, DPT>(v, src, s0, splits, step);
                    if ((s0 & 31) == 0)
                        w = ak_sd_combine_weight(s0 + lane < splits ? lacc[(s0 + lane) * rows]
                                                                    : make_float2(-INFINITY, 0.0f), lse2);
                }
                ak_sd_combine_add<CH, DPT>(acc, v, w, s0, splits);
            }
        }
        lse_e = lse2 * 0.69314718055994531f;
        if (sink != -INFINITY) f = 1.0f / (1.0f + expf(sink - lse_e));
    }
    if (p.lse != NULL && tid == 0) p.lse[r * p.l_s0 + i * p.l_s1 + h * p.l_s2] = lse_e;
    const int64_t ob = r * p.o_s0 + i * p.o_s1 + h * p.o_s2 + d;
#pragma unroll
    for (int e = 0; e < DPT / 2; e++) {
        if (p.out_f32)
            *reinterpret_cast<float2 *>((float *)p.out + ob + 2 * e) =
                make_float2(acc[2 * e] * f, acc[2 * e + 1] * f);
        else
            *reinterpret_cast<uint32_t *>((uint16_t *)p.out + ob + 2 * e) =
                ak_sd_pack_bf16(acc[2 * e] * f, acc[2 * e + 1] * f);
    }
}

/* The combine of a balanced call: only the rows ak_sd_balance split (its list, in bal_rows[n] ..,
   and their count), each row's pieces in consecutive slots from the first its table names. One
   warp per (row, head) item, eight a CTA, the items taken in turn: lane j holds piece j's (lse,
   factor) and weight (at most AK_SD_BAL_SPLITS = 32 pieces), each lane 16 dims of the row, the
   pieces summed in order (the same bits every run). A CTA per item, as ak_sd_combine merges the
   splits of small calls, made each item a chain of barriers and L2 round trips (x186: ~25 us at
   random lengths, b 128 h_q 64). Entries are checked as ak_sd_bal_piece checks a piece: one
   outside the call or the workspace is skipped (warp-uniform). */
__global__ void __launch_bounds__(256) ak_sd_bal_combine(const ak_sd_params p) {
    ak_grid_dep_wait(); /* the partial rows, and (the main kernel waited for it) ak_sd_balance's tables */
    ak_grid_dep_launch();
    const int lane = (int)threadIdx.x & 31;
    const int64_t n = (int64_t)p.b * p.s_q;
    const int32_t *list = reinterpret_cast<const int32_t *>(p.bal_rows + n); /* [n] split rows, then their count */
    const int32_t count = list[n];
    const int64_t items = (count < 0 ? 0 : count > n ? n : count) * (int64_t)p.h_q;
    for (int64_t it = (int64_t)blockIdx.x * 8 + (threadIdx.x >> 5); it < items; it += (int64_t)gridDim.x * 8) {
        const int32_t ri = list[it / p.h_q];
        const int h = (int)(it % p.h_q);
        if (ri < 0 || ri >= n) continue;
        const int2 t = p.bal_rows[ri];
        const int np = t.y;
        if (t.x < 0 || np < 2 || np > AK_SD_BAL_SPLITS || t.x > p.bal_slots - np) continue;
        const int64_t first = (int64_t)t.x * p.h_q + h, step = (int64_t)p.h_q * AK_SD_DV; /* piece j: row first + j h_q */
        const float2 li = lane < np ? p.lacc[first + (int64_t)lane * p.h_q] : make_float2(-INFINITY, 0.0f);
        const float sink = ak_sd_sink(p, false, h); /* beside the pairs, not after the merge */
        const __half *src = p.oacc + first * AK_SD_DV + 16 * lane;
        uint4 v[8][2]; /* 16 dims of pieces j0 .. j0 + 7, loaded while the weights are made */
#pragma unroll
        for (int k = 0; k < 8; k++)
            if (k < np) {
                v[k][0] = *reinterpret_cast<const uint4 *>(src + k * step);
                v[k][1] = *reinterpret_cast<const uint4 *>(src + k * step + 8);
            }
        const float mx = ak_warp_max(li.x);
        float e = mx != -INFINITY && li.x != -INFINITY ? ak_ex2(li.x - mx) : 0.0f, sum = e;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
        const float lse2 = mx != -INFINITY ? mx + ak_lg2(sum) : -INFINITY;
        const float w = ak_sd_combine_weight(li, lse2);
        float acc[16];
#pragma unroll
        for (int d = 0; d < 16; d++) acc[d] = 0.0f;
        for (int j0 = 0; j0 < np; j0 += 8) {
            if (j0 > 0) {
#pragma unroll
                for (int k = 0; k < 8; k++)
                    if (j0 + k < np) {
                        v[k][0] = *reinterpret_cast<const uint4 *>(src + (j0 + k) * step);
                        v[k][1] = *reinterpret_cast<const uint4 *>(src + (j0 + k) * step + 8);
                    }
            }
            float wk[8]; /* shuffled before the sums, an empty piece selected out (as ak_sd_combine_add) */
#pragma unroll
            for (int k = 0; k < 8; k++) wk[k] = __shfl_sync(0xffffffffu, w, (j0 + k) & 31);
#pragma unroll
            for (int k = 0; k < 8; k++) {
                if (j0 + k >= np) break;
                const bool used = wk[k] != 0.0f; /* an empty piece's row was never written */
                const uint32_t x[8] = {v[k][0].x, v[k][0].y, v[k][0].z, v[k][0].w,
                                       v[k][1].x, v[k][1].y, v[k][1].z, v[k][1].w};
#pragma unroll
                for (int q = 0; q < 8; q++) {
                    const float2 a = __half22float2(*reinterpret_cast<const __half2 *>(&x[q]));
                    acc[2 * q] += wk[k] * (used ? a.x : 0.0f);
                    acc[2 * q + 1] += wk[k] * (used ? a.y : 0.0f);
                }
            }
        }
        const int64_t r = ri / p.s_q, i = ri % p.s_q;
        float lse_e = INFINITY, f = 0.0f;
        if (mx != -INFINITY) {
            lse_e = lse2 * 0.69314718055994531f;
            f = sink != -INFINITY ? 1.0f / (1.0f + expf(sink - lse_e)) : 1.0f;
        }
        if (p.lse != NULL && lane == 0) p.lse[r * p.l_s0 + i * p.l_s1 + h * p.l_s2] = lse_e;
        const int64_t ob = r * p.o_s0 + i * p.o_s1 + h * p.o_s2 + 16 * lane;
#pragma unroll
        for (int q = 0; q < 8; q++) { /* element pairs: out is only pair-aligned (ak_cuda_mla_decode) */
            if (p.out_f32)
                *reinterpret_cast<float2 *>((float *)p.out + ob + 2 * q) = make_float2(acc[2 * q] * f, acc[2 * q + 1] * f);
            else
                *reinterpret_cast<uint32_t *>((uint16_t *)p.out + ob + 2 * q) = ak_sd_pack_bf16(acc[2 * q] * f, acc[2 * q + 1] * f);
        }
    }
}

/* ---- host side ----------------------------------------------------------------------------- */

template <int LAYOUT>
static size_t ak_sd_smem_l(int mw) {
    return mw == 1 ? (size_t)ak_sd_cfg<LAYOUT, 1>::SMEM
                   : mw == 2 ? (size_t)ak_sd_cfg<LAYOUT, 2>::SMEM : (size_t)ak_sd_cfg<LAYOUT, 4>::SMEM;
}

static size_t ak_sd_smem(ak_layout layout, int mw) {
    switch (layout) {
    case AK_LAYOUT_MLA_BF16: return ak_sd_smem_l<AK_LAYOUT_MLA_BF16>(mw);
    case AK_LAYOUT_MLA_FP8_PERTENSOR: return ak_sd_smem_l<AK_LAYOUT_MLA_FP8_PERTENSOR>(mw);
    case AK_LAYOUT_DSV4_FP8_UE8M0: return ak_sd_smem_l<AK_LAYOUT_DSV4_FP8_UE8M0>(mw);
    default: return ak_sd_smem_l<AK_LAYOUT_DSA_FP8_BLOCKSCALE>(mw);
    }
}

/*
 * Shapes and SM count only: never lengths or indices (workspace size and graph stability).
 * Chooses the head tile (MW = 1, 2, 4 m16 tiles, at most what h_q needs) and the split count that
 * minimise a critical-path estimate in units of one 16-row tile step (about 0.6 us on H200):
 * waves x (3 for the Q / slot-id / first-record latency + tiles per CTA x (1 + MW)), plus, with
 * splits, 1 for the combine launch and 1 per 2 MB of fp16 partial rows written and read back (the
 * weight calibrated as 1 per 4 MB of f32 rows; at 1 per 4 MB of fp16 rows b 1 h_q 128 moved to
 * 32-head tiles x 32 splits and took 16.8 us against 14.8, session 25). Large
 * batches keep one split and the widest tile (b 128, h_q 16: 128 CTAs of 32 tiles); small ones
 * trade narrower tiles and more splits for filled SMs (b 1, h_q 128: 128 CTAs of 16 heads x 2
 * tiles). Ties go to the wider tile and the fewer splits.
 */
static void ak_sd_plan_make(const ak_context *ctx, const ak_mla_decode_args *a, ak_sd_plan *pl) {
    pl->lpt = 0;
    pl->bal = 0;
    pl->bal_pieces = 0;
    if (ak_sdw_plan(ctx, a, pl)) {
        const int64_t sms = ctx->cuda != NULL ? ctx->cuda->prop.multiProcessorCount : 132;
        const int64_t n = a->q->shape[0] * a->q->shape[1];
        const int lens = a->topk_length != NULL || (a->extra_indices != NULL && a->extra_topk_length != NULL);
        /* Balanced by the lengths where the caller asks for it (a->balance) and the shapes give
           one split (a large batch): the schedule ak_sd_balance makes is kept in the workspace
           behind the pieces' partial rows, so later calls of the step (AK_BALANCE_REUSE) run on it
           without making it again. The launch has a CTA per possible piece (the grid is fixed by
           shapes): three waves, or one per token row, where the rows fill several waves; a wave
           and a half where they fill one, since there the CTAs past the last piece start one
           after another on the few SMs the rows leave free (three waves of them cost b 128 h_q
           16 ~5% with every row whole, session 34). */
        if (a->balance != AK_BALANCE_NONE && pl->splits == 1 && n <= AK_SD_BAL_MAX && pl->n_tiles > 0 &&
            pl->n_tiles < 4096) {
            const int64_t wave = (sms + pl->htiles - 1) / pl->htiles, cap = n * pl->htiles > sms ? 3 * wave : 3 * wave / 2;
            pl->bal = 1;
            pl->bal_pieces = (int)(n > cap ? n : cap);
            pl->ws_bytes = ak_sd_bal_ws_bytes(pl->bal_pieces, n, a->q->shape[2]);
            return;
        }
        /* Otherwise rows longest first (ak_sd_lpt_order) where one split's CTAs (one per SM) fill
           several waves and the rows' lengths can differ. The order's workspace (up to
           AK_SD_LPT_MAX rows) is counted from shapes alone: a size asked without the length
           tensors, or for more rows (the planner's), still covers a call with them. */
        const int waves = pl->splits == 1 && n * pl->htiles > sms;
        pl->lpt = waves && lens && n <= AK_SD_LPT_MAX;
        if (waves) pl->ws_bytes = ak_sd_ws_bytes(pl->splits, pl->rows) + (size_t)(n < AK_SD_LPT_MAX ? n : AK_SD_LPT_MAX) * 4;
        return;
    }
    pl->kernel = 0;
    const int64_t b = a->q->shape[0], s_q = a->q->shape[1], h_q = a->q->shape[2];
    const int64_t topk = a->indices->shape[2];
    const int64_t etopk = a->extra_indices != NULL ? a->extra_indices->shape[2] : 0;
    const int mw_max = h_q <= 16 ? 1 : (h_q <= 32 ? 2 : 4);
    pl->n_tiles = (int)((topk + AK_SD_KEYS - 1) / AK_SD_KEYS + (etopk + AK_SD_KEYS - 1) / AK_SD_KEYS);
    pl->rows = b * s_q * h_q;
    const int sms = ctx->cuda != NULL ? ctx->cuda->prop.multiProcessorCount : 132;
    const int64_t max_sp = pl->n_tiles < 256 ? (pl->n_tiles > 0 ? pl->n_tiles : 1) : 256;
    double best = 0.0;
    pl->mw = 0;
    for (int mw = mw_max; mw >= 1; mw /= 2) {
        /* one CTA per SM: every configuration needs over half of the 227 KB of shared memory */
        const size_t smem = ak_sd_smem(a->cache->layout, mw);
        const int64_t slots = sms;
        const int64_t htiles = (h_q + 16 * mw - 1) / (16 * mw), base = b * s_q * htiles;
        for (int64_t sp = 1; sp <= max_sp; sp++) {
            const int64_t waves = (base * sp + slots - 1) / slots, per = (pl->n_tiles + sp - 1) / sp;
            double cost = (double)waves * (3.0 + (double)per * (1 + mw));
            if (sp > 1) cost += 1.0 + (double)sp * (double)pl->rows * AK_SD_DV * 4.0 / (2.0 * 1024 * 1024);
            if (pl->mw == 0 || cost < best) {
                best = cost;
                pl->mw = mw;
                pl->htiles = (int)htiles;
                pl->splits = (int)sp;
                pl->smem = smem;
            }
        }
    }
    pl->ws_bytes = ak_sd_ws_bytes(pl->splits, pl->rows);
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

/* Sorts key[0 .. m - 1] ascending in shared memory (m a power of two), a bitonic network over the
   CTA's threads; every thread calls it, and it ends on a barrier. */
__device__ void ak_sd_bitonic_sort(uint32_t *key, int m) {
    for (int size = 2; size <= m; size <<= 1)
        for (int stride = size >> 1; stride > 0; stride >>= 1) {
            for (int t = (int)threadIdx.x; t < m / 2; t += (int)blockDim.x) {
                const int lo = 2 * t - (t & (stride - 1)), hi = lo + stride;
                const uint32_t x = key[lo], y = key[hi];
                if ((x > y) == ((lo & size) == 0)) key[lo] = y, key[hi] = x;
            }
            __syncthreads();
        }
}

/* The token rows of a p.lpt call, longest first (tiles inside the lengths, descending; then the
   row index), into rows[0 .. b s_q - 1] for the main kernel's CTAs (ak_sd_lpt_take). The hardware
   starts CTAs in blockIdx order, so the longest rows run in the first wave and the short ones fill
   the SMs as they free up (longest-processing-time-first); in row order a ragged batch lasted as
   long as each wave's longest row. Each row is still one CTA's, so the results are the same bits in
   any order. One CTA: keys (n_tiles - tiles) << 12 | row sorted by a bitonic network in shared
   memory unless already in order (~11 us for the kernel alone, cold, at 256 rows). Computed here
   rather than in every main CTA: the same work in the main kernels' prologue made them 15-18%
   slower (inlined) or ~40% (a called function, whose call spilled registers), far more than its
   own time (session 31). */
__global__ void __launch_bounds__(1024) ak_sd_lpt_order(const ak_sd_params p, int32_t *rows /* [b s_q] */) {
    __shared__ uint32_t key[AK_SD_LPT_MAX]; /* [m] sort keys, m = b s_q rounded up to a power of two */
    const int n = p.b * p.s_q, nt = p.list[0].tiles + p.list[1].tiles;
    int m = 1;
    while (m < n) m <<= 1;
    ak_grid_dep_wait(); /* the lengths may come from the previous kernel */
    ak_grid_dep_launch();
    for (int k = (int)threadIdx.x; k < m; k += (int)blockDim.x)
        key[k] = k < n ? (uint32_t)(nt - ak_sd_row_tiles(p, k)) << 12 | (uint32_t)k : 0xffffffffu;
    __syncthreads();
    /* rows already in that order (equal lengths, as at contexts past top-k, or falling ones): the
       sort's barriers are skipped */
    int sorted = 1;
    for (int k = (int)threadIdx.x; k + 1 < n; k += (int)blockDim.x) sorted &= key[k] < key[k + 1];
    if (__syncthreads_and(sorted)) {
        for (int k = (int)threadIdx.x; k < n; k += (int)blockDim.x) rows[k] = k;
        return;
    }
    ak_sd_bitonic_sort(key, m);
    for (int k = (int)threadIdx.x; k < n; k += (int)blockDim.x) rows[k] = (int32_t)(key[k] & 0xfffu);
}

/* Exclusive prefix sum of a[0 .. n - 1] in place (n <= 4 x 1024, 1024 threads, four consecutive
   elements per thread); returns the total. wsum: 33 words of shared memory. */
__device__ int ak_sd_bal_scan(int *a, int n, int *wsum) {
    const int t = (int)threadIdx.x, lane = t & 31, w = t >> 5;
    int v[4], s = 0;
#pragma unroll
    for (int k = 0; k < 4; k++) v[k] = 4 * t + k < n ? a[4 * t + k] : 0, s += v[k];
    int x = s;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const int y = __shfl_up_sync(0xffffffffu, x, o);
        if (lane >= o) x += y;
    }
    if (lane == 31) wsum[w] = x;
    __syncthreads();
    if (w == 0) {
        const int y = wsum[lane];
        int z = y;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const int q = __shfl_up_sync(0xffffffffu, z, o);
            if (lane >= o) z += q;
        }
        wsum[lane] = z - y;
        if (lane == 31) wsum[32] = z;
    }
    __syncthreads();
    int base = wsum[w] + x - s;
#pragma unroll
    for (int k = 0; k < 4; k++)
        if (4 * t + k < n) a[4 * t + k] = base, base += v[k];
    const int total = wsum[32];
    __syncthreads();
    return total;
}

/* A balanced call's cost model, in units of one 64-key tile of a CTA: a piece's fixed work (Q, the
   pipeline's fill, its rows out: a wave costs ~2.3 tiles at h_q 64, session 20) and a split piece's
   partial rows and their combine. */
#define AK_SD_BAL_FIXED 2.5f
#define AK_SD_BAL_PART 0.5f

/* The work of a balanced call (p.bal), from the lengths, on the device (no host sync; the same in
   graph replay). Each token row of v tiles inside its lengths is cut into nr = ceil(v / C) pieces
   of equal tile counts, one CTA per piece and head tile; rows of one piece write their output
   rows, the pieces of split rows write partial rows that ak_sd_bal_combine merges in piece order, so
   results are a function of the lengths alone (bitwise the same from run to run). C is chosen
   among ceil(vmax / k), k = 1 .. 32 (one warp each), by an estimate of the call's length: one wave
   of pieces lasts its longest piece; more waves last the work over the SMs plus half a mean
   piece (the longest-first schedule's tail; within 2% of the best C in a simulation of ragged
   batches). A split C must beat whole rows by 10%, and pieces stay within `pieces` (three waves
   or one per row, the workspace's count). The pieces are then ordered longest first (the
   hardware starts CTAs in blockIdx order: short pieces fill the SMs long ones leave) by a bitonic
   sort of (nt - piece tiles) << 12 | row in shared memory, and written as (row, t0, t1, slot):
   tiles [t0, t1) of the concatenated main + extra list (tiles past a row's lengths are skipped by
   the main kernels as in any split), slot the partial slot or -1. A row's first piece starts at
   tile 0 and its last ends at the list's end, so the pieces cover every tile whatever the lengths:
   a schedule reused with other lengths (AK_BALANCE_REUSE) is balanced worse, never wrong, as the
   kernels read each row's lengths themselves. Entries past the last piece get row -1 (those CTAs
   exit). rows_out[row] = (first slot, nr), and the list of rows of several pieces, for the
   combine. One CTA of 1024 threads; shared memory (m + 3 n) words, m = n rounded up to a power of
   two. In every main CTA's prologue such work cost 15-18% (session 31), so it is a
   kernel of its own. */
__global__ void __launch_bounds__(1024) ak_sd_balance(const ak_sd_params p, int4 *work /* [pieces] */,
                                                      int2 *rows_out /* [b s_q] */, int pieces, int sms) {
    extern __shared__ uint32_t bsm[];
    __shared__ int wsum[33], s_vmax, s_tot, s_k, s_np, s_nsplit;
    __shared__ float s_est[32];
    const int n = p.b * p.s_q, t0n = p.list[0].tiles, nt = t0n + p.list[1].tiles;
    int m = 1;
    while (m < n) m <<= 1;
    uint32_t *key = bsm;          /* [m] sort keys */
    int *info = (int *)(key + m); /* [n] tiles v | list-0 tiles << 12 | (nr - 1) << 24 */
    int *pos = info + n;          /* [n] first piece of the k-th row of the order */
    int *slot = pos + n;          /* [n] first partial slot of row r */
    const int tid = (int)threadIdx.x, lane = tid & 31, w = tid >> 5;
    int32_t *list = reinterpret_cast<int32_t *>(rows_out + n); /* [n] split rows, then their count */
    if (tid == 0) s_vmax = 0, s_tot = 0, s_nsplit = 0;
    ak_grid_dep_wait(); /* the lengths may come from the previous kernel */
    ak_grid_dep_launch();
    __syncthreads();
    {
        int vm = 0, tot = 0;
        for (int k = tid; k < n; k += (int)blockDim.x) {
            const int64_t r = k / p.s_q, i = k % p.s_q;
            const int32_t l0 = ak_sd_len(p.list[0], r, i), l1 = ak_sd_len(p.list[1], r, i);
            const int a = (l0 + AK_SD_KEYS - 1) / AK_SD_KEYS, v = a + (l1 + AK_SD_KEYS - 1) / AK_SD_KEYS;
            info[k] = v | a << 12;
            vm = max(vm, v);
            tot += v;
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            vm = max(vm, __shfl_xor_sync(0xffffffffu, vm, o));
            tot += __shfl_xor_sync(0xffffffffu, tot, o);
        }
        if (lane == 0) atomicMax(&s_vmax, vm), atomicAdd(&s_tot, tot);
    }
    __syncthreads();
    const int vmax = s_vmax;
    {
        const int kk = w + 1;
        float est = INFINITY;
        int np = 0;
        if (kk == 1 || (pieces > n && kk <= vmax)) {
            const int c = max(1, (vmax + kk - 1) / kk);
            int cmax = 0, spl = 0;
            for (int k = lane; k < n; k += 32) {
                const int v = info[k] & 0xfff, nr = v > c ? (v + c - 1) / c : 1;
                np += nr;
                cmax = max(cmax, (v + nr - 1) / nr);
                spl += nr > 1 ? nr : 0;
            }
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) {
                np += __shfl_xor_sync(0xffffffffu, np, o);
                spl += __shfl_xor_sync(0xffffffffu, spl, o);
                cmax = max(cmax, __shfl_xor_sync(0xffffffffu, cmax, o));
            }
            if (np <= pieces) {
                const float ht = (float)p.htiles, work_t = (float)s_tot + AK_SD_BAL_FIXED * (float)np;
                est = (float)np * ht <= (float)sms
                          ? (float)cmax + AK_SD_BAL_FIXED
                          : fmaxf(work_t * ht / (float)sms + 0.5f * work_t / (float)np, (float)cmax + AK_SD_BAL_FIXED);
                est += AK_SD_BAL_PART * (float)spl * ht / (float)sms + (spl > 0 ? 1.0f : 0.0f);
            }
        }
        if (lane == 0) s_est[w] = est, wsum[w] = np;
    }
    __syncthreads();
    if (tid == 0) {
        int best = 0;
        for (int k = 1; k < 32; k++)
            if (s_est[k] < s_est[best] && s_est[k] < 0.9f * s_est[0]) best = k;
        s_k = best + 1;
        s_np = wsum[best];
    }
    __syncthreads();
    const int c = max(1, (vmax + s_k - 1) / s_k);
    /* one wave of CTAs: every piece starts at once, so the order does not matter (the sort's 36-78
       barriers are skipped) */
    const bool order = (int64_t)s_np * p.htiles > sms;
    for (int k = tid; k < m; k += (int)blockDim.x) {
        if (k < n) {
            const int v = info[k] & 0xfff, nr = v > c ? (v + c - 1) / c : 1;
            info[k] |= (nr - 1) << 24;
            key[k] = order ? (uint32_t)(nt - (v + nr - 1) / nr) << 12 | (uint32_t)k : (uint32_t)k;
        } else {
            key[k] = 0xffffffffu;
        }
    }
    __syncthreads();
    if (order) ak_sd_bitonic_sort(key, m);
    for (int k = tid; k < n; k += (int)blockDim.x) {
        const int nr = ((info[k] >> 24) & 31) + 1;
        pos[k] = ((info[key[k] & 0xfffu] >> 24) & 31) + 1;
        slot[k] = nr > 1 ? nr : 0;
    }
    __syncthreads();
    const int total = ak_sd_bal_scan(pos, n, wsum);
    ak_sd_bal_scan(slot, n, wsum);
    for (int k = tid; k < n; k += (int)blockDim.x) {
        const int row = (int)(key[k] & 0xfffu), in = info[row];
        const int v = in & 0xfff, a = (in >> 12) & 0xfff, nr = ((in >> 24) & 31) + 1, s0 = slot[row];
        for (int j = 0; j < nr; j++) {
            const int v0 = j * v / nr, v1 = (j + 1) * v / nr;
            const int t0 = j == 0 ? 0 : v0 < a ? v0 : t0n + v0 - a, t1 = j == nr - 1 ? nt : v1 < a ? v1 : t0n + v1 - a;
            work[pos[k] + j] = make_int4(row, t0, t1, nr > 1 ? s0 + j : -1);
        }
        rows_out[row] = make_int2(s0, nr);
        if (nr > 1) list[atomicAdd(&s_nsplit, 1)] = row; /* any order: each row merges alone */
    }
    for (int k = total + tid; k < pieces; k += (int)blockDim.x) work[k] = make_int4(-1, 0, 0, -1);
    __syncthreads();
    if (tid == 0) list[n] = s_nsplit;
}

static void ak_sd_list_fill(ak_sd_list *l, const ak_cache *c, const ak_tensor *idx,
                            const ak_tensor *len) {
    l->pool = (const uint8_t *)c->data;
    l->page_stride = ak_cache_stride(c);
    l->page_size = c->page_size;
    l->page_shift = ak_page_shift(c->page_size);
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
    const int64_t grid = ak_sd_main_ctas(p, pl); /* never balanced (ak_sdw_plan's kernels only) */
    void *args[] = {(void *)&p};
    AK_CUDA_TRY(ak_launch_pdl(ctx, (const void *)ak_sd_main<LAYOUT, MW>, (unsigned)grid, AK_SD_THREADS, pl.smem, args));
    AK_CUDA_CHECK_LAUNCH("ak_sd_main");
    return AK_OK;
}

/* The combine: one CTA per row (2 dims per thread when the rows are at most one per SM, else 4),
   its dynamic shared memory the BULK instances' rows and weights or the CTAs' spread (below); a
   programmatic dependent launch, like the main kernels. */
static ak_status ak_sd_combine_launch(ak_context *ctx, const ak_sd_params &p, const ak_sd_plan &pl) {
    void *args[] = {(void *)&p};
    const int sms = ctx->cuda != NULL ? ctx->cuda->prop.multiProcessorCount : 132;
    const int dpt = pl.rows <= sms ? 2 : 4;
    /* with 2 dims a thread holds one word per split, so up to 32 splits fit one chunk: one L2 round
       trip (b 1 h_q 16, 32 splits: 9.3 -> 9.1 us, session 26) */
    if (pl.bal) {
        /* a balanced call: its split rows only, a warp per (row, head), two CTAs of eight warps per SM */
        const int64_t grid = (pl.rows + 7) / 8 < 2 * (int64_t)sms ? (pl.rows + 7) / 8 : 2 * (int64_t)sms;
        AK_CUDA_TRY(ak_launch_pdl(ctx, (const void *)ak_sd_bal_combine, (unsigned)grid, 256, 0, args));
        AK_CUDA_CHECK_LAUNCH("ak_sd_bal_combine");
        return AK_OK;
    }
    const int ch = pl.splits <= 8 ? 8 : pl.splits <= 16 || dpt == 4 ? 16 : 32;
    const void *fn = dpt == 2 ? (ch == 8    ? (const void *)ak_sd_combine<8, 2>
                                 : ch == 16 ? (const void *)ak_sd_combine<16, 2>
                                            : (const void *)ak_sd_combine<32, 2>)
                              : (ch == 8 ? (const void *)ak_sd_combine<8, 4> : (const void *)ak_sd_combine<16, 4>);
    /* The CTAs spread evenly, at most k = ceil(rows / SMs) per SM, by asking for more than 1 / (k +
       1) of an SM's shared memory (more than the ~17 KB BULK instances use). Dispatched as the main
       kernel's CTAs leave, they otherwise filled the first SMs freed up to the launch bounds'
       occupancy and shared those SMs' loads: b 1 h_q 64 (64 rows of 32 splits) 20.0k -> 17.2k
       cycles, b 8 h_q 16 -2..3%, 512-row calls -2..4% (x251, session 56). */
    size_t smem = 0;
    int64_t k = (pl.rows + sms - 1) / sms;
    /* Two per SM where a wgmma kernel's grid (one CTA per SM) leaves at most sms / 16 SMs idle and
       the rows are more than half the SMs: the combine's CTAs can then only land as main CTAs
       leave, and two per SM have them all resident before the last leaves, with the SMs they do
       not hold free for the next call's main kernel (656 and per-tensor 128-row calls -1..2.7%,
       b 8 h_q 16 level: x252, session 57). Where the main grid leaves SMs idle (V4's, e.g. b 8
       h_q 16: 80 CTAs), one per SM (two lost 1-2.5% there, session 56). */
    if (k == 1 && pl.kernel != 0 && 2 * pl.rows > sms && ak_sd_main_ctas(p, pl) >= sms - sms / 16) k = 2;
    if (ctx->cuda != NULL && k < ak_sd_combine_occ(ch, dpt)) {
        smem = (size_t)ctx->cuda->prop.sharedMemPerMultiprocessor / (size_t)(k + 1) + 1024;
        if (smem > (size_t)ctx->cuda->prop.sharedMemPerBlockOptin) smem = 0;
    }
    if (smem < ak_sd_combine_smem(ch, dpt)) smem = ak_sd_combine_smem(ch, dpt);
    if (smem > 48 * 1024)
        AK_CUDA_TRY(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    AK_CUDA_TRY(ak_launch_pdl(ctx, fn, (unsigned)pl.rows, 512 / dpt, smem, args));
    AK_CUDA_CHECK_LAUNCH("ak_sd_combine");
    return AK_OK;
}

template <int LAYOUT>
static ak_status ak_sd_launch_mw(ak_context *ctx, const ak_sd_params &p, const ak_sd_plan &pl) {
    if (pl.mw == 1) return ak_sd_launch<LAYOUT, 1>(ctx, p, pl);
    if (pl.mw == 2) return ak_sd_launch<LAYOUT, 2>(ctx, p, pl);
    return ak_sd_launch<LAYOUT, 4>(ctx, p, pl);
}

/* The records' L2 policy (ak_l2_policy; the warp-specialized kernels' copies): evict-first where no
   other CTA reads a CTA's records (one head tile and s_q 1: x123, the one-tile calls -1..4%), and
   on the swap-AB kernel where the call's records fill at most an eighth of L2: there its head
   tiles and token rows, up to eight CTAs a record running side by side, find the lines in L2
   under either policy, and evict-first served them faster (x304: b 1 / 2 h_q 128 -4..5%, b 2 h_q
   64 and b 1 s_q 2 h_q 64 -2..3%, b 4 h_q 32 -2%, 656 and per-tensor alike). The 64-head kernel's
   two head tiles measured mixed at any size (656 -0.2..0.8%, per-tensor +0.5..1.2%), and larger
   calls lost up to 0.9% (s_q 2 at b 128), so those keep the normal policy. */
static int ak_sd_rec_first(const ak_context *ctx, const ak_mla_decode_args *a,
                           const ak_sd_plan &pl) {
    if (pl.htiles == 1 && a->q->shape[1] == 1) return 1;
    if (pl.kernel != 3) return 0;
    ak_layout_traits lt;
    double bytes = 0.0; /* every token row's keys, at the records' bytes per token */
    const ak_cache *pools[2] = {a->cache, a->extra_indices != NULL ? a->extra_cache : NULL};
    const ak_tensor *idx[2] = {a->indices, a->extra_indices};
    for (int e = 0; e < 2; e++)
        if (pools[e] != NULL && ak_layout_traits_get(pools[e]->layout, &lt) == AK_OK)
            bytes += (double)idx[e]->shape[0] * idx[e]->shape[1] * idx[e]->shape[2] *
                     lt.bytes_per_token;
    return ctx->cuda != NULL && bytes * 8.0 <= (double)ctx->cuda->prop.l2CacheSize;
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
    /* the 64-head kernels write the partial rows with bulk copies (16-byte aligned addresses) */
    if (pl.ws_bytes > 0 && (uintptr_t)workspace % 16 != 0)
        return ak_fail(AK_ERR_INVALID_ARGUMENT,
                       "ak_mla_decode: workspace: the CUDA kernels need a 16-byte aligned workspace; got base %% 16 = %zu",
                       (size_t)((uintptr_t)workspace % 16));
    /* every kernel reads records by bulk copies or 16-byte cp.async: a pool off the 16-byte grid
       would fault on the device (a sticky error for the caller's context), so it is refused here */
    const ak_cache *pools[2] = {a->cache, a->extra_indices != NULL ? a->extra_cache : NULL};
    for (int e = 0; e < 2; e++)
        if (pools[e] != NULL && (uintptr_t)pools[e]->data % 16 != 0)
            return ak_fail(AK_ERR_INVALID_ARGUMENT,
                           "ak_mla_decode: %s.data: the CUDA kernels need a 16-byte aligned "
                           "pool; got base %% 16 = %zu",
                           e ? "extra_cache" : "cache", (size_t)((uintptr_t)pools[e]->data % 16));
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
    p.rec_first = ak_sd_rec_first(ctx, a, pl);
    ak_sd_list_fill(&p.list[0], a->cache, a->indices, a->topk_length);
    if (a->extra_cache != NULL && a->extra_indices != NULL)
        ak_sd_list_fill(&p.list[1], a->extra_cache, a->extra_indices, a->extra_topk_length);
    p.dv_splits = ak_divu_make((uint32_t)p.splits);
    p.dv_htiles = ak_divu_make((uint32_t)p.htiles);
    p.dv_sq = ak_divu_make((uint32_t)p.s_q);
    p.tq = (p.list[0].tiles + p.list[1].tiles) / p.splits;
    p.tr = (p.list[0].tiles + p.list[1].tiles) % p.splits;
    p.scale_log2 = a->softmax_scale * 1.4426950408889634f;
    p.sink = a->attn_sink != NULL ? (const float *)a->attn_sink->data : NULL;
    p.out = a->out->data;
    p.out_f32 = a->out->dtype == AK_DTYPE_F32;
    p.o_s0 = a->out->strides[0];
    p.o_s1 = a->out->strides[1];
    p.o_s2 = a->out->strides[2];
    {
        /* every kernel stores element pairs (4 bytes of bf16, 8 of f32): a row must start on a pair
           boundary, else the store faults (strides of size-1 dims never move the address) */
        const int64_t o_s[3] = {p.b > 1 ? p.o_s0 : 0, p.s_q > 1 ? p.o_s1 : 0, p.h_q > 1 ? p.o_s2 : 0};
        const size_t esz = p.out_f32 ? 4 : 2;
        if ((uintptr_t)p.out % (2 * esz) != 0 || o_s[0] % 2 != 0 || o_s[1] % 2 != 0 || o_s[2] % 2 != 0)
            return ak_fail(AK_ERR_INVALID_ARGUMENT,
                           "ak_mla_decode: out: the CUDA kernels store element pairs, so out needs a %zu-byte "
                           "aligned base and even strides; got base %% %zu = %zu, strides [%lld, %lld, %lld, 1]",
                           2 * esz, 2 * esz, (size_t)((uintptr_t)p.out % (2 * esz)), (long long)p.o_s0,
                           (long long)p.o_s1, (long long)p.o_s2);
        const int64_t el = p.out_f32 ? 4 : 8; /* elements per 16 bytes */
        p.out_bulk = (uintptr_t)p.out % 16 == 0 && o_s[0] % el == 0 && o_s[1] % el == 0 && o_s[2] % el == 0;
    }
    if (a->lse != NULL) {
        p.lse = (float *)a->lse->data;
        p.l_s0 = a->lse->strides[0];
        p.l_s1 = a->lse->strides[1];
        p.l_s2 = a->lse->strides[2];
    }
    const int64_t n = (int64_t)p.b * p.s_q;
    if (pl.splits > 1) {
        p.oacc = (__half *)workspace;
        p.lacc = (float2 *)(p.oacc + (size_t)pl.splits * pl.rows * AK_SD_DV);
    }
    ak_status st;
    if (pl.lpt) {
        p.lpt = 1;
        int32_t *rows = (int32_t *)((uint8_t *)workspace + ak_sd_ws_bytes(pl.splits, pl.rows));
        p.lpt_rows = rows;
        void *largs[] = {(void *)&p, (void *)&rows};
        AK_CUDA_TRY(ak_launch_pdl(ctx, (const void *)ak_sd_lpt_order, 1, 1024, 0, largs));
        AK_CUDA_CHECK_LAUNCH("ak_sd_lpt_order");
    }
    if (pl.bal) {
        /* workspace: the partial slots' rows, then the schedule: the pieces, the rows' table
           (ak_sd_bal_ws_bytes); made here (AK_BALANCE_MAKE) or by an earlier call (REUSE) */
        const size_t part = ak_sd_bal_part_bytes(pl.bal_pieces, n, p.h_q);
        p.bal = 1;
        p.bal_reuse = a->balance == AK_BALANCE_REUSE;
        p.bal_slots = (int32_t)ak_sd_bal_slots(pl.bal_pieces, n);
        p.oacc = (__half *)workspace;
        p.lacc = (float2 *)(p.oacc + (size_t)p.bal_slots * p.h_q * AK_SD_DV);
        int4 *work = (int4 *)((uint8_t *)workspace + part);
        int2 *rows = (int2 *)((uint8_t *)workspace + part + (size_t)pl.bal_pieces * 16);
        p.bal_work = work;
        p.bal_rows = rows;
        if (a->balance == AK_BALANCE_MAKE) {
            int pieces = pl.bal_pieces, sms = ctx->cuda->prop.multiProcessorCount, m = 1;
            while (m < n) m <<= 1;
            const size_t smem = (size_t)(m + 3 * n) * 4;
            AK_CUDA_TRY(cudaFuncSetAttribute(ak_sd_balance, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
            void *bargs[] = {(void *)&p, (void *)&work, (void *)&rows, (void *)&pieces, (void *)&sms};
            AK_CUDA_TRY(ak_launch_pdl(ctx, (const void *)ak_sd_balance, 1, 1024, smem, bargs));
            AK_CUDA_CHECK_LAUNCH("ak_sd_balance");
        }
    }
    if (pl.kernel != 0) st = ak_sdw_launch(ctx, p, pl, (int)a->cache->layout);
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
    if (pl.splits > 1 || (pl.bal && p.bal_slots > 0)) return ak_sd_combine_launch(ctx, p, pl);
    return AK_OK;
}
