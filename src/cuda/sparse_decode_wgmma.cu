/*
 * sparse_decode_wgmma.cu -- sparse MLA decode for h_q > 32 on Hopper tensor cores (wgmma), same
 * semantics, split rule and partial-row format as sparse_decode.cu (see its header comment).
 *
 * One CTA = (request r, query token i, 64-head tile, KV split), three warpgroups, specialized:
 * warpgroup 0 produces, 1 and 2 consume. The key list is walked in units of 32 keys (half a
 * 64-key tile). The producer (80 registers per thread after setmaxnreg) copies the records of
 * units j + 1 .. j + 3 with cp.async into three raw stages (one for MLA_BF16; rule I1: an invalid
 * slot is never read, its bytes are zero-filled) and dequantizes unit j into K buffer j % 2; each
 * producer warp owns 8 keys end to end, so a stage needs only __syncwarp. The consumers (208
 * registers) run unit j's products while the producer fills the other buffer; named barriers hand
 * a K buffer over (FULL after its dequantization, EMPTY after the PV that reads it).
 *
 * Shared memory: Q [64 heads x d_qk] bf16 (loaded once), K [2][32 keys x d_qk] bf16, P [64 x 64]
 * bf16 (keys < 32 used) and the raw stages. Q, K and P use the canonical 128-byte-swizzled K-major
 * layout: 64-dim column blocks of rows x 128 bytes (8 KB for 64 rows, 4 KB for 32), the 16-byte
 * chunk index of row n XORed with n % 8, every block 1024-byte aligned (descriptors carry base
 * offset 0).
 *
 * Per unit, consumer warpgroup w computes S_w = Q K[16 w .. 16 w + 15]^T (wgmma m64n16k16, A and
 * B from shared memory); the two merge their row maxima through shared memory, so both apply the
 * same m and rescale factor, and each keeps the partial row sum of its own keys (merged once at
 * the end). P, rounded to bf16, goes to the swizzled P tile, and warpgroup w accumulates
 * O[:, 256 w .. 256 w + 255] += P V with wgmma m64n256k16 (64 x 256 f32 = 128 registers per
 * thread), B = V read MN-major from the same K unit: a K-major [key][dim] block of 64 dims is an
 * MN-major swizzle atom column of V (dims contiguous, 8 keys per 1024-byte atom), so its
 * descriptor has leading byte offset 4096 (next 64 dims) and stride byte offset 1024 (next 8 keys).
 * tests/gpu_test_wgmma.cu checks these layouts.
 */
#include "cuda/cuda_backend.h"
#include "cuda/cuda_common.cuh"
#include "cuda/ptx.cuh"
#include "cuda/sparse_decode.cuh"

#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>

#define AK_SDW_THREADS 384 /* warpgroup 0: producer; warpgroups 1 and 2: consumers */
#define AK_SDW_HEADS 64
#define AK_SDW_UK 32       /* keys per pipeline unit (half a 64-key tile) */
#define AK_SDW_QBLK 8192   /* bytes of a 64-row x 64-dim bf16 swizzled column block (Q, P) */
#define AK_SDW_KBLK 4096   /* bytes of a 32-row x 64-dim column block (K units) */

/* Named barriers (0 is __syncthreads): consumers only; K buffer b emptied / filled. */
#define AK_SDW_BAR_CONS 1
#define AK_SDW_BAR_EMPTY 2 /* + b */
#define AK_SDW_BAR_FULL 4  /* + b */

/* Byte offset of the 16-byte chunk holding dims d..d+7 (d % 8 == 0) of row n in a swizzled tile
   of column blocks of `blk` bytes. */
__device__ __forceinline__ uint32_t ak_sdw_off(int n, int d, int blk) {
    return (uint32_t)((d >> 6) * blk + n * 128 + ((((d >> 3) & 7) ^ (n & 7)) << 4));
}

/* Record bytes staged per key (16-byte multiple) and 16-byte chunks per record. */
template <int LAYOUT> struct ak_sdw_rec { enum { BYTES = ak_sd_geo<LAYOUT>::REC, CH = BYTES / 16 }; };

/* Shared-memory map (bytes from the 1024-aligned base). Three raw stages for the fp8 layouts (two
   units of copies in flight while one is dequantized); MLA_BF16's 36.9 KB records leave room for
   one. */
template <int LAYOUT> struct ak_sdw_smem_map {
    enum {
        V4 = LAYOUT == AK_LAYOUT_DSV4_FP8_UE8M0,
        KB = ak_sd_geo<LAYOUT>::DQK / 64,
        NST = LAYOUT == AK_LAYOUT_MLA_BF16 ? 1 : 3,
        UBYTES = AK_SDW_UK * ak_sdw_rec<LAYOUT>::BYTES,
        Q = 0,                                  /* [KB][64 heads][128 B] bf16 swizzled */
        K = Q + KB * AK_SDW_QBLK,               /* [2][KB][32 keys][128 B] bf16 swizzled */
        KBUF = KB * AK_SDW_KBLK,
        P = K + 2 * KBUF,                       /* [64 heads][64 keys] bf16 swizzled, keys < 32 used */
        RAW = P + AK_SDW_QBLK,                  /* [NST][32][REC] staged records */
        SC8 = RAW + NST * UBYTES,               /* V4: [NST][32][8] scale bytes */
        VST = SC8 + (V4 ? NST * AK_SDW_UK * 8 : 0), /* [NST][32] int32: key valid, per stage */
        KV = VST + NST * AK_SDW_UK * 4,         /* [2][32] int32: key valid, per K buffer */
        RED = KV + 2 * AK_SDW_UK * 4,           /* [2 warpgroups][64 rows] f32 max, then sum */
        BYTES = RED + 2 * 64 * 4
    };
};

/* First pipeline unit >= u of [u, u_end) that starts before its row's length, else u_end. Unit u
   is keys 32 (u & 1) .. + 31 of 64-key tile u >> 1 (of the main list, then the extra list). */
__device__ __forceinline__ int ak_sdw_next(const ak_sd_params &p, int u, int u_end, int32_t len0,
                                           int32_t len1) {
    for (; u < u_end; u++) {
        const int t = u >> 1, ex = t >= p.list[0].tiles;
        const int start = (ex ? t - p.list[0].tiles : t) * AK_SD_KEYS + (u & 1) * AK_SDW_UK;
        if (start < (ex ? len1 : len0)) break;
    }
    return u;
}

/* Index value of key k of unit u as stored (checked by ak_sdw_locate when used, so the load's
   latency is not waited for here), or -1 past the row's length. */
__device__ __forceinline__ int32_t ak_sdw_slot(const ak_sd_params &p, int64_t r, int64_t i, int u, int k,
                                               int32_t len0, int32_t len1) {
    const int t = u >> 1, ex = t >= p.list[0].tiles;
    const ak_sd_list &l = p.list[ex];
    const int pos = (ex ? t - p.list[0].tiles : t) * AK_SD_KEYS + (u & 1) * AK_SDW_UK + k;
    if (pos >= (ex ? len1 : len0)) return -1;
    return l.idx[r * l.idx_s0 + i * l.idx_s1 + pos];
}

/* Byte offsets from the list's pool of slot `slot`'s record (ro) and, for V4, of its scale bytes
   (so); -1 for an invalid slot (rule I1: negative or >= capacity). */
template <int LAYOUT>
__device__ __forceinline__ void ak_sdw_locate(const ak_sd_list &l, int32_t slot, int64_t &ro, int64_t &so) {
    ro = so = -1;
    if ((uint32_t)slot >= l.capacity) return;
    const int32_t page = ak_sd_page(l, slot), ts = slot - page * l.page_size;
    const int64_t pg = (int64_t)page * l.page_stride;
    ro = pg + (int64_t)ts * ak_sdw_rec<LAYOUT>::BYTES;
    if (LAYOUT == AK_LAYOUT_DSV4_FP8_UE8M0) so = pg + (int64_t)l.page_size * 576 + (int64_t)ts * 8;
}

/* Producer warp w (0..3) issues the copies of its 8 keys 8w .. 8w + 7 of unit u into a raw stage:
   lanes 0..7 hold the slot of key 8w + lane (`slot`, loaded a unit ahead); a copy instruction
   reads 512 contiguous bytes of one record (rule I1: an invalid key is zero-filled, never read).
   The same warp dequantizes the same keys, so a stage needs only __syncwarp between them. */
template <int LAYOUT>
__device__ __forceinline__ void ak_sdw_issue(const ak_sd_list &l, int32_t slot, uint8_t *raw, uint8_t *sc8,
                                             int32_t *vst, int w, int lane) {
    typedef ak_sdw_rec<LAYOUT> R;
    enum { PASS = (R::CH + 31) / 32 };
    int64_t ro = -1, so = -1;
    if (lane < 8) {
        ak_sdw_locate<LAYOUT>(l, slot, ro, so);
        vst[8 * w + lane] = ro >= 0;
        if (LAYOUT == AK_LAYOUT_DSV4_FP8_UE8M0)
            ak_cp_async8(ak_smem_addr(sc8 + (8 * w + lane) * 8), so >= 0 ? l.pool + so : l.pool, so >= 0 ? 8u : 0u);
    }
#pragma unroll
    for (int kk = 0; kk < 8; kk++) {
        const int64_t o = __shfl_sync(0xffffffffu, ro, kk);
        const uint8_t *src = l.pool + (o < 0 ? 0 : o) + lane * 16;
        const uint32_t d = ak_smem_addr(raw + (8 * w + kk) * R::BYTES + lane * 16), n = o < 0 ? 0u : 16u;
#pragma unroll
        for (int ps = 0; ps < PASS; ps++)
            if (R::CH % 32 == 0 || lane + 32 * ps < R::CH) ak_cp_async16(d + 512 * ps, src + 512 * ps, n);
    }
    ak_cp_async_commit();
}

/* Dequantizes the staged records of the 8 keys of producer warp pt / 32 into the swizzled bf16
   K unit (layouts.md 4). Zero-filled records of invalid keys give zero rows (scale 0 or a finite
   tiny ue8m0 times 0). Four threads per key, each taking every fourth 16-byte output chunk, so
   chunk kinds and scale blocks are known at compile time. */
template <int LAYOUT>
__device__ __forceinline__ void ak_sdw_dequant(const uint8_t *raw, const uint8_t *sc8, uint8_t *ks,
                                               float kscale, int pt) {
    typedef ak_sdw_rec<LAYOUT> R;
    enum {
        TPK = 4,
        CH = ak_sd_geo<LAYOUT>::CPT, /* output chunks per key: 16 fp8 or 8 bf16 values each */
        PER = CH / TPK,
        NQ = LAYOUT == AK_LAYOUT_MLA_BF16 ? 0 : LAYOUT == AK_LAYOUT_MLA_FP8_PERTENSOR ? 36
           : LAYOUT == AK_LAYOUT_DSV4_FP8_UE8M0 ? 28 : 32, /* fp8 chunks */
        ROPE = LAYOUT == AK_LAYOUT_DSA_FP8_BLOCKSCALE ? 528 : 448, /* bf16 rope byte offset */
        NB = 5 /* batch of chunk loads before the first conversion */
    };
    static_assert(CH % TPK == 0 && NQ % TPK == 0, "chunks split evenly over a key's threads");
    const int tok = pt / TPK, j = pt % TPK;
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
                *reinterpret_cast<uint4 *>(ks + ak_sdw_off(tok, c * 8, AK_SDW_KBLK)) = v[u - u0];
            } else if (u < NQ / TPK) {
                float sc = kscale; /* fp8 chunk c: dims 16c.. (656: scale block u / 2; V4: u) */
                if (LAYOUT == AK_LAYOUT_DSA_FP8_BLOCKSCALE) sc = reinterpret_cast<const float *>(rec + 512)[u >> 1];
                if (LAYOUT == AK_LAYOUT_DSV4_FP8_UE8M0) sc = ak_sd_ue8m0(sc8[tok * 8 + u]);
                uint4 lo, hi;
                ak_sd_dequant16(v[u - u0], sc, lo, hi);
                *reinterpret_cast<uint4 *>(ks + ak_sdw_off(tok, c * 16, AK_SDW_KBLK)) = lo;
                *reinterpret_cast<uint4 *>(ks + ak_sdw_off(tok, c * 16 + 8, AK_SDW_KBLK)) = hi;
            } else {
                *reinterpret_cast<uint4 *>(ks + ak_sdw_off(tok, NQ * 16 + (c - NQ) * 8, AK_SDW_KBLK)) = v[u - u0];
            }
        }
    }
}

template <int LAYOUT>
__global__ void __launch_bounds__(AK_SDW_THREADS, 1) ak_sdw_main(const ak_sd_params p) {
    typedef ak_sd_geo<LAYOUT> G;
    typedef ak_sdw_smem_map<LAYOUT> M;
    enum { DQK = G::DQK, KSTEPS = DQK / 16 };
    extern __shared__ __align__(16) uint8_t smem_raw[];
    /* 1024-byte aligned for the 128-byte swizzle; offsetting the __shared__ array itself (not an
       integer-cast address) keeps every access a shared-memory one (LDS/STS, not generic LD/ST) */
    uint8_t *smem = smem_raw + ((1024u - (ak_smem_addr(smem_raw) & 1023u)) & 1023u);
    uint8_t *qs = smem + M::Q, *ks = smem + M::K, *ps = smem + M::P, *raw = smem + M::RAW;
    uint8_t *sc8 = smem + M::SC8;
    int32_t *vst = (int32_t *)(smem + M::VST), *kv = (int32_t *)(smem + M::KV);
    float *red = (float *)(smem + M::RED);

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wg = warp >> 2, wr = warp & 3; /* warpgroup, warp within it */
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
    const int u_end = 2 * t_end, u_first = ak_sdw_next(p, 2 * t_begin, u_end, len0, len1);

    /* Producer prologue: the first NST units' copies go out before the Q tile is loaded. */
    int u_iss = u_first; /* next unit whose copies the producer issues */
    int32_t nslot = -1;  /* lanes 0..7 of a producer warp: slot of key 8 warp + lane of unit u_iss */
    if (wg == 0) {
        int32_t slot[M::NST]; /* the first units' slot loads, all in flight before any is used */
        int uu = u_iss;
#pragma unroll
        for (int s = 0; s < M::NST; s++) {
            slot[s] = uu < u_end && lane < 8 ? ak_sdw_slot(p, r, i, uu, 8 * warp + lane, len0, len1) : -1;
            if (uu < u_end) uu = ak_sdw_next(p, uu + 1, u_end, len0, len1);
        }
#pragma unroll
        for (int s = 0; s < M::NST; s++) {
            if (u_iss < u_end) {
                ak_sdw_issue<LAYOUT>(p.list[(u_iss >> 1) >= p.list[0].tiles], slot[s], raw + s * M::UBYTES,
                                     sc8 + s * AK_SDW_UK * 8, vst + s * AK_SDW_UK, warp, lane);
                u_iss = ak_sdw_next(p, u_iss + 1, u_end, len0, len1);
            } else {
                ak_cp_async_commit(); /* an empty group keeps the wait_group count uniform */
            }
        }
        if (u_iss < u_end && lane < 8) nslot = ak_sdw_slot(p, r, i, u_iss, 8 * warp + lane, len0, len1);
    }

    /* Q tile -> swizzled shared memory, zero rows past h_q (all 384 threads). */
    {
        enum { QCH = DQK / 8, QITEMS = AK_SDW_HEADS * QCH, QN = (QITEMS + AK_SDW_THREADS - 1) / AK_SDW_THREADS,
               QB = 6 };
        const uint16_t *qb = p.q + r * p.q_s0 + i * p.q_s1;
#pragma unroll
        for (int k0 = 0; k0 < QN; k0 += QB) {
            uint4 qv[QB];
#pragma unroll
            for (int k = 0; k < QB; k++) {
                const int it = (k0 + k) * AK_SDW_THREADS + tid, row = it / QCH, c = it % QCH;
                qv[k] = make_uint4(0, 0, 0, 0);
                if (k0 + k < QN && it < QITEMS && h0 + row < p.h_q) {
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
                if (k0 + k < QN && it < QITEMS) *reinterpret_cast<uint4 *>(qs + ak_sdw_off(row, c * 8, AK_SDW_QBLK)) = qv[k];
            }
        }
    }
    ak_fence_proxy_async(); /* Q writes -> the wgmma (async proxy) reads */
    __syncthreads();

    if (wg == 0) {
        /* ---- producer: copies NST units ahead, dequantizes unit j into K buffer j & 1 ---- */
        ak_setmaxnreg_dec<80>();
        int j = 0;
#pragma unroll 1
        for (int u = u_first; u < u_end; j++) {
            const int s = j % M::NST, b = j & 1;
            ak_cp_async_wait_group<M::NST - 1>();
            __syncwarp(); /* the warp's copies of unit j (all lanes) have landed */
            if (j >= 2) ak_bar_sync(AK_SDW_BAR_EMPTY + b, AK_SDW_THREADS); /* unit j - 2 left K[b] */
            float kscale = 1.0f;
            if (LAYOUT == AK_LAYOUT_MLA_FP8_PERTENSOR) {
                const ak_sd_list &l = p.list[(u >> 1) >= p.list[0].tiles];
                kscale = l.k_scale_ptr != NULL ? *l.k_scale_ptr : l.k_scale;
            }
            ak_sdw_dequant<LAYOUT>(raw + s * M::UBYTES, sc8 + s * AK_SDW_UK * 8, ks + b * M::KBUF, kscale, tid);
            if (lane < 8) kv[b * AK_SDW_UK + 8 * warp + lane] = vst[s * AK_SDW_UK + 8 * warp + lane];
            ak_fence_proxy_async(); /* K writes -> the consumers' wgmma reads */
            ak_bar_arrive(AK_SDW_BAR_FULL + b, AK_SDW_THREADS);
            __syncwarp(); /* the warp is done reading stage s: refill it with unit u_iss */
            if (u_iss < u_end) {
                ak_sdw_issue<LAYOUT>(p.list[(u_iss >> 1) >= p.list[0].tiles], nslot, raw + s * M::UBYTES,
                                     sc8 + s * AK_SDW_UK * 8, vst + s * AK_SDW_UK, warp, lane);
                u_iss = ak_sdw_next(p, u_iss + 1, u_end, len0, len1);
                nslot = u_iss < u_end && lane < 8 ? ak_sdw_slot(p, r, i, u_iss, 8 * warp + lane, len0, len1) : -1;
            } else {
                ak_cp_async_commit();
            }
            u = ak_sdw_next(p, u + 1, u_end, len0, len1);
        }
        /* the consumers' releases of the last two units complete their barrier phases */
        for (int k = j - 2 < 0 ? 0 : j - 2; k < j; k++) ak_bar_sync(AK_SDW_BAR_EMPTY + (k & 1), AK_SDW_THREADS);
        ak_cp_async_wait_all();
        return;
    }

    /* ---- consumers: warpgroup cw = 0, 1 takes keys 16 cw .. 16 cw + 15 of each unit for
       S = Q K^T and value dims 256 cw .. 256 cw + 255 for O += P V ---- */
    ak_setmaxnreg_inc<208>();
    const int cw = wg - 1;
    float o[128];
#pragma unroll
    for (int j = 0; j < 128; j++) o[j] = 0.0f;
    float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};
    /* Descriptors of each operand's first k16 step; a step adds its byte offset >> 4 to the start
       address field (bits 0-13, no carry: shared addresses stay below 256 KB). V is read MN-major
       from the K unit: a 64-dim column block of 32 keys is 4 KB, so its leading byte offset is
       4096 and its stride byte offset 1024 (8 keys). */
    const uint32_t ka = ak_smem_addr(ks);
    const uint64_t dq0 = ak_wgmma_desc_sw128(ak_smem_addr(qs), 16, 1024);
    const uint64_t dk0 = ak_wgmma_desc_sw128(ka + cw * 16 * 128, 16, 1024);
    const uint64_t dp0 = ak_wgmma_desc_sw128(ak_smem_addr(ps), 16, 1024);
    const uint64_t dv0 = ak_wgmma_desc_sw128(ka + cw * 4 * AK_SDW_KBLK, AK_SDW_KBLK, 1024);

    int j = 0;
#pragma unroll 1
    for (int u = u_first; u < u_end; j++, u = ak_sdw_next(p, u + 1, u_end, len0, len1)) {
        const int b = j & 1;
        const uint32_t kb = (uint32_t)(b * M::KBUF) >> 4;
        ak_bar_sync(AK_SDW_BAR_FULL + b, AK_SDW_THREADS); /* K[b] holds unit j */

        float s[8];
#pragma unroll
        for (int e = 0; e < 8; e++) s[e] = 0.0f;
        ak_wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < KSTEPS; kk++)
            ak_wgmma_m64n16k16_ss(s, dq0 + (((kk >> 2) * AK_SDW_QBLK + (kk & 3) * 32) >> 4),
                                  dk0 + kb + (((kk >> 2) * AK_SDW_KBLK + (kk & 3) * 32) >> 4), kk > 0);
        ak_wgmma_commit();
        ak_wgmma_wait0();
#pragma unroll
        for (int e = 0; e < 8; e++) ak_reg_fence(s[e]);

        /* Online softmax on rows 16 wr + g (hr 0) and + 8 (hr 1); s[4 jj + 2 hr + e] is key
           16 cw + 8 jj + 2 c4 + e. The row max of the unit is merged across the two warpgroups
           through `red`, so both apply the same m and alpha; each keeps the partial sum of its
           own keys (merged at the end). */
        float mx[2];
#pragma unroll
        for (int hr = 0; hr < 2; hr++) {
            mx[hr] = -INFINITY;
#pragma unroll
            for (int jj = 0; jj < 2; jj++) {
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const int key = 16 * cw + 8 * jj + 2 * c4 + e;
                    const float v = kv[b * AK_SDW_UK + key] ? s[4 * jj + 2 * hr + e] * p.scale_log2 : -INFINITY;
                    s[4 * jj + 2 * hr + e] = v;
                    mx[hr] = fmaxf(mx[hr], v);
                }
            }
            mx[hr] = fmaxf(mx[hr], __shfl_xor_sync(0xffffffffu, mx[hr], 1));
            mx[hr] = fmaxf(mx[hr], __shfl_xor_sync(0xffffffffu, mx[hr], 2));
            if (c4 == 0) red[cw * 64 + 16 * wr + g + 8 * hr] = mx[hr];
        }
        ak_bar_sync(AK_SDW_BAR_CONS, 256);
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
            for (int jj = 0; jj < 2; jj++) {
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const float x = ak_ex2(s[4 * jj + 2 * hr + e] - m_use);
                    s[4 * jj + 2 * hr + e] = x;
                    sum += x;
                }
            }
            sum += __shfl_xor_sync(0xffffffffu, sum, 1);
            sum += __shfl_xor_sync(0xffffffffu, sum, 2);
            l_run[hr] = l_run[hr] * alpha[hr] + sum;
            m_run[hr] = m_new;
            /* P rounded to bf16 into the swizzled [head][key] tile (the A operand of P V) */
#pragma unroll
            for (int jj = 0; jj < 2; jj++) {
                const int key = 16 * cw + 8 * jj + 2 * c4;
                *reinterpret_cast<uint32_t *>(ps + ak_sdw_off(row, key & ~7, AK_SDW_QBLK) + (key & 7) * 2) =
                    ak_sd_pack_bf16(s[4 * jj + 2 * hr], s[4 * jj + 2 * hr + 1]);
            }
        }
        if (!keep) {
#pragma unroll
            for (int jj = 0; jj < 32; jj++) {
                o[4 * jj] *= alpha[0];
                o[4 * jj + 1] *= alpha[0];
                o[4 * jj + 2] *= alpha[1];
                o[4 * jj + 3] *= alpha[1];
            }
        }
        ak_fence_proxy_async(); /* P tile writes -> wgmma reads */
        ak_bar_sync(AK_SDW_BAR_CONS, 256);

        /* O[:, 256 cw ..] += P V; P K-major from ps, V = the K unit's dims 256 cw .., MN-major */
#pragma unroll
        for (int e = 0; e < 128; e++) ak_reg_fence(o[e]);
        ak_wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < AK_SDW_UK / 16; kk++)
            ak_wgmma_m64n256k16_ss_tb(o, dp0 + (kk * 32 >> 4), dv0 + kb + (kk * 2048 >> 4));
        ak_wgmma_commit();
        ak_wgmma_wait0();
#pragma unroll
        for (int e = 0; e < 128; e++) ak_reg_fence(o[e]);
        ak_bar_arrive(AK_SDW_BAR_EMPTY + b, AK_SDW_THREADS); /* K[b] may be refilled */
    }

    /* Both warpgroups' partial sums -> the row sum (red is free: each warpgroup read it last
       before the second consumer barrier of the last unit, or the loop never ran). */
#pragma unroll
    for (int hr = 0; hr < 2; hr++)
        if (c4 == 0) red[(cw ^ 1) * 64 + 16 * wr + g + 8 * hr] = l_run[hr];
    ak_bar_sync(AK_SDW_BAR_CONS, 256);
#pragma unroll
    for (int hr = 0; hr < 2; hr++) l_run[hr] += red[cw * 64 + 16 * wr + g + 8 * hr];

    /* Write this split's rows: final out/lse with one split, else normalized partials. */
    const int d0 = cw * 256;
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
            if (p.lse != NULL && cw == 0 && c4 == 0) p.lse[r * p.l_s0 + i * p.l_s1 + h * p.l_s2] = lse_e;
            const int64_t ob = r * p.o_s0 + i * p.o_s1 + h * p.o_s2;
#pragma unroll
            for (int jj = 0; jj < 32; jj++) {
                const int d = d0 + jj * 8 + c4 * 2;
                const float v0 = o[4 * jj + 2 * hr] * f, v1 = o[4 * jj + 2 * hr + 1] * f;
                if (p.out_f32)
                    *reinterpret_cast<float2 *>((float *)p.out + ob + d) = make_float2(v0, v1);
                else
                    *reinterpret_cast<uint32_t *>((uint16_t *)p.out + ob + d) = ak_sd_pack_bf16(v0, v1);
            }
        } else {
            const int64_t rows = (int64_t)p.b * p.s_q * p.h_q;
            const float f = lsum > 0.0f ? 1.0f / lsum : 0.0f;
            if (cw == 0 && c4 == 0) p.lacc[split * rows + row] = lse2;
            float *dst = p.oacc + ((int64_t)split * rows + row) * AK_SD_DV;
#pragma unroll
            for (int jj = 0; jj < 32; jj++) {
                const int d = d0 + jj * 8 + c4 * 2;
                *reinterpret_cast<float2 *>(dst + d) = make_float2(o[4 * jj + 2 * hr] * f, o[4 * jj + 2 * hr + 1] * f);
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
