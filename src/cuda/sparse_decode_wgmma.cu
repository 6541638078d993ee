/*
 * sparse_decode_wgmma.cu -- sparse MLA decode on Hopper tensor cores (wgmma), same semantics, split
 * rule and partial-row format as sparse_decode.cu (see its header comment). Four kernels: the
 * pipelined ak_sdw_main below (MLA_BF16; h_q > 32, 64-head tiles), the warp-specialized
 * ak_sdx_main further down (656, per-tensor fp8 and V4; h_q > 32, 64-head tiles), the swap-AB
 * ak_sdt_main after it (656, per-tensor fp8 and V4; h_q <= 32, 16- or 32-head tiles; 656 and
 * per-tensor also above 32 heads at few units, 16-head tiles) and the
 * register-dequantizing ak_sdr_main last (per-tensor fp8, h_q <= 16 at 16 or more 64-key tiles per
 * CTA, on devices of high copy bandwidth per SM: ak_sdw_plan).
 *
 * ak_sdw_main: one CTA = (request r, query token i, 64-head tile, KV split), two warpgroups (256
 * threads).
 * Shared memory holds Q [64 heads x d_qk] bf16 (loaded once) and two K tiles [64 keys x d_qk]
 * bf16 (key tiles t and t + 1; 221 KB for d_qk 576). Q and K use the canonical
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
 * them. While the tensor cores compute S for tile t + 1, the threads start the cp.async copies of
 * tile t + 2's records (a quarter record per thread, located one tile earlier) into the K buffer
 * P V of tile t has just released, then read tile t + 3's slot ids. It served V4 below 32 units
 * until session 50, when the warp-specialized kernel measured 3-14% faster there (x229, x230).
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

/* Byte offset of the 16-byte chunk holding dims d..d+7 (d % 8 == 0) of row n in a swizzled tile of
   BR rows (column blocks of BR rows x 128 bytes: Q, the K tiles and buffers; BR 64: AK_SDW_TILE). */
template <int BR> __device__ __forceinline__ uint32_t ak_sdx_off(int n, int d) {
    return (uint32_t)((d >> 6) * (BR * 128) + n * 128 + ((((d >> 3) & 7) ^ (n & 7)) << 4));
}

/* Shared-memory map (bytes from the 1024-aligned base). Two K tiles: the tensor cores read tile t
   from one while the copies of tile t + 1 fill the other (221 KB for d_qk 576). */
template <int LAYOUT> struct ak_sdw_smem_map {
    enum {
        KB = ak_sd_geo<LAYOUT>::DQK / 64,
        Q = 0,                                       /* [KB][64 heads][128 B] bf16 swizzled */
        K = Q + KB * AK_SDW_TILE,                    /* [2][KB][64 keys][128 B] bf16 swizzled */
        VALID = K + 2 * KB * AK_SDW_TILE,            /* [2][64] u8: key of K tile holds a valid slot */
        LSE = VALID + 2 * AK_SD_KEYS,                /* [64] f32 rows' lse for ak_sdw_write_staged */
        BYTES = LSE + 64 * 4
    };
};

/* Whether tile t is of the extra list. The warp-specialized kernels have two instances: GEN 1
   serves any call; GEN 0 a call with one list whose pages are a power of two (every DSA engine's),
   where this is a constant false, which takes the list selects out of it, and a page is a shift. */
template <int GEN> __device__ __forceinline__ bool ak_sd_extra(const ak_sd_params &p, int t) {
    return GEN && t >= p.list[0].tiles;
}

/* First tile >= t of [t, t_end) that starts before its row's length, else t_end. */
template <int GEN = 1>
__device__ __forceinline__ int ak_sdw_next(const ak_sd_params &p, int t, int t_end, int32_t len0,
                                           int32_t len1) {
    for (; t < t_end; t++) {
        const int ex = ak_sd_extra<GEN>(p, t);
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
template <int LAYOUT, int GEN = 1>
__device__ __forceinline__ void ak_sdw_locate(const ak_sd_list &l, int32_t slot, int64_t &ro, int64_t &so) {
    ro = so = -1;
    if ((uint32_t)slot >= l.capacity) return;
    const int32_t page = ak_sd_page<!GEN>(l, slot), ts = slot - page * l.page_size;
    const int64_t pg = (int64_t)page * l.page_stride;
    ro = pg + (int64_t)ts * ak_sd_geo<LAYOUT>::REC;
    if (LAYOUT == AK_LAYOUT_DSV4_FP8_UE8M0) so = pg + (int64_t)l.page_size * 576 + (int64_t)ts * 8;
}

/* This thread's quarter of key `tok`'s record (chunks j, j + 4, ... of 72) straight into
   the swizzled K tile by cp.async; ro -1 zero-fills (rule I1). */
__device__ __forceinline__ void ak_sdw_copy_bf16(const uint8_t *pool, int64_t ro, int tok, int j, uint8_t *ks) {
    const uint8_t *src = pool + (ro < 0 ? 0 : ro);
    const uint32_t n = ro < 0 ? 0u : 16u, base = ak_smem_addr(ks);
#pragma unroll
    for (int u = 0; u < 18; u++) {
        const int c = j + 4 * u;
        ak_cp_async16(base + ak_sdx_off<AK_SD_KEYS>(tok, c * 8), src + 16 * c, n);
    }
    ak_cp_async_commit();
}

/* One pipeline step of the loader map (thread = quarter q4 of key tok): copy tile tn's records
   (offsets xro) into K tile kn by cp.async (waited before the next barrier) and mark its valid
   keys; then locate tile tnn's keys from their raw slot ids (sraw, sok); then read tile tnnn's raw
   slot ids (any tile tv of the row stands in past the end). */
__device__ __forceinline__ void ak_sdw_stage(const ak_sd_params &p, int64_t r, int64_t i, int32_t len0,
                                             int32_t len1, int tn, int tnn, int tnnn, int tv, int t_end,
                                             int tok, int q4, uint8_t *kn, uint8_t *kvalid, int64_t &xro,
                                             int32_t &sraw, bool &sok) {
    /* read on every path (an iteration old, so already here): the new slot load below then writes
       a register with no load in flight */
    const int32_t slot = sok ? sraw : -1;
    if (tn < t_end) {
        ak_sdw_copy_bf16(p.list[tn >= p.list[0].tiles].pool, xro, tok, q4, kn);
        if (q4 == 0) kvalid[tok] = xro >= 0;
    }
    if (tnn < t_end) {
        int64_t so;
        ak_sdw_locate<AK_LAYOUT_MLA_BF16>(p.list[tnn >= p.list[0].tiles], slot, xro, so);
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

/* This CTA's first head, token row ri = r * s_q + i, tiles [t0, t1) of the concatenated list and
   partial slot (-1: one split, the CTA writes the output rows) from blockIdx.x (splits fastest,
   then head tiles of nh heads). Each kernel's LPT instance (p.lpt) replaces the row, its BAL
   instance (p.bal) row, tiles and slot (ak_sd_take_early, ak_sd_take_late); the static instance is
   the kernel as it was (work computed in every CTA's prologue instead made the kernels 15-18%
   slower, session 31). */
__device__ __forceinline__ void ak_sdw_cta(const ak_sd_params &p, int nh, int &h0, int64_t &ri, int &t0, int &t1,
                                           int &pslot) {
    int split, ht;
    uint32_t row;
    ak_sd_cta_of(p, split, ht, row);
    h0 = ht * nh;
    ri = row;
    ak_sd_split_range(p, split, t0, t1);
    pslot = ak_sd_split_slot(p, split, ri);
}

/* Dims src .. src + 7 of a q row, as bf16 pairs, by element loads (rows off the 16-byte grid). */
__device__ __forceinline__ uint4 ak_sd_ldq8_elem(const uint16_t *src) {
    uint32_t w[4];
    for (int e = 0; e < 4; e++) w[e] = (uint32_t)src[2 * e] | ((uint32_t)src[2 * e + 1] << 16);
    return make_uint4(w[0], w[1], w[2], w[3]);
}

/* Dims src .. src + 7 of a q row, as bf16 pairs: one 16-byte load where q rows are 16-byte aligned. */
__device__ __forceinline__ uint4 ak_sd_ldq8(const ak_sd_params &p, const uint16_t *src) {
    return p.q_vec ? ak_ldg_nc_v4(src) : ak_sd_ldq8_elem(src);
}

/* Q tile [NH heads x DQK] of token (r, i), heads h0 .., -> swizzled shared memory qs (column blocks
   of NH rows x 128 bytes), zero rows past h_q; t = this thread's index among the NT that load it.
   16-byte aligned rows take a loop of vector loads alone, which ptxas issues all before the first
   store; the element loads of unaligned rows have a loop of their own, so that they are not
   predicated off beside every vector load (x307). A thread's items are NT apart: item k + 1 lies
   DR rows and DC chunks past item k, one row more when the chunk carries, so the loop walks its
   row, chunk and address by adds where a division and a 64-bit product per item took more of the
   prologue's code (x313). PACED (the warp-specialized kernels' one-split calls, whose rows
   ak_sd_prefetch_q brought to L2): each load makes its own L2 policy, which ptxas does not
   predicate, so that each sits behind a branch of its own and they issue paced, as those calls
   gain from while the split calls, whose Q comes from DRAM, want them at once (x309, x312). */
template <int DQK, int NH, int NT, bool PACED = false>
__device__ __forceinline__ void ak_sdw_load_q(const ak_sd_params &p, uint8_t *qs, int64_t r, int64_t i, int h0,
                                              int t) {
    enum { QCH = DQK / 8, QN = NH * QCH / NT, DR = NT / QCH, DC = NT % QCH };
    static_assert(NH * QCH % NT == 0, "the Q tile's chunks split evenly over the threads");
    const uint16_t *qb = p.q + r * p.q_s0 + i * p.q_s1;
    if (!p.q_vec) { /* rows off the 16-byte grid: element loads, one item at a time */
        for (int k = 0; k < QN; k++) {
            const int it = k * NT + t, row = it / QCH, c = it % QCH;
            const uint4 v = h0 + row < p.h_q ? ak_sd_ldq8_elem(qb + (int64_t)(h0 + row) * p.q_s2 + c * 8)
                                             : make_uint4(0, 0, 0, 0);
            *reinterpret_cast<uint4 *>(qs + ak_sdx_off<NH>(row, c * 8)) = v;
        }
        return;
    }
    int row = t / QCH, c = t % QCH;
    const uint16_t *src = qb + (int64_t)(h0 + row) * p.q_s2 + c * 8;
    const int64_t step = DR * p.q_s2 + DC * 8, carry = p.q_s2 - QCH * 8;
    uint4 qv[QN];
    uint32_t off[QN];
#pragma unroll
    for (int k = 0; k < QN; k++) {
        qv[k] = make_uint4(0, 0, 0, 0);
        if (h0 + row < p.h_q) qv[k] = PACED ? ak_ldg_nc_v4_pol(src, ak_l2_policy(false)) : ak_ldg_nc_v4(src);
        off[k] = ak_sdx_off<NH>(row, c * 8);
        row += DR, c += DC, src += step;
        if (DC != 0 && c >= QCH) c -= QCH, row++, src += carry;
    }
#pragma unroll
    for (int k = 0; k < QN; k++) *reinterpret_cast<uint4 *>(qs + off[k]) = qv[k];
}

/* Writes the output rows of warpgroup wg's 256 dims (ak_sd_write_out_row; one split). */
__device__ __forceinline__ void ak_sdw_write_rows(const ak_sd_params &p, const float *o, const float *m_run,
                                                  const float *l_run, float vs, int64_t r, int64_t i, int h0, int wg,
                                                  int wr, int g, int c4) {
#pragma unroll
    for (int hr = 0; hr < 2; hr++) {
        const int h = h0 + 16 * wr + g + hr * 8;
        float lse;
        const float f = ak_sd_row_scale(false, m_run[hr], l_run[hr], ak_sd_sink(p, false, h), vs, lse);
        ak_sd_write_out_row<32>(p, o, hr, r, i, h, f, lse, wg * 256, c4, wg == 0 && c4 == 0);
    }
}

/* Writes this split's partial rows of warpgroup wg's 256 dims (ak_sd_write_part_row), all 256
   threads finding the fp16 scale of the CTA's largest |O| first (red: 8 free words of shared
   memory). */
__device__ __forceinline__ void ak_sdw_write_part_rows(const ak_sd_params &p, const float *o, const float *m_run,
                                                       const float *l_run, int64_t r, int64_t i, int h0, int pslot,
                                                       int wg, int wr, int g, int c4, uint32_t *red) {
    float am = 0.0f;
#pragma unroll
    for (int hr = 0; hr < 2; hr++)
        if (h0 + 16 * wr + g + hr * 8 < p.h_q) am = ak_sd_amax_add(am, ak_sd_frag_amax<32>(o, hr));
    float inv;
    const float sc = ak_sd_part_scale(am, red, 8, 1, inv);
#pragma unroll
    for (int hr = 0; hr < 2; hr++) {
        const int h = h0 + 16 * wr + g + hr * 8;
        float lse;
        const float f = ak_sd_row_scale(true, m_run[hr], l_run[hr], -INFINITY, 1.0f, lse);
        ak_sd_write_part_row<32>(p, o, hr, r, i, h, pslot, f, lse, sc, inv, wg * 256, c4, wg == 0 && c4 == 0);
    }
}

/* A 64-head tile's rows through shared memory (ak_sdx_main always, ak_sdw_main for its final rows:
   their 256 consumer threads hold O as two 64 x 256 D fragments, warpgroup wg owning dims 256 wg
   ..). Each thread stages its fragment at xs (the Q and K buffers, free once every product has
   completed: the caller's barrier), rows padded so that a fragment store takes the fewest
   wavefronts, and the rows' lse at lse_s; then all 256 threads store the rows 16 bytes at a time
   (x204; one bulk copy per row before): with splits the partial row (fp16 at the CTA's scale,
   whose maximum goes through red, 8 words of shared memory, and mbarrier epi of 256 arrivals:
   racecheck reported that hand-off across a 256-thread named barrier in the V4 kernel, as in
   ak_sdr_main), with one split the output row (bf16 or f32), where p.out_bulk says every output
   row is 16-byte aligned; scale and lse as ak_sd_row_scale says, the same output bits as
   ak_sdw_write_rows. The fragments' 4- and 8-byte stores straight to global memory took ~5 us of
   the tail at b 8 h_q 128 (x49) and ~13% of the 64-head kernel's samples at 640 keys per row
   (x52). */
#define AK_SDX_XSTR (AK_SD_DV + 8) /* floats per staged f32 row */
#define AK_SDX_HSTR (AK_SD_DV + 8) /* 16-bit values per staged bf16 or fp16 row */
template <bool PART = false> /* PART: the caller has partial rows only, the output stores are not built (x316) */
__device__ __forceinline__ void ak_sdw_write_staged(const ak_sd_params &p, uint8_t *xs, float *lse_s, uint32_t *red,
                                                    const float *sink_s, uint32_t epi, const float *o,
                                                    const float *m_run, const float *l_run, float vs, int64_t r,
                                                    int64_t i, int h0, int pslot, int wg, int wr, int g, int c4,
                                                    int ctid) {
    const bool part = PART || pslot >= 0, f32 = !part && p.out_f32;
    ak_fence_proxy_async(); /* the staging area was last read by wgmma and written by bulk copies */
    float f[2], am = 0.0f;
#pragma unroll
    for (int hr = 0; hr < 2; hr++) {
        const int row = 16 * wr + g + 8 * hr;
        float lse;
        const float sk = sink_s != NULL && !part ? sink_s[row] : ak_sd_sink(p, part, h0 + row);
        f[hr] = ak_sd_row_scale(part, m_run[hr], l_run[hr], sk, vs, lse);
        if (wg == 0 && c4 == 0) lse_s[row] = lse;
        if (part && h0 + row < p.h_q) am = ak_sd_amax_add(am, ak_sd_frag_amax<32>(o, hr) * fabsf(f[hr]));
    }
    float sc = 1.0f, inv = 1.0f;
    if (part) {
        ak_sd_part_put(am, red, 8);
        ak_mbar_arrive(epi);
        ak_mbar_wait(epi, 0);
        sc = ak_sd_part_get(red, 8, inv);
    }
#pragma unroll
    for (int hr = 0; hr < 2; hr++) {
        const int row = 16 * wr + g + 8 * hr;
        float *dst32 = reinterpret_cast<float *>(xs) + row * AK_SDX_XSTR + wg * 256 + 2 * c4;
        uint16_t *dst16 = reinterpret_cast<uint16_t *>(xs) + row * AK_SDX_HSTR + wg * 256 + 2 * c4;
        if (f32) {
#pragma unroll
            for (int j = 0; j < 32; j++)
                *reinterpret_cast<float2 *>(dst32 + 8 * j) =
                    make_float2(o[4 * j + 2 * hr] * f[hr], o[4 * j + 2 * hr + 1] * f[hr]);
        } else if (part) {
#pragma unroll
            for (int j = 0; j < 32; j++)
                *reinterpret_cast<uint32_t *>(dst16 + 8 * j) =
                    ak_sd_pack_f16(o[4 * j + 2 * hr] * f[hr] * sc, o[4 * j + 2 * hr + 1] * f[hr] * sc);
        } else {
#pragma unroll
            for (int j = 0; j < 32; j++)
                *reinterpret_cast<uint32_t *>(dst16 + 8 * j) =
                    ak_sd_pack_bf16(o[4 * j + 2 * hr] * f[hr], o[4 * j + 2 * hr + 1] * f[hr]);
        }
    }
    /* staged rows -> every thread's loads: in ak_sdx_main through epi (its next phase), since
       racecheck reported this hand-off across named barrier 1 of the 256 consumer threads there (a
       read of one thread against the staging writes of another); ak_sdw_main's 256 threads are the
       whole CTA */
    if (epi != 0) {
        ak_mbar_arrive(epi);
        ak_mbar_wait(epi, part ? 1 : 0);
    } else {
        __syncthreads();
    }
    /* rows out by all 256 threads, 16 bytes per store, four loads before their stores (x204: a bulk
       copy per row before, whose issue waited behind the CTA's other 63, session 29) */
    if (ctid < AK_SDW_HEADS && h0 + ctid < p.h_q) {
        const int h = h0 + ctid;
        if (part) p.lacc[ak_sd_part_row(p, pslot, h)] = make_float2(lse_s[ctid], inv);
        else if (p.lse != NULL) p.lse[r * p.l_s0 + i * p.l_s1 + h * p.l_s2] = lse_s[ctid];
    }
    const int lg = f32 ? 7 : 6;                                     /* log2 of the 16-byte chunks per row */
    const int rs = f32 ? AK_SDX_XSTR * 4 : AK_SDX_HSTR * 2;         /* staged row stride, bytes */
    for (int k0 = ctid; k0 < (AK_SDW_HEADS << lg); k0 += 4 * 256) {
        uint4 v[4];
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const int it = k0 + 256 * k;
            v[k] = *reinterpret_cast<const uint4 *>(xs + (it >> lg) * rs + (it & ((1 << lg) - 1)) * 16);
        }
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const int it = k0 + 256 * k, h = h0 + (it >> lg), c = it & ((1 << lg) - 1);
            if (h >= p.h_q) continue;
            uint8_t *dst = part ? reinterpret_cast<uint8_t *>(p.oacc + ak_sd_part_row(p, pslot, h) * AK_SD_DV)
                           : f32 ? reinterpret_cast<uint8_t *>((float *)p.out + r * p.o_s0 + i * p.o_s1 + h * p.o_s2)
                                 : reinterpret_cast<uint8_t *>((uint16_t *)p.out + r * p.o_s0 + i * p.o_s1 + h * p.o_s2);
            *reinterpret_cast<uint4 *>(dst + c * 16) = v[k];
        }
    }
}

template <int LAYOUT, int ORD>
__global__ void __launch_bounds__(AK_SDW_THREADS, 1) ak_sdw_main(const ak_sd_params p) {
    static_assert(LAYOUT == AK_LAYOUT_MLA_BF16, "the fp8 layouts run on ak_sdx_main and ak_sdt_main");
    static_assert(AK_SDW_HEADS * AK_SDX_XSTR * 4 <= ak_sdw_smem_map<LAYOUT>::VALID, "staged rows fit in Q and K");
    typedef ak_sd_geo<LAYOUT> G;
    enum { DQK = G::DQK, KB = DQK / 64, KSTEPS = DQK / 16 };
    extern __shared__ __align__(16) uint8_t smem_raw[];
    /* 1024-byte aligned for the 128-byte swizzle; offsetting the __shared__ array itself (not an
       integer-cast address) keeps every access a shared-memory one (LDS/STS, not generic LD/ST) */
    uint8_t *smem = smem_raw + ((1024u - (ak_smem_addr(smem_raw) & 1023u)) & 1023u);
    typedef ak_sdw_smem_map<LAYOUT> M;
    uint8_t *qs = smem + M::Q, *valid = smem + M::VALID;

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wg = warp >> 2, wr = warp & 3; /* warpgroup, warp within it (rows 16 wr..) */
    const int g = lane >> 2, c4 = lane & 3;
    const int tok = tid >> 2, q4 = tid & 3; /* loader map: a quarter of key tok's record */
    int h0, t_begin, t_end, pslot;
    int64_t ri;
    ak_sdw_cta(p, AK_SDW_HEADS, h0, ri, t_begin, t_end, pslot);
    int64_t r, i;
    ak_sd_row_of(p, (uint32_t)ri, r, i);
    if (!ak_sd_take_early<ORD>(p, r, i, t_begin, t_end, pslot)) return;
    ak_sd_prefetch_q<AK_SDW_HEADS, ak_sd_geo<LAYOUT>::DQK>(p, r, i, h0, tid);
    ak_grid_dep_wait(); /* as in ak_sd_main: only parameters above */
    if (!ak_sd_take_late<ORD>(p, r, i, t_begin, t_end, pslot)) return;
    const int32_t len0 = ak_sd_len(p.list[0], r, i), len1 = ak_sd_len(p.list[1], r, i);
    /* Tiles t (in K buffer kb), tn (its record offset in xro) and tnn (its raw slot id for key
       `tok` in sraw) of the pipeline. */
    int t = ak_sdw_next(p, t_begin, t_end, len0, len1);
    int tn = t < t_end ? ak_sdw_next(p, t + 1, t_end, len0, len1) : t_end;
    int tnn = tn < t_end ? ak_sdw_next(p, tn + 1, t_end, len0, len1) : t_end;
    int64_t xro = -1;
    int32_t sraw = -1;
    bool sok = false;
    int kb = 0;

    /* Prologue: tile t's record offsets, then the Q tile, then t's copy into K buffer 0 and tile
       tn's offsets. */
    if (t < t_end) {
        int64_t so;
        bool ok;
        const int32_t slot = ak_sdw_slot(p, r, i, t, tok, len0, len1, ok);
        ak_sdw_locate<LAYOUT>(p.list[t >= p.list[0].tiles], ok ? slot : -1, xro, so);
        sraw = ak_sdw_slot(p, r, i, tn < t_end ? tn : t, tok, len0, len1, ok);
        sok = ok && tn < t_end;
    }

    ak_sdw_load_q<DQK, AK_SDW_HEADS, 256>(p, qs, r, i, h0, tid);
    if (t < t_end) {
        ak_sdw_stage(p, r, i, len0, len1, t, tn, tnn, t, t_end, tok, q4, smem + M::K, valid, xro, sraw, sok);
        ak_cp_async_wait_all();
    }
    ak_fence_proxy_async(); /* Q and K tile writes -> the wgmma (async proxy) reads */
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

    /* Pipeline, entering iteration t with S_t computed, tile tn on its way into K buffer kb ^ 1 by
       cp.async and tile tnn's record offsets located: softmax of S_t into P (bf16 registers); issue
       O += P V_t and wait for it (both warpgroups: its K buffer is free; issuing S_tn before it
       measured slower, the two warpgroups' products interleave in the tensor pipe and P V_t
       finishes late); issue S_tn = Q K_tn^T, start tile tnn's copies into buffer kb and locate
       tile tnnn's records while it runs. No wgmma is in flight across the loop's back edge (ptxas
       serializes them otherwise). */
    float s[32];
    int tnnn = tnn < t_end ? ak_sdw_next(p, tnn + 1, t_end, len0, len1) : t_end;
    if (t < t_end) {
        ak_sdw_qk<KSTEPS>(s, dq0, dk0);
        ak_sdw_stage(p, r, i, len0, len1, tn, tnn, tnnn, t, t_end, tok, q4, smem + M::K + KB * AK_SDW_TILE,
                     valid + AK_SD_KEYS, xro, sraw, sok);
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
        ak_cp_async_wait_all();
        ak_fence_proxy_async(); /* K tile tn (cp.async) -> wgmma reads */
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
        ak_sdw_stage(p, r, i, len0, len1, tnn, tnnn, t4, t, t_end, tok, q4, smem + M::K + kb * KB * AK_SDW_TILE,
                     valid + kb * AK_SD_KEYS, xro, sraw, sok);
        ak_wgmma_wait0();
#pragma unroll
        for (int j = 0; j < 128; j++) ak_reg_fence(o[j]);
        kb ^= 1;
        t = tn;
        tn = tnn;
        tnn = tnnn;
        tnnn = t4;
    }

    ak_grid_dep_launch(); /* the next kernel may start its CTAs during this epilogue */
    /* the static instance's slot made again here rather than kept through the loop (4 bytes of it
       spilled when this kernel also served V4), its branch on a parameter; ak_sd_split_slot's
       expression written out with the split unsigned, since its int split changes this kernel's
       code, unmeasured */
    if (ORD != AK_SD_ORD_BAL) pslot = p.splits > 1 ? (int)((blockIdx.x % p.splits) * ((int64_t)p.b * p.s_q) + r * p.s_q + i) : -1;
    const bool part = ORD == AK_SD_ORD_BAL ? pslot >= 0 : p.splits > 1;
    if (!part && p.out_bulk) { /* (partial rows by bulk copy: 0.8 us slower on this kernel's V4 b 8, x53) */
        __syncthreads(); /* both warpgroups' last products have read Q and the K tiles */
        ak_sdw_write_staged(p, smem + M::Q, reinterpret_cast<float *>(smem + M::LSE), NULL, NULL, 0, o, m_run, l_run,
                            1.0f, r, i, h0, pslot, wg, wr, g, c4, tid);
    } else if (!part) {
        ak_sdw_write_rows(p, o, m_run, l_run, 1.0f, r, i, h0, wg, wr, g, c4);
    } else { /* (the rows' lse area is free with splits) */
        ak_sdw_write_part_rows(p, o, m_run, l_run, r, i, h0, pslot, wg, wr, g, c4,
                               reinterpret_cast<uint32_t *>(smem + M::LSE));
    }
}

/* ---- warp-specialized kernel (656, per-tensor fp8, V4) ----------------------------------------
 *
 * Three warpgroups (384 threads). Warpgroup 0 produces: each of its four warps owns 8 keys of every
 * 32-key unit; its lanes 0..7 copy their key's record into the warp's ring of raw stages with one
 * bulk copy each (the copy engine moves the bytes and counts them on the stage's mbarrier, so no
 * copy sits in the warp's scoreboard), NST - 1 units ahead of the one being converted; the warp then
 * dequantizes its 8 keys into one of NBUF bf16 K buffers (32 keys, 128-byte swizzle) and arrives on
 * FULL (the proxy fence for those writes is the consumers', after their FULL wait: x274). It keeps
 * 120 registers, V4's 136 (at 104 a spilled slot id made every step wait for its
 * load; V4's converter beside three K buffers spills at 120). V4's
 * 8 scale bytes per key live in their own page region: each lane brings its key's with an 8-byte
 * cp.async that arrives on the stage's mbarrier (a second bulk copy per key, x52, or a register
 * load the proxy fence waited for, x51, made the producer the bound).
 * Warpgroups 1 (216 registers, V4 200) and 2 (the launch's 168) consume. Warpgroup 1 computes S = Q K^T for
 * the unit (m64n32k16) and the softmax, writes P (bf16) and the rows' rescale factors to shared
 * memory for warpgroup 2 (one named barrier per unit; two parities, so P of the next unit never
 * waits for warpgroup 2's reads), adds O[:, 0 .. 255] += P V
 * (m64n256k16, P from registers) and issues S of the next unit right behind it; warpgroup 2
 * rescales its O rows and adds O[:, 256 .. 511] += P V with P loaded from shared memory into the
 * same register fragments (ordinary loads, so no proxy fence on warpgroup 1's path). Both arrive on
 * EMPTY once their P V has read the buffer. So S is computed once per unit (as FlashMLA's Hopper
 * kernel does) and the conversion runs on its own warps beside the products instead of between
 * them. Units are the halves of the 64-key tiles of the split rule (same splits, same partial rows);
 * a unit wholly past its row's length is skipped by both sides, which walk the same sequence.
 *
 * Measured against ak_sdw_main (docs/perf.md, session 5): 8-9% faster on 656 at h_q 64 / 128 and
 * s_q 2; on V4 12-15% slower then, 12-13% faster with the cp.async scales (x60). Three K buffers (then;
 * V4 keeps three since x95), a ping-pong of the two
 * consumers at the tensor pipe, a seesaw (S alternating between the warpgroups) and S split over d_qk
 * did not beat the form with S in both warpgroups (shared memory, Q 72 KB, the K buffers and the
 * stages, leaves the producer no deeper lookahead); S in one warpgroup (run x28) did, by 9-19%.
 */
#define AK_SDX_THREADS 384
#define AK_SDX_UNIT 32 /* keys per unit and K buffer */

/* Shared-memory map (bytes from the 1024-aligned base); 201 KB for 656, 224 KB for V4. */
template <int LAYOUT> struct ak_sdx_map {
    enum {
        V4 = LAYOUT == AK_LAYOUT_DSV4_FP8_UE8M0,
        /* V4 (d_qk 512) has room for a third K buffer beside three stages: its producer gets a unit
           of slack (H100: V4-Pro -4..5%, s_q 2 -1..6%, run x95); at d_qk 576 a third buffer fits
           only with P in one parity and the row statistics in the stage region, and gained nothing
           for 656 (its producers bound the unit, x137) and lost 1.5% for per-tensor (x122) */
        NBUF = V4 ? 3 : 2, /* bf16 K buffers */
        /* registers after setmaxnreg, producers and consumer warpgroup 1 (with warpgroup 2's 168:
           3 x 168); V4's producer needs 136 beside three buffers (at 120 it spills) */
        PREG = V4 ? 136 : 120,
        CREG = 336 - PREG,
        DQK = ak_sd_geo<LAYOUT>::DQK,
        KB = DQK / 64,
        PT = LAYOUT == AK_LAYOUT_MLA_FP8_PERTENSOR,
        CPY = ak_sd_geo<LAYOUT>::REC, /* bytes of a key's bulk copy: the record (V4: its 576-byte row) */
        /* stage bytes per key. 656 and per-tensor pad the record to a multiple of 128 bytes: a
           quarter warp of ak_sdx_convert's loads reads chunks l .. l + 3 of one key and l + 4 ..
           l + 7 of the next, which fall on distinct 16-byte bank groups only then (at 656 or 576
           bytes each such load took two wavefronts instead of one, x222). V4's 576-byte rows are
           4 mod 8 groups apart, which suits ak_sdx_convert_v4's map; its 8 scale bytes per key
           have their own array (SCL) */
        STG = V4 ? CPY : (CPY + 127) & ~127,
        KT = AK_SDX_UNIT * 128,       /* one 64-dim column block of a K buffer */
        /* raw stages per producer warp (the copies run NST - 1 units ahead of the conversion): 656
           and per-tensor two (a third cost them 1-3% at every measured shape, x119), V4 three
           (with two, V4-Pro lost 1%) */
        NST = V4 ? 3 : 2,
        Q = 0,                              /* [KB][64 heads][128 B] bf16 swizzled */
        K = Q + KB * AK_SDW_TILE,           /* [NBUF][KB][32 keys][128 B] bf16 swizzled */
        PS = K + NBUF * KB * KT,            /* [2][2][128 threads][16 B] P fragments of units j % 2 (ak_sdx_pslot) */
        STAGE = PS + AK_SDW_TILE,           /* [4 warps][NST][8 keys][STG] raw records */
        SCL = STAGE + 4 * NST * 8 * STG,    /* V4: [4 warps][NST][8 keys][8 B] ue8m0 scale bytes */
        VALID = SCL + (V4 ? 4 * NST * 64 : 0), /* [NBUF] u32: bit k = key k of the unit is valid */
        ALPHA = VALID + NBUF * 4,           /* [2][64] f32 O rescale factor of units j % 2, per head */
        ML = ALPHA + 2 * 64 * 4,            /* [2][64] f32 final running max and row sum, per head */
        SINK = ML + 2 * 64 * 4,             /* V4: [64] f32 attention sink per head (ak_sd_sink) */
        BAR = (SINK + (V4 ? 64 * 4 : 0) + 7) & ~7, /* FULL[NBUF], EMPTY[NBUF], stage[4][NST], EPI mbarriers */
        EPI = 2 * NBUF + 4 * NST,           /* the epilogue's hand-off of the partial rows' scale */
        BYTES = BAR + (EPI + 1) * 8
    };
};

/* First unit >= u of [u, u_end) that starts before its row's length, else u_end. */
template <int GEN>
__device__ __forceinline__ int ak_sdx_next(const ak_sd_params &p, int u, int u_end, int32_t len0, int32_t len1) {
    for (; u < u_end; u++) {
        const int t = u >> 1, ex = ak_sd_extra<GEN>(p, t);
        const int base = (ex ? t - p.list[0].tiles : t) * AK_SD_KEYS + (u & 1) * AK_SDX_UNIT;
        if (base < (ex ? len1 : len0)) break;
    }
    return u;
}

/* A producer's view of token row (r, i)'s slot ids: where the row starts in each list, its last
   position and its length, taken once per CTA, so that a step's slot-id address is a select and
   an add (it was recomputed from the parameters in every step). An absent extra list (tiles 0) is
   never selected, and its row stays the main one's (no arithmetic on its NULL pointer). */
struct ak_sdx_rows {
    const int32_t *row[2];
    int32_t last[2], len[2], tiles0;
};

__device__ __forceinline__ ak_sdx_rows ak_sdx_rows_of(const ak_sd_params &p, int64_t r, int64_t i, int32_t len0,
                                                      int32_t len1) {
    ak_sdx_rows w;
    w.row[0] = p.list[0].idx + r * p.list[0].idx_s0 + i * p.list[0].idx_s1;
    w.row[1] = p.list[1].tiles > 0 ? p.list[1].idx + r * p.list[1].idx_s0 + i * p.list[1].idx_s1 : w.row[0];
    w.last[0] = p.list[0].topk - 1, w.last[1] = p.list[1].topk - 1;
    w.len[0] = len0, w.len[1] = len1, w.tiles0 = p.list[0].tiles;
    return w;
}

/* Where key k of unit u's index value is stored (past the list's top-k: its last entry); ok: the
   position is inside the length. The address needs no length. */
template <int GEN>
__device__ __forceinline__ const int32_t *ak_sdx_slot_at(const ak_sdx_rows &w, int u, int k, bool &ok) {
    const int t = u >> 1, ex = GEN && t >= w.tiles0;
    const int pos = (ex ? t - w.tiles0 : t) * AK_SD_KEYS + (u & 1) * AK_SDX_UNIT + k;
    ok = pos < (ex ? w.len[1] : w.len[0]);
    return (ex ? w.row[1] : w.row[0]) + min(pos, ex ? w.last[1] : w.last[0]);
}

/* Index value of key k of unit u as stored (checked at use); ok: the position is inside the length. */
template <int GEN> __device__ __forceinline__ int32_t ak_sdx_slot(const ak_sdx_rows &w, int u, int k, bool &ok) {
    return *ak_sdx_slot_at<GEN>(w, u, k, ok);
}

/* The index values of key k in the first N (2 or 3) units of a CTA's range [u_begin, u_end),
   loaded before the row's lengths are used: their addresses need none, so where topk_length is
   passed the first copies wait for one load (the later of the two) instead of the lengths' and
   then the ids'. */
struct ak_sdx_first {
    int u0, n;
    int32_t id0, id1, id2;
};

template <int N, int GEN>
__device__ __forceinline__ ak_sdx_first ak_sdx_first_of(const ak_sdx_rows &w, int u_begin, int u_end, int k) {
    ak_sdx_first f;
    bool ok;
    f.u0 = u_begin, f.n = min(N, u_end - u_begin);
    const int32_t *a0 = ak_sdx_slot_at<GEN>(w, u_begin, k, ok);
    const int32_t *a1 = ak_sdx_slot_at<GEN>(w, min(u_begin + 1, u_end - 1), k, ok);
    const int32_t *a2 = ak_sdx_slot_at<GEN>(w, min(u_begin + 2, u_end - 1), k, ok);
    f.id0 = *a0, f.id1 = *a1, f.id2 = N > 2 ? *a2 : 0;
    return f;
}

/* ak_sdx_slot, reusing an id of f where unit u is one of f's units (the usual case: a row's units
   are skipped only past its length). */
template <int GEN>
__device__ __forceinline__ int32_t ak_sdx_slot_first(const ak_sdx_rows &w, const ak_sdx_first &f, int u, int k,
                                                     bool &ok) {
    const int32_t *a = ak_sdx_slot_at<GEN>(w, u, k, ok);
    const int d = u - f.u0;
    if (d >= 0 && d < f.n) return d == 0 ? f.id0 : d == 1 ? f.id1 : f.id2;
    return *a;
}

/* Zero bytes in global memory, the source of an invalid key's record copy: 256 blocks of 1 KB, so
   that the invalid keys of a call (an engine's -1 padding of short requests' top-k lists can be most
   of them) spread their copies over L2's slices. Every copy from one 1 KB source took the whole
   call to one slice's rate: 20x slower with every key invalid (session 31). */
#define AK_SDX_ZBLK 256
static __device__ __align__(1024) const uint8_t ak_sdx_zero[AK_SDX_ZBLK * 1024] = {0};

/* Producer warp: lane k < KPW copies its key's record (slot `slot`; -1 or out of range: rule I1,
   never read) into the stage at `dst` (keys SST bytes apart) with one bulk copy completing on `sbar`;
   V4: and its 8 scale bytes (their own page region) by cp.async to `sdst` (keys 8 bytes apart), each
   such lane arriving on `sbar` when its copy has
   landed (no register waits on it, so the proxy fence does not either: x51). An invalid key copies
   zeros instead (ak_sdx_zero; V4's scale bytes by a zero-filling cp.async), so its conversion gives a
   zero K row with no per-key selects (x108). The record's lines get the L2 policy pol: evict first
   where no other CTA reads them or the call's records are a small part of L2 (p.rec_first,
   ak_sd_rec_first). Returns the warp's validity bits (bit k: key k). */
template <int LAYOUT, int GEN, int KPW, int SST>
__device__ __forceinline__ uint32_t ak_sdx_copy(const ak_sd_list &l, int32_t slot, int lane, uint32_t dst,
                                                uint32_t sdst, uint32_t sbar, uint64_t pol) {
    typedef ak_sdx_map<LAYOUT> M;
    static_assert(M::CPY <= 1024, "a zero block covers a record");
    int64_t ro = -1, so = -1;
    if (lane < KPW) ak_sdw_locate<LAYOUT, GEN>(l, slot, ro, so);
    const uint32_t vm = __ballot_sync(0xffffffffu, ro >= 0);
    if (lane == 0) ak_mbar_arrive_tx(sbar, KPW * M::CPY);
    if (lane < KPW)
        ak_bulk_g2s_hint(dst + (uint32_t)(lane * SST),
                         ro >= 0 ? l.pool + ro : ak_sdx_zero + (((threadIdx.x >> 5) * 8u + lane + 32u * blockIdx.x) % AK_SDX_ZBLK) * 1024,
                         M::CPY, sbar, pol);
    if (M::V4 && lane < KPW) {
        ak_cp_async8(sdst + (uint32_t)(lane * 8), ro >= 0 ? l.pool + so : ak_sdx_zero, ro >= 0 ? 8u : 0u);
        ak_cp_async_mbar_arrive(sbar);
    }
    return vm;
}

/* ak_sdx_convert for V4 (eight keys per warp): the 448 NoPE dims are 28 fp8 chunks of 16, seven
   64-dim scale tiles of four chunks, so the warp's 8 keys x 7 tiles are 56 four-chunk pieces: seven
   steps of all 32 lanes (ak_sdx_convert's map takes eight steps with lanes 28..31 idle here: 3-5%
   slower, run x89). In step i lanes 4 k .. 4 k + 3 convert tile (i + k / 2) % 7 of key k, one chunk
   each. A quarter warp (keys k and k + 1, k even, the same tile) then loads from distinct 16-byte
   bank groups, as the 576-byte rows are 4 groups apart (with the tile (i + k) % 7 of x222's base, the
   next key's tile is 4 groups further: two wavefronts per load), and stores to distinct ones, as the
   swizzle XORs the chunk position with the row. The 64 RoPE dims (bf16 at byte 448) are copied. An
   invalid key's stage bytes are zeros (ak_sdx_copy), so its row becomes zero. */
template <int BR>
__device__ __forceinline__ void ak_sdx_convert_v4(const uint8_t *stg, const uint8_t *scl, uint8_t *kb, int n0, int lane) {
    typedef ak_sdx_map<AK_LAYOUT_DSV4_FP8_UE8M0> M;
    const int k = lane >> 2, q = lane & 3, k2 = k >> 1;
    const uint8_t *rec = stg + k * M::STG;
    const uint2 sc = *reinterpret_cast<const uint2 *>(scl + 8 * k); /* the key's ue8m0 bytes, tile t in byte t */
    uint4 f[7], rp[2];
#pragma unroll
    for (int i = 0; i < 7; i++) {
        const int t = i + k2 >= 7 ? i + k2 - 7 : i + k2;
        f[i] = *reinterpret_cast<const uint4 *>(rec + 16 * (4 * t + q));
    }
    const int rk0 = lane >> 3;
#pragma unroll
    for (int g = 0; g < 2; g++)
        rp[g] = *reinterpret_cast<const uint4 *>(stg + (4 * g + rk0) * M::STG + 448 + 16 * (lane & 7));
#pragma unroll
    for (int i = 0; i < 7; i++) {
        const int t = i + k2 >= 7 ? i + k2 - 7 : i + k2;
        const float s = ak_ue8m0_to_f32((uint8_t)__byte_perm(sc.x, sc.y, (unsigned)t));
        uint4 lo, hi;
        ak_sd_dequant16(f[i], s, lo, hi);
        const int d = 64 * t + 16 * q;
        *reinterpret_cast<uint4 *>(kb + ak_sdx_off<BR>(n0 + k, d)) = lo;
        *reinterpret_cast<uint4 *>(kb + ak_sdx_off<BR>(n0 + k, d + 8)) = hi;
    }
#pragma unroll
    for (int g = 0; g < 2; g++)
        *reinterpret_cast<uint4 *>(kb + ak_sdx_off<BR>(n0 + 4 * g + rk0, 448 + (lane & 7) * 8)) = rp[g];
}

/* Producer warp: its KPW (8 or 4) staged records -> rows n0 .. n0 + KPW - 1 of K buffer kb
   (layouts.md 4); 656 and per-tensor fp8 here, V4 in ak_sdx_convert_v4. An invalid key's stage
   bytes are zeros (ak_sdx_copy), so its row becomes zero. In step i lane l converts fp8 chunk l
   (16 dims; with unpadded stages another of its quarter's eight) of key (i + l / 4) % KPW, so a
   quarter warp's 16-byte stores go to two rows of opposite parity and hit distinct bank groups (one
   row per quarter put two lanes on each group, as KPW 4 did with (i + l / 8) % KPW until x222),
   and its loads, from two keys SST bytes apart, do too: SST is a multiple of 128 (ak_sdx_map pads
   it, ak_sdt_map at 16 heads), or the chunks rotate with the key (ak_sdx_lanes_of); every shared
   load is issued before the first conversion. The 64 RoPE dims are copied (656: bf16) or
   converted (per-tensor: fp8). Per-tensor keys become bf16(q), exact (the consumers apply
   k_scale: ak_sd_kscale). The lane's byte offsets into the stage and the buffer are the same in
   every step, so the producer computes them once (ak_sdx_lanes_of) and a step adds only its
   stage's and buffer's base. */
template <int KPW> struct ak_sdx_lanes {
    uint32_t f[KPW];  /* stage: chunk `lane` of the key of step i */
    uint32_t s[KPW];  /* stage: that chunk's block scale (656) */
    uint32_t lo[KPW]; /* buffer: its first 8 dims */
    uint32_t hi[KPW]; /* buffer: the next 8 (the swizzle's neighbour: lo ^ 16) */
    uint32_t rf[2];   /* stage: the lane's RoPE pieces (656: KPW / 4 of them; per-tensor: one) */
    uint32_t rk[2];   /* buffer: where they go (per-tensor's second 8 dims: rk[0] ^ 16) */
};

/* The offsets for a warp whose stages start st0 bytes into the stage region and whose rows are
   n0 .. n0 + KPW - 1 of a buffer (n0 a multiple of KPW; a step's buffer base may add a multiple of
   8 rows, which keeps the swizzle's phase). */
template <int LAYOUT, int BR, int KPW, int SST>
__device__ __forceinline__ ak_sdx_lanes<KPW> ak_sdx_lanes_of(uint32_t st0, int n0, int lane) {
    typedef ak_sdx_map<LAYOUT> M;
    /* an unpadded stage (SST not a multiple of 128: the swap-AB kernel's 32-head map) puts key k's
       chunk c on 16-byte bank group (SKEW k + c) % 8, so lane j of a quarter warp takes chunk
       (j - SKEW k) % 8 of its eight: its loads hit group j, still conflict-free (x329), and the
       stores stay on distinct groups (two rows of opposite parity per quarter) */
    enum { SKEW = (SST / 16) & 7 };
    ak_sdx_lanes<KPW> m;
#pragma unroll
    for (int i = 0; i < KPW; i++) {
        const int k = (i + (lane >> 2)) & (KPW - 1);
        const int c = SKEW ? (lane & ~7) | ((lane - SKEW * k) & 7) : lane; /* its chunk */
        m.f[i] = st0 + (uint32_t)(k * SST + 16 * c);
        m.s[i] = st0 + (uint32_t)(k * SST + 512 + 4 * (lane >> 3));
        m.lo[i] = ak_sdx_off<BR>(n0 + k, c * 16);
        m.hi[i] = ak_sdx_off<BR>(n0 + k, c * 16 + 8);
    }
    const int rk0 = M::PT ? lane >> 2 : lane >> 3; /* RoPE keys of this lane: rk0 (+ 4) */
#pragma unroll
    for (int g = 0; g < 2; g++) {
        m.rf[g] = st0 + (M::PT ? (uint32_t)(rk0 * SST + 512 + 16 * (lane & 3))
                               : (uint32_t)((4 * g + rk0) * SST + 528 + 16 * (lane & 7)));
        m.rk[g] = M::PT ? ak_sdx_off<BR>(n0 + rk0, 512 + 16 * (lane & 3))
                        : ak_sdx_off<BR>(n0 + 4 * g + rk0, 512 + (lane & 7) * 8);
    }
    return m;
}

/* stg: the shared address of the step's stage region (the warp's own stage at m's offsets); kb:
   that of the buffer rows' base. */
template <int LAYOUT, int KPW>
__device__ __forceinline__ void ak_sdx_convert(uint32_t stg, uint32_t kb, const ak_sdx_lanes<KPW> &m, int lane) {
    typedef ak_sdx_map<LAYOUT> M;
    uint4 f[KPW], rp[2];
    uint32_t sc[KPW];
#pragma unroll
    for (int i = 0; i < KPW; i++) {
        f[i] = ak_lds128(stg + m.f[i]);
        sc[i] = M::PT ? 0u : ak_lds32(stg + m.s[i]);
    }
    const bool rlane = !M::PT || KPW == 8 || lane < 16; /* per-tensor at 4 keys: lanes 0..15 */
    if (M::PT) {
        if (rlane) rp[0] = ak_lds128(stg + m.rf[0]);
    } else {
#pragma unroll
        for (int g = 0; g < KPW / 4; g++) rp[g] = ak_lds128(stg + m.rf[g]);
    }
#pragma unroll
    for (int i = 0; i < KPW; i++) {
        uint4 lo, hi;
        ak_sd_dequant16(f[i], M::PT ? 1.0f : __uint_as_float(sc[i]), lo, hi);
        ak_sts128(kb + m.lo[i], lo);
        ak_sts128(kb + m.hi[i], hi);
    }
    if (M::PT && rlane) {
        uint4 lo, hi;
        ak_sd_dequant16(rp[0], 1.0f, lo, hi);
        ak_sts128(kb + m.rk[0], lo);
        ak_sts128(kb + (m.rk[0] ^ 16u), hi);
    } else if (!M::PT) {
#pragma unroll
        for (int g = 0; g < KPW / 4; g++) ak_sts128(kb + m.rk[g], rp[g]);
    }
}

/* Where a consumer thread's P A fragment words of unit j sit in the P buffer ps: [2 parities j % 2]
   [2 k16 steps kk][128 threads][4 words], so that consumer warpgroup 1's thread ct stores words
   4 kk .. 4 kk + 3 with one 16-byte store and warpgroup 2's thread of the same fragment position
   (ct = its index in its warpgroup) loads them with one 16-byte load: consecutive threads,
   consecutive 16 bytes, no bank conflict and no per-unit address arithmetic. */
__device__ __forceinline__ uint4 *ak_sdx_pslot(uint8_t *ps, int j, int kk, int ct) {
    return reinterpret_cast<uint4 *>(ps + (j & 1) * 4096 + kk * 2048) + ct;
}

/* O rows 16 wr + g (factor a0) and + 8 (a1) of a 64 x 256 D fragment times their rescale factors. */
__device__ __forceinline__ void ak_sdx_rescale(float *o, float a0, float a1) {
#pragma unroll
    for (int j = 0; j < 32; j++) {
        o[4 * j] *= a0;
        o[4 * j + 1] *= a0;
        o[4 * j + 2] *= a1;
        o[4 * j + 3] *= a1;
    }
}

/* Online softmax of one unit's wgmma S fragment (ak_sdx_main: 4 n8 blocks; rows 16 wr + g (hr 0)
   and + 8 (hr 1); s[4 n + 2 hr + e] is key 8 n + 2 c4 + e, valid iff bit 8 n + 2 c4 + e of the
   unit's mask kv), in log2 units (S times sl; P times prel before its rounding: ak_sd_kscale):
   updates the running max and sum, rescales this warpgroup's O
   accumulators (the 64 x 256 D fragment) and writes P rounded to bf16 as the A fragments of the two
   k16 steps of P V (the D fragment of keys 16 kk .. 16 kk + 15 is the A fragment of step kk), and
   the factor alpha[hr] its O rows were rescaled by (1 when kept). Consumer warpgroup 1 runs it and
   hands P and alpha to consumer warpgroup 2 through shared memory. Lazy rescaling as in
   ak_sdw_main. (ak_sdw_main keeps its own copy over 64 keys and byte flags: routed through this
   helper, its V4 instance of the time lost 3-4% to a different register allocation.) A mask word
   read once per unit measured 1.5-3.5% faster here than a byte per key. */
__device__ __forceinline__ void ak_sdx_softmax(float sl, float prel, float *s, uint32_t kv, int c4, float *m_run,
                                               float *l_run, uint32_t *pa, float *o, float *alpha) {
    /* key 8 n + 2 c4 + e of the unit is bit 8 n + e of kb: one test against a constant per value */
    const uint32_t kb = kv >> (2 * c4);
    float mx[2];
#pragma unroll
    for (int hr = 0; hr < 2; hr++) {
#pragma unroll
        for (int n = 0; n < 4; n++) {
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const float x = s[4 * n + 2 * hr + e] * sl;
                s[4 * n + 2 * hr + e] = kb & (1u << (8 * n + e)) ? x : -INFINITY;
            }
        }
        const float *v = s + 2 * hr; /* v[4 n + e]: this row's values */
        /* a tree: three dependent steps instead of eight (max is exact in any order) */
        mx[hr] = fmaxf(fmaxf(fmaxf(v[0], v[1]), fmaxf(v[4], v[5])), fmaxf(fmaxf(v[8], v[9]), fmaxf(v[12], v[13])));
    }
    /* Whether every value of the warp stays within 8 of its row's running max, decided on this
       thread's row maxima (a NaN value, which fmaxf passes over, makes P and so the row NaN on
       either path). The row max's shuffles run only when a row's max moves (the first units), off
       the common path. */
    const bool keep = __all_sync(0xffffffffu, mx[0] <= m_run[0] + 8.0f && mx[1] <= m_run[1] + 8.0f);
    if (!keep) {
#pragma unroll
        for (int hr = 0; hr < 2; hr++) {
            mx[hr] = fmaxf(mx[hr], __shfl_xor_sync(0xffffffffu, mx[hr], 1));
            mx[hr] = fmaxf(mx[hr], __shfl_xor_sync(0xffffffffu, mx[hr], 2));
        }
    }
#pragma unroll
    for (int hr = 0; hr < 2; hr++) {
        const float m_new = keep ? m_run[hr] : fmaxf(m_run[hr], mx[hr]);
        const float m_use = m_new == -INFINITY ? 0.0f : m_new;
        alpha[hr] = keep ? 1.0f : ak_ex2(m_run[hr] - m_use);
        float v[8];
#pragma unroll
        for (int n = 0; n < 4; n++) {
#pragma unroll
            for (int e = 0; e < 2; e++) {
                v[2 * n + e] = ak_ex2(s[4 * n + 2 * hr + e] - m_use);
                s[4 * n + 2 * hr + e] = v[2 * n + e];
            }
        }
        float sum = ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7])); /* pairwise, as the max */
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        sum += __shfl_xor_sync(0xffffffffu, sum, 2);
        l_run[hr] = l_run[hr] * alpha[hr] + sum;
        m_run[hr] = m_new;
    }
#pragma unroll
    for (int kk = 0; kk < 2; kk++) {
        pa[4 * kk + 0] = ak_sd_pack_bf16(s[8 * kk + 0] * prel, s[8 * kk + 1] * prel);
        pa[4 * kk + 1] = ak_sd_pack_bf16(s[8 * kk + 2] * prel, s[8 * kk + 3] * prel);
        pa[4 * kk + 2] = ak_sd_pack_bf16(s[8 * kk + 4] * prel, s[8 * kk + 5] * prel);
        pa[4 * kk + 3] = ak_sd_pack_bf16(s[8 * kk + 6] * prel, s[8 * kk + 7] * prel);
    }
    if (!keep) ak_sdx_rescale(o, alpha[0], alpha[1]);
}

template <int KSTEPS>
__device__ __forceinline__ void ak_sdx_qk(float *s, uint64_t dq0, uint64_t dk0) {
    ak_wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < KSTEPS; kk++) {
        const uint32_t qo = (kk >> 2) * AK_SDW_TILE + (kk & 3) * 32;
        const uint32_t ko = (kk >> 2) * (AK_SDX_UNIT * 128) + (kk & 3) * 32;
        ak_wgmma_m64n32k16_ss<0>(s, ak_wgmma_desc_add(dq0, qo >> 4), ak_wgmma_desc_add(dk0, ko >> 4), kk > 0);
    }
    ak_wgmma_commit();
}

template <int LAYOUT, int GEN>
__device__ __forceinline__ void ak_sdx_produce(const ak_sd_params &p, uint8_t *smem, int64_t r, int64_t i,
                                               int32_t len0, int32_t len1, int u_begin, int u_end) {
    typedef ak_sdx_map<LAYOUT> M;
    enum { NBUF = M::NBUF, NST = M::NST, KPW = 8 };
    const int w = (int)threadIdx.x >> 5, lane = (int)threadIdx.x & 31;
    const uint32_t bar = ak_smem_addr(smem + M::BAR);
    const uint32_t sbar = bar + 8 * (2 * NBUF + w * NST); /* this warp's stage barriers */
    const uint32_t stage = ak_smem_addr(smem + M::STAGE) + (uint32_t)(w * NST * 8 * M::STG);
    const uint8_t *stage_p = smem + M::STAGE + w * NST * 8 * M::STG;
    const uint32_t scl = ak_smem_addr(smem + M::SCL) + (uint32_t)(w * NST * 64); /* V4: this warp's scale stages */
    const uint8_t *scl_p = smem + M::SCL + w * NST * 64;
    const int key = 8 * w + (lane & 7); /* lanes 8.. mirror lanes 0..7 (their slot ids are unused) */
    if (u_begin >= u_end) return;
    /* shared addresses: the stage and K regions (uniform), the lane's offsets in them */
    const uint32_t stg0 = ak_smem_addr(smem + M::STAGE), kb0 = ak_smem_addr(smem + M::K);
    const ak_sdx_lanes<KPW> lanes =
        ak_sdx_lanes_of<LAYOUT, AK_SDX_UNIT, KPW, M::STG>((uint32_t)(w * NST * 8 * M::STG), 8 * w, lane);
    /* the slot ids of the first NST units are loaded together, before any copy (the copies'
       asm orders memory, so a load after one waits a round trip of its own) and before the
       lengths are used (ak_sdx_first): the first FULL then waits one index round trip and one
       record round trip */
    const ak_sdx_rows rw = ak_sdx_rows_of(p, r, i, len0, len1);
    const ak_sdx_first f = ak_sdx_first_of<NST, GEN>(rw, u_begin, u_end, key);
    /* Units a (being converted), b (NST 3: copies in flight; NST 2: slot ids in cslot), c (NST 3:
       slot ids in cslot); va, vb: validity bits. Unit j + NST - 1's copies are issued in step j. */
    int ua = ak_sdx_next<GEN>(p, u_begin, u_end, len0, len1);
    if (ua >= u_end) return;
    int ub = ak_sdx_next<GEN>(p, ua + 1, u_end, len0, len1);
    int uc = NST == 3 && ub < u_end ? ak_sdx_next<GEN>(p, ub + 1, u_end, len0, len1) : u_end;
    uint32_t va, vb = 0u;
    const int u_slot = NST == 3 ? uc : ub; /* the unit whose slot ids cslot holds */
    bool oka, okb = false, cok = false;
    const int32_t sla = ak_sdx_slot_first<GEN>(rw, f, ua, key, oka);
    const int32_t slb = ak_sdx_slot_first<GEN>(rw, f, NST == 3 && ub < u_end ? ub : ua, key, okb);
    int32_t cslot = ak_sdx_slot_first<GEN>(rw, f, u_slot < u_end ? u_slot : ua, key, cok);
    cok = cok && u_slot < u_end;
    const uint64_t pol = ak_l2_policy(p.rec_first != 0);
    va = ak_sdx_copy<LAYOUT, GEN, KPW, M::STG>(p.list[ak_sd_extra<GEN>(p, ua >> 1)], oka ? sla : -1, lane, stage, scl,
                                               sbar, pol);
    if (NST == 3 && ub < u_end)
        vb = ak_sdx_copy<LAYOUT, GEN, KPW, M::STG>(p.list[ak_sd_extra<GEN>(p, ub >> 1)], okb ? slb : -1, lane,
                                                   stage + 8 * M::STG, scl + 64, sbar + 8, pol);
    for (int j = 0; ua < u_end; j++) {
        /* the copies of unit j + NST - 1 into the stage freed by step j - 1, then the raw slot ids
           of the unit after it */
        const int un = NST == 3 ? uc : ub;
        uint32_t vn = 0u;
        if (un < u_end) {
            const int st = (j + NST - 1) % NST;
            vn = ak_sdx_copy<LAYOUT, GEN, KPW, M::STG>(p.list[ak_sd_extra<GEN>(p, un >> 1)], cok ? cslot : -1, lane,
                                                       stage + (uint32_t)(st * 8 * M::STG), scl + (uint32_t)(64 * st),
                                                       sbar + 8 * st, pol);
        }
        const int ud = un < u_end ? ak_sdx_next<GEN>(p, un + 1, u_end, len0, len1) : u_end;
        cslot = ak_sdx_slot<GEN>(rw, ud < u_end ? ud : ua, key, cok);
        cok = cok && ud < u_end;
        ak_mbar_wait(sbar + 8 * (j % NST), (j / NST) & 1); /* unit a's records landed */
        const int b = j % NBUF;
        ak_mbar_wait(bar + 8 * (NBUF + b), ((j / NBUF) & 1) ^ 1); /* EMPTY[b] */
        uint8_t *kb = smem + M::K + b * M::KB * M::KT;
        if (M::V4)
            ak_sdx_convert_v4<AK_SDX_UNIT>(stage_p + (j % NST) * 8 * M::STG, scl_p + (j % NST) * 64, kb, 8 * w, lane);
        else
            ak_sdx_convert<LAYOUT, KPW>(stg0 + (uint32_t)((j % NST) * 8 * M::STG), kb0 + (uint32_t)(b * M::KB * M::KT),
                                        lanes, lane);
        if (lane == 0) smem[M::VALID + 4 * b + w] = (uint8_t)va; /* byte w of the unit's mask */
        /* no proxy fence: the consumers fence after their FULL wait (x273's form, x274), and the
           stage's reads are consumed by the conversion before its refill is issued (x131) */
        ak_mbar_arrive(bar + 8 * b); /* FULL[b] */
        __syncwarp(); /* every lane has read stage j % NST before it is refilled */
        if (NST == 3) {
            ua = ub;
            ub = uc;
            uc = ud;
            va = vb;
            vb = vn;
        } else {
            ua = ub;
            ub = ud;
            va = vn;
        }
    }
}

template <int LAYOUT, int GEN, int ORD>
__global__ void __launch_bounds__(AK_SDX_THREADS, 1) ak_sdx_main(const ak_sd_params p) {
    /* the epilogue stages rows over Q, the K buffers, P and the stages (all free by then) */
    static_assert(AK_SDW_HEADS * AK_SDX_XSTR * 4 <= ak_sdx_map<LAYOUT>::VALID, "staged rows fit before the masks");
    typedef ak_sdx_map<LAYOUT> M;
    enum { DQK = M::DQK, KSTEPS = DQK / 16, NBUF = M::NBUF };
    extern __shared__ __align__(16) uint8_t smem_raw[];
    uint8_t *smem = smem_raw + ((1024u - (ak_smem_addr(smem_raw) & 1023u)) & 1023u);
    const uint32_t bar = ak_smem_addr(smem + M::BAR);

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    int h0, t_begin, t_end, pslot;
    int64_t ri;
    ak_sdw_cta(p, AK_SDW_HEADS, h0, ri, t_begin, t_end, pslot);
    int64_t r, i;
    ak_sd_row_of(p, (uint32_t)ri, r, i);
    if (!ak_sd_take_early<ORD>(p, r, i, t_begin, t_end, pslot)) return;
    ak_sd_prefetch_q<AK_SDW_HEADS, DQK>(p, r, i, h0, tid);

    if (tid == 0) {
        for (int b = 0; b < NBUF; b++) {
            ak_mbar_init(bar + 8 * b, 128);          /* FULL: every producer thread */
            ak_mbar_init(bar + 8 * (NBUF + b), 256); /* EMPTY: every consumer thread */
        }
        /* stage barriers: lane 0's expect_tx arrival (V4: and the eight lanes' cp.async arrivals) */
        for (int k = 0; k < 4 * M::NST; k++) ak_mbar_init(bar + 8 * (2 * NBUF + k), M::V4 ? 1 + 8 : 1);
        ak_mbar_init(bar + 8 * M::EPI, 256); /* every consumer thread */
    }
    __syncthreads();
    ak_grid_dep_wait(); /* as in ak_sd_main: only parameters and shared memory above */
    if (!ak_sd_take_late<ORD>(p, r, i, t_begin, t_end, pslot)) return;
    const int32_t len0 = ak_sd_len(p.list[0], r, i), len1 = ak_sd_len(p.list[1], r, i);
    const int u_begin = 2 * t_begin, u_end = 2 * t_end;

    if (warp < 4) {
        ak_setmaxnreg_dec<M::PREG>();
        ak_sdx_produce<LAYOUT, GEN>(p, smem, r, i, len0, len1, u_begin, u_end);
        return;
    }
    const int ctid = tid - 128, cw = warp - 4;
    const int wg = cw >> 2, wr = cw & 3; /* consumer warpgroup, warp within it (rows 16 wr ..) */
    const int g = lane >> 2, c4 = lane & 3;
    uint8_t *qs = smem + M::Q;
    float *alpha_s = reinterpret_cast<float *>(smem + M::ALPHA), *ml_s = reinterpret_cast<float *>(smem + M::ML);

    ak_sdw_load_q<DQK, AK_SDW_HEADS, 256, ORD == AK_SD_ORD_ONE>(p, qs, r, i, h0, ctid);
    /* V4's sinks, read in the epilogue, loaded beside Q (656 and per-tensor, whose models have none,
       keep the load in the epilogue: this prologue cost their h_q 64 2%); partial rows take no
       sinks, and order 0 has only those */
    if (M::V4 && ORD != 0 && pslot < 0 && ctid < AK_SDW_HEADS)
        reinterpret_cast<float *>(smem + M::SINK)[ctid] = ak_sd_sink(p, false, h0 + ctid);
    ak_fence_proxy_async(); /* Q tile writes -> the wgmma (async proxy) reads */
    ak_bar_sync(1, 256);

    float o[128];
#pragma unroll
    for (int j = 0; j < 128; j++) o[j] = 0.0f;
    float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};
    const ak_sd_kscale kq = ak_sd_kscales<LAYOUT>(p);
    const uint32_t ka = ak_smem_addr(smem + M::K);
    const uint64_t dv0 = ak_wgmma_desc_sw128(ka + wg * 4 * M::KT, M::KT, 1024);
    enum { KBUF = M::KB * M::KT >> 4 }; /* descriptor step between the K buffers */
    const int rows[2] = {16 * wr + g, 16 * wr + g + 8};

    int u = ak_sdx_next<GEN>(p, u_begin, u_end, len0, len1);
    if (wg == 0) {
        ak_setmaxnreg_inc<M::CREG>(); /* warpgroup 2 keeps the launch's 168 */
        /* S, the softmax and O[:, 0 .. 255]; P (bf16) and alpha go to shared memory for warpgroup 2 */
        const uint64_t dq0 = ak_wgmma_desc_sw128(ak_smem_addr(qs), 16, 1024);
        const uint64_t dk0 = ak_wgmma_desc_sw128(ka, 16, 1024);
        uint8_t *ps = smem + M::PS;
        float s[16];
        uint32_t kv = 0u; /* the unit's validity mask, read as soon as its FULL completes */
        if (u < u_end) {
            ak_mbar_wait(bar, 0);
            ak_fence_proxy_async(); /* the producers' K buffer writes -> this thread's wgmma reads */
            kv = *reinterpret_cast<const uint32_t *>(smem + M::VALID);
            ak_sdx_qk<KSTEPS>(s, dq0, dk0);
            ak_wgmma_wait0();
        }
        for (int j = 0; u < u_end; j++) {
            const int b = j % NBUF;
#pragma unroll
            for (int k = 0; k < 16; k++) ak_reg_fence(s[k]);
            uint32_t pa[8];
            float alpha[2];
            const bool ex = ak_sd_extra<GEN>(p, u >> 1); /* this unit's list */
            ak_sdx_softmax(ex ? kq.sl[1] : kq.sl[0], ex ? kq.rel[1] : kq.rel[0], s, kv, c4, m_run, l_run, pa, o, alpha);
            /* the A fragment words -> P and alpha of parity j % 2, read by warpgroup 2's thread of the
               same fragment position (ordinary loads: no proxy fence). Two parities, so writing P of
               unit j + 1 never waits for warpgroup 2: it read P of unit j - 1 before the barrier of
               unit j, which this warpgroup has passed. */
#pragma unroll
            for (int kk = 0; kk < 2; kk++)
                *ak_sdx_pslot(ps, j, kk, ctid) = make_uint4(pa[4 * kk], pa[4 * kk + 1], pa[4 * kk + 2], pa[4 * kk + 3]);
            if (c4 == 0) alpha_s[64 * (j & 1) + rows[0]] = alpha[0], alpha_s[64 * (j & 1) + rows[1]] = alpha[1];
            ak_bar_sync(2, 256); /* P and alpha of this unit are ready */
            /* P V of this unit and S of the next back to back (P V does not wait for the next unit);
               then release this buffer once P V is done */
            const int un = ak_sdx_next<GEN>(p, u + 1, u_end, len0, len1);
#pragma unroll
            for (int k = 0; k < 128; k++) ak_reg_fence(o[k]);
            ak_wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < 2; kk++)
                ak_wgmma_m64n256k16_rs_tb(o, pa + 4 * kk, ak_wgmma_desc_add(dv0, b * KBUF + (kk * 2048 >> 4)));
            ak_wgmma_commit();
            if (un < u_end) {
                ak_mbar_wait(bar + 8 * ((j + 1) % NBUF), ((j + 1) / NBUF) & 1); /* FULL */
                ak_fence_proxy_async();
                kv = *reinterpret_cast<const uint32_t *>(smem + M::VALID + 4 * ((j + 1) % NBUF));
                ak_sdx_qk<KSTEPS>(s, dq0, ak_wgmma_desc_add(dk0, ((j + 1) % NBUF) * KBUF));
                if (NBUF == 3) ak_bar_arrive(3, 256); /* S of the next unit is queued: warpgroup 2's P V may follow */
                ak_wgmma_wait<1>();
            } else {
                if (NBUF == 3) ak_bar_arrive(3, 256);
                ak_wgmma_wait0();
            }
            ak_mbar_arrive(bar + 8 * (NBUF + b)); /* EMPTY[b] */
            ak_wgmma_wait0();
#pragma unroll
            for (int k = 0; k < 128; k++) ak_reg_fence(o[k]);
            u = un;
        }
        if (c4 == 0)
#pragma unroll
            for (int hr = 0; hr < 2; hr++) ml_s[rows[hr]] = m_run[hr], ml_s[64 + rows[hr]] = l_run[hr];
    } else {
        /* O[:, 256 .. 511] += P V with warpgroup 1's P fragments loaded from shared memory, after the
           same rescaling as warpgroup 1 */
        uint8_t *ps = smem + M::PS;
        for (int j = 0; u < u_end; j++) {
            const int b = j % NBUF;
            ak_bar_sync(2, 256); /* P and alpha of unit j */
            /* the K buffer's writes reach this warpgroup through warpgroup 1's FULL wait and this
               barrier: its own fence, before its V^T reads */
            ak_fence_proxy_async();
            uint32_t pa[8];
#pragma unroll
            for (int kk = 0; kk < 2; kk++) {
                const uint4 w4 = *ak_sdx_pslot(ps, j, kk, ctid - 128);
                pa[4 * kk] = w4.x, pa[4 * kk + 1] = w4.y, pa[4 * kk + 2] = w4.z, pa[4 * kk + 3] = w4.w;
            }
            const float a0 = alpha_s[64 * (j & 1) + rows[0]], a1 = alpha_s[64 * (j & 1) + rows[1]];
            if (!__all_sync(0xffffffffu, a0 == 1.0f && a1 == 1.0f)) ak_sdx_rescale(o, a0, a1);
            /* With three K buffers (V4) this P V queues behind warpgroup 1's S of the next unit in
               the tensor pipe, so that S, which the softmax waits for, completes first (V4-Pro
               -1.5%, x135). The buffer's EMPTY then comes later, which with two buffers (656,
               per-tensor) the producers wait for: there it cost 2.5%. */
            if (NBUF == 3) ak_bar_sync(3, 256);
#pragma unroll
            for (int k = 0; k < 128; k++) ak_reg_fence(o[k]);
            ak_wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < 2; kk++)
                ak_wgmma_m64n256k16_rs_tb(o, pa + 4 * kk, ak_wgmma_desc_add(dv0, b * KBUF + (kk * 2048 >> 4)));
            ak_wgmma_commit();
            ak_wgmma_wait0();
#pragma unroll
            for (int k = 0; k < 128; k++) ak_reg_fence(o[k]);
            ak_mbar_arrive(bar + 8 * (NBUF + b)); /* EMPTY[b] */
            /* the next unit after the release, in this warpgroup's idle time (found at the top of
               the loop, its code stood between the P barrier and this P V: 656 h_q 128 +2.8%, x139) */
            u = ak_sdx_next<GEN>(p, u + 1, u_end, len0, len1);
        }
    }
    ak_bar_sync(1, 256); /* consumer warpgroup 1's final m and l rows are in ml_s */
    ak_grid_dep_launch(); /* the next kernel may start its CTAs during this epilogue */
    if (wg == 1)
#pragma unroll
        for (int hr = 0; hr < 2; hr++) m_run[hr] = ml_s[rows[hr]], l_run[hr] = ml_s[64 + rows[hr]];

    /* alpha_s is free: its rows' lse, then the fp16 scale's words. Order 0 serves split calls
       only (one split takes AK_SD_ORD_ONE), so its instance has no direct row writer (x315). */
    if (ORD == 0 || pslot >= 0 || p.out_bulk)
        ak_sdw_write_staged<ORD == 0>(p, smem + M::Q, alpha_s, reinterpret_cast<uint32_t *>(alpha_s + 64),
                                      M::V4 && ORD != 0 ? reinterpret_cast<const float *>(smem + M::SINK) : NULL,
                                      bar + 8 * M::EPI, o, m_run, l_run, kq.ref, r, i, h0, pslot, wg, wr, g, c4,
                                      ctid);
    else
        ak_sdw_write_rows(p, o, m_run, l_run, kq.ref, r, i, h0, wg, wr, g, c4);
}

/* ---- swap-AB kernel for h_q <= 32 and small calls above (656, per-tensor fp8, V4) ---------------
 *
 * ak_sdt_main<LAYOUT, NH, ORD>: one CTA = (request r, query token i, NH-head tile (16 or 32), KV split);
 * 384 threads. Warpgroups 0 and 1 produce as in ak_sdx_main (a warp's records by bulk copy into its
 * stage ring, dequantized into a bf16 K buffer; V4's scale bytes by cp.async beside them), here
 * eight warps of four keys each into 64-key buffers filled in two 32-key halves (four warps of
 * eight keys left the consumer waiting half of its time: the bulk copies issue one lane at a
 * time). Warpgroup 2 computes the transposed
 * products, so the heads are the N dimension of every wgmma and no MMA row is padding:
 * S^T = K Q^T (m64nNHk16: M = the 64 keys of the buffer, both operands K-major from shared memory)
 * and O^T += V^T P^T (M = 64 value dims per instruction, A = the K buffer read MN-major, B = P^T
 * [heads][keys] bf16 in shared memory, written by the softmax). S^T of the next tile is issued
 * right behind P V, as in ak_sdx_main (x327: V4 h_q 16 -6.6%, 656 level).
 * The softmax runs down the columns of S^T: a head's 64 keys span the four warps, so the column max
 * goes through shared memory (one named barrier; only for tiles where some value passes its head's
 * running max + 8, which a barrier with an OR tells, but in V4's 16-head tiles); the column sums
 * stay per thread until the end.
 * O^T needs NH / 2 x 8 registers (64 or 128 per thread). The output is written through shared
 * memory (the K buffer, free at the end) so that rows leave in 16-byte pieces (ak_sdt_store8), by
 * the producer warps too (ak_sdt_rows_out).
 */
#define AK_SDT_KPW 4                  /* keys per producer warp and 32-key half-unit (8 or 4) */
#define AK_SDT_PW (32 / AK_SDT_KPW)   /* producer warps */
#define AK_SDT_THREADS (32 * AK_SDT_PW + 128)
#define AK_SDT_PREG 96 /* registers after setmaxnreg: producers, consumers (within 168 each at launch) */
#define AK_SDT_CREG 240

template <int LAYOUT, int NH> struct ak_sdt_map {
    enum {
        V4 = LAYOUT == AK_LAYOUT_DSV4_FP8_UE8M0,
        DQK = ak_sd_geo<LAYOUT>::DQK,
        KB = DQK / 64,
        /* stage bytes per key: at 16 heads a multiple of 128, so that ak_sdx_convert's loads are
           conflict-free; at 32 the padding does not fit (226 KB), and the converter's lanes
           rotate their chunks with the key instead (ak_sdx_lanes_of, x329). V4's converter
           (ak_sdt_convert_v4) reads one key per quarter warp: its 576-byte rows */
        STG = V4 ? ak_sd_geo<LAYOUT>::REC
              : NH <= 16 ? (ak_sd_geo<LAYOUT>::REC + 127) & ~127 : ak_sd_geo<LAYOUT>::REC,
        NST = 2,                             /* stages per producer warp */
        Q = 0,                               /* [KB][NH heads][128 B] bf16 swizzled */
        K = Q + KB * NH * 128,               /* [2][KB][64 keys][128 B] bf16 swizzled */
        PT = K + 2 * KB * AK_SDW_TILE,       /* [NH heads][128 B] bf16 P^T swizzled */
        RED = PT + NH * 128,                 /* [4 warps][NH] f32 column max, then column sums */
        AMAX = RED + 4 * NH * 4,             /* [4 warps] u32 partial rows' largest magnitude */
        STAGE = AMAX + 16,                   /* [PW warps][NST][KPW keys][STG] raw records */
        VF = 64 / AK_SDT_KPW,                /* validity bytes per K buffer */
        SCL = STAGE + AK_SDT_PW * NST * AK_SDT_KPW * STG, /* V4: [PW warps][NST][KPW keys][8 B] ue8m0 bytes */
        VALID = SCL + (V4 ? AK_SDT_PW * NST * AK_SDT_KPW * 8 : 0), /* [2][VF] u8: byte v = keys KPW v .. */
        BAR = (VALID + 2 * VF + 7) & ~7,     /* FULL[2], EMPTY[2], stage[PW][NST], EPI mbarriers */
        EPI = 4 + AK_SDT_PW * NST,           /* the staged rows' hand-off to every thread (ak_sdt_rows_out) */
        BYTES = BAR + (EPI + 1) * 8,
        OSTR = AK_SD_DV + 4                  /* f32 row stride of the output staging (in K) */
    };
};

/* The half-unit after u (32-key halves: u = 2 t + half; both halves of every tile that starts
   before its row's length), or u_end. */
template <int GEN>
__device__ __forceinline__ int ak_sdt_nextu(const ak_sd_params &p, int u, int t_end, int32_t len0, int32_t len1) {
    if ((u & 1) == 0) return u + 1;
    return 2 * ak_sdw_next<GEN>(p, (u >> 1) + 1, t_end, len0, len1);
}

/* ak_sdx_convert_v4 for four keys per warp (rows n0 .. n0 + 3 of a 64-key K buffer): quarter warp
   k converts key k, lane j of it the key's fp8 chunks 8 i + j (16 dims each, 28 of them: the last
   step uses half the lanes), scaled by the ue8m0 byte of its 64-dim tile (chunk / 4), then copies
   the 16-byte piece j of the bf16 RoPE (dims 448..511). A quarter warp's loads read 128 contiguous
   bytes; of its stores, lanes j and j + 4 fall in the same swizzle position of two column blocks
   (8 KB apart, the same banks), so lanes 4.. store their chunk's upper half first (a one-warp
   micro-benchmark, session 50, timed both orders alike; this order is the one measured in x231). */
__device__ __forceinline__ void ak_sdt_convert_v4(const uint8_t *stg, const uint8_t *scl, uint8_t *kb, int n0, int lane) {
    enum { STG = ak_sd_geo<AK_LAYOUT_DSV4_FP8_UE8M0>::REC };
    const int k = lane >> 3, j = lane & 7, n = n0 + k, up = j >> 2;
    const uint8_t *rec = stg + k * STG;
    const uint2 sc = *reinterpret_cast<const uint2 *>(scl + 8 * k); /* tile t's scale in byte t */
    uint4 f[4];
#pragma unroll
    for (int i = 0; i < 4; i++)
        if (i < 3 || j < 4) f[i] = *reinterpret_cast<const uint4 *>(rec + 16 * (8 * i + j));
    const uint4 rp = *reinterpret_cast<const uint4 *>(rec + 448 + 16 * j);
#pragma unroll
    for (int i = 0; i < 4; i++) {
        if (i == 3 && j >= 4) break;
        const int c = 8 * i + j;
        uint4 lo, hi;
        ak_sd_dequant16(f[i], ak_ue8m0_to_f32((uint8_t)__byte_perm(sc.x, sc.y, (unsigned)(c >> 2))), lo, hi);
        *reinterpret_cast<uint4 *>(kb + ak_sdx_off<AK_SD_KEYS>(n, 16 * c + 8 * up)) = up ? hi : lo;
        *reinterpret_cast<uint4 *>(kb + ak_sdx_off<AK_SD_KEYS>(n, 16 * c + 8 - 8 * up)) = up ? lo : hi;
    }
    *reinterpret_cast<uint4 *>(kb + ak_sdx_off<AK_SD_KEYS>(n, 448 + 8 * j)) = rp;
}

template <int LAYOUT, int NH, int GEN>
__device__ __forceinline__ void ak_sdt_produce(const ak_sd_params &p, uint8_t *smem, int64_t r, int64_t i,
                                               int32_t len0, int32_t len1, int t_begin, int t_end) {
    typedef ak_sdt_map<LAYOUT, NH> M;
    enum { NST = M::NST, KPW = AK_SDT_KPW, SB = KPW * M::STG /* bytes of one stage */ };
    const int w = (int)threadIdx.x >> 5, lane = (int)threadIdx.x & 31;
    const uint32_t bar = ak_smem_addr(smem + M::BAR);
    const uint32_t sbar = bar + 8 * (4 + w * NST);
    const uint32_t stage = ak_smem_addr(smem + M::STAGE) + (uint32_t)(w * NST * SB);
    const uint8_t *stage_p = smem + M::STAGE + w * NST * SB;
    const uint32_t scl = ak_smem_addr(smem + M::SCL) + (uint32_t)(w * NST * KPW * 8); /* V4: scale stages */
    const uint8_t *scl_p = smem + M::SCL + w * NST * KPW * 8;
    const int key = KPW * w + (lane & (KPW - 1)); /* lanes KPW.. mirror lanes 0.. (unused slot ids) */
    const int u_end = 2 * t_end;
    if (t_begin >= t_end) return;
    /* shared addresses: the stage and K regions (uniform), the lane's offsets in them */
    const uint32_t stg0 = ak_smem_addr(smem + M::STAGE), kb0 = ak_smem_addr(smem + M::K);
    const ak_sdx_lanes<KPW> lanes =
        ak_sdx_lanes_of<LAYOUT, AK_SD_KEYS, KPW, M::STG>((uint32_t)(w * NST * SB), KPW * w, lane);
    /* both half-units' slot ids before the first copy and before the lengths are used (as in
       ak_sdx_produce) */
    const ak_sdx_rows rw = ak_sdx_rows_of(p, r, i, len0, len1);
    const ak_sdx_first f = ak_sdx_first_of<2, GEN>(rw, 2 * t_begin, u_end, key);
    /* half-units a (being converted, records in stage j % 2) and b (slot ids in cslot); unit j + 1's
       copies are issued in step j */
    int ua = 2 * ak_sdw_next<GEN>(p, t_begin, t_end, len0, len1);
    if (ua >= u_end) return;
    int ub = ak_sdt_nextu<GEN>(p, ua, t_end, len0, len1);
    bool ok, cok = false;
    const int32_t sl = ak_sdx_slot_first<GEN>(rw, f, ua, key, ok);
    int32_t cslot = ak_sdx_slot_first<GEN>(rw, f, ub < u_end ? ub : ua, key, cok);
    cok = cok && ub < u_end;
    const uint64_t pol = ak_l2_policy(p.rec_first != 0);
    uint32_t va = ak_sdx_copy<LAYOUT, GEN, KPW, M::STG>(p.list[ak_sd_extra<GEN>(p, ua >> 1)], ok ? sl : -1, lane,
                                                        stage, scl, sbar, pol);
    for (int j = 0; ua < u_end; j++) {
        uint32_t vn = 0u;
        if (ub < u_end)
            vn = ak_sdx_copy<LAYOUT, GEN, KPW, M::STG>(p.list[ak_sd_extra<GEN>(p, ub >> 1)], cok ? cslot : -1, lane,
                                                       stage + (uint32_t)(((j + 1) % NST) * SB),
                                                       scl + (uint32_t)(((j + 1) % NST) * KPW * 8), sbar + 8 * ((j + 1) % NST),
                                                       pol);
        const int ud = ub < u_end ? ak_sdt_nextu<GEN>(p, ub, t_end, len0, len1) : u_end;
        cslot = ak_sdx_slot<GEN>(rw, ud < u_end ? ud : ua, key, cok);
        cok = cok && ud < u_end;
        ak_mbar_wait(sbar + 8 * (j % NST), (j / NST) & 1); /* unit a's records landed */
        const int n = j >> 1, b = n & 1, half = j & 1;   /* tile n of this CTA, its buffer, this half */
        if (half == 0) ak_mbar_wait(bar + 8 * (2 + b), ((n >> 1) & 1) ^ 1); /* EMPTY[b] */
        uint8_t *kb = smem + M::K + b * M::KB * AK_SDW_TILE;
        if (M::V4) ak_sdt_convert_v4(stage_p + (j % NST) * SB, scl_p + (j % NST) * KPW * 8, kb, 32 * half + KPW * w, lane);
        else ak_sdx_convert<LAYOUT, KPW>(stg0 + (uint32_t)((j % NST) * SB),
                                         kb0 + (uint32_t)(b * M::KB * AK_SDW_TILE + half * 32 * 128), lanes, lane);
        if (lane == 0) smem[M::VALID + M::VF * b + (32 / KPW) * half + w] = (uint8_t)va;
        /* The consumer needs both halves of a tile, so the K buffer writes of both are released
           once, after the second (x131). Their proxy fence is the consumers', after their FULL
           wait (ak_sdt_main): here it held each producer warp's chain beside the consumer's
           products (moved, b 128 h_q 16 / 32 -2.4 / -2.6%: x273). The first half's stage is
           refilled in the next step without a fence of its own: its lanes' shared reads have been
           consumed by their conversion before the warp synchronizes, as a TMA pipeline's consumer
           releases a buffer by an arrival alone. */
        if (half) {
            ak_mbar_arrive(bar + 8 * b); /* FULL[b] */
        }
        __syncwarp();
        ua = ub;
        ub = ud;
        va = vn;
    }
}

/* S^T = K Q^T for the 64 keys of a K buffer: descriptors of the first k16 step of the K buffer (A)
   and of Q (B); a step adds its byte offset >> 4. */
template <int NH, int KSTEPS>
__device__ __forceinline__ void ak_sdt_qk(float *s, uint64_t dk0, uint64_t dq0) {
    ak_wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < KSTEPS; kk++) {
        const uint32_t ko = (kk >> 2) * AK_SDW_TILE + (kk & 3) * 32, qo = (kk >> 2) * (NH * 128) + (kk & 3) * 32;
        if (NH == 16) ak_wgmma_m64n16k16_ss<0>(s, dk0 + (ko >> 4), dq0 + (qo >> 4), kk > 0);
        else ak_wgmma_m64n32k16_ss<0>(s, dk0 + (ko >> 4), dq0 + (qo >> 4), kk > 0);
    }
    ak_wgmma_commit();
}

/* The softmax pieces of the kernels whose S^T fragment holds keys 16 w + g (+ 8) of a 64-key tile
   and head columns 8 j + 2 c4 + e (ak_sdt_main, ak_sdr_main): s[4 j + 2 hr + e], NH / 4 columns
   c = 2 j + e per thread, red [4 warps][NH] f32 in shared memory, `bar` the warpgroup's named
   barrier. */

/* Column max over the tile's 64 keys (shuffles over g, then the four warps through red) and the
   lazy rescale per head: a head keeps its running max unless a value passes it by more than 8;
   returns whether any of this thread's heads moved. */
template <int NH>
__device__ __forceinline__ bool ak_sdt_colmax(const float *s, float *m_run, float *m_use, float *alpha, float *red,
                                              int w, int g, int c4, int bar) {
#pragma unroll
    for (int j = 0; j < NH / 8; j++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
            float m = fmaxf(s[4 * j + e], s[4 * j + 2 + e]);
            m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 4));
            m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 8));
            m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 16));
            if (g == 0) red[w * NH + 8 * j + 2 * c4 + e] = m;
        }
    ak_bar_sync(bar, 128);
    bool rescale = false;
#pragma unroll
    for (int j = 0; j < NH / 8; j++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
            const int c = 2 * j + e, h = 8 * j + 2 * c4 + e;
            const float m = fmaxf(fmaxf(red[h], red[NH + h]), fmaxf(red[2 * NH + h], red[3 * NH + h]));
            const bool keep = m <= m_run[c] + 8.0f;
            const float m_new = keep ? m_run[c] : fmaxf(m_run[c], m);
            m_use[c] = m_new == -INFINITY ? 0.0f : m_new;
            alpha[c] = keep ? 1.0f : ak_ex2(m_run[c] - m_use[c]);
            rescale |= !keep;
            m_run[c] = m_new;
        }
    return rescale;
}

/* P = 2^(s - m) into P^T [head][key] (NH x 128 B at shared address pta, swizzled) as bf16(P pw[hr])
   for the thread's key rows hr; this thread's key sums into l_part. The thread's (keys g, g + 8;
   heads 2 c4, + 1) pairs are mma accumulator pairs of 8 x 8 (key, head) blocks, so stmatrix .trans
   writes them as 16-byte [head][8 keys] rows, four blocks an instruction (x326: 16 two-byte stores
   and 16 conversions a tile at 32 heads became 2 and 8). */
template <int NH>
__device__ __forceinline__ void ak_sdt_pwrite(const float *s, const float *m_use, const float *alpha,
                                              const float *pw, float *l_part, uint32_t pta, int w, int lane) {
    uint32_t pk[NH / 8][2]; /* block (heads 8 j .., keys 16 w + 8 hr ..) */
#pragma unroll
    for (int j = 0; j < NH / 8; j++) {
        float v[2][2];
#pragma unroll
        for (int e = 0; e < 2; e++) {
            const int c = 2 * j + e;
            float sum = 0.0f;
#pragma unroll
            for (int hr = 0; hr < 2; hr++) {
                const float pv = ak_ex2(s[4 * j + 2 * hr + e] - m_use[c]);
                sum += pv;
                v[hr][e] = pv * pw[hr];
            }
            l_part[c] = l_part[c] * alpha[c] + sum;
        }
#pragma unroll
        for (int hr = 0; hr < 2; hr++) pk[j][hr] = ak_sd_pack_bf16(v[hr][0], v[hr][1]);
    }
    /* lane l addresses head row 8 j + (l & 7) of block (j, hr) = (2 q + (l >> 4), (l >> 3) & 1) */
    const int i = lane & 7, hr = (lane >> 3) & 1;
    const uint32_t row = pta + (uint32_t)(i * 128 + (((2 * w + hr) ^ i) << 4));
#pragma unroll
    for (int q = 0; q < NH / 16; q++)
        ak_stmatrix_x4_trans(row + (uint32_t)((16 * q + 8 * (lane >> 4)) * 128), pk[2 * q][0], pk[2 * q][1],
                             pk[2 * q + 1][0], pk[2 * q + 1][1]);
}

/* The column sums at the end: over the g lanes, then into red for the four warps (fixed order: the
   same bits every run); the caller's barrier publishes them. */
template <int NH>
__device__ __forceinline__ void ak_sdt_colsum(float *l_part, float *red, int w, int g, int c4) {
#pragma unroll
    for (int c = 0; c < NH / 4; c++) {
        l_part[c] += __shfl_xor_sync(0xffffffffu, l_part[c], 4);
        l_part[c] += __shfl_xor_sync(0xffffffffu, l_part[c], 8);
        l_part[c] += __shfl_xor_sync(0xffffffffu, l_part[c], 16);
    }
    if (g == 0) {
#pragma unroll
        for (int c = 0; c < NH / 4; c++) red[w * NH + 8 * (c >> 1) + 2 * c4 + (c & 1)] = l_part[c];
    }
}

/* One CTA's work from blockIdx (ak_sdw_cta): its partial slot, first head, request and query token
   and its tiles [t_begin, t_end); parameters only, so it runs before the dependency wait. */
struct ak_sdt_work {
    int pslot, h0, t_begin, t_end;
    int64_t r, i;
};
__device__ __forceinline__ ak_sdt_work ak_sdt_cta(const ak_sd_params &p, int nh) {
    ak_sdt_work k;
    int64_t ri;
    ak_sdw_cta(p, nh, k.h0, ri, k.t_begin, k.t_end, k.pslot);
    ak_sd_row_of<1>(p, (uint32_t)ri, k.r, k.i);
    return k;
}

/* Head h's lse of token (r, i): this split's partial lse and factor (inv) with splits, else the output
   lse (if any). */
__device__ __forceinline__ void ak_sdt_store_lse(const ak_sd_params &p, float lse, float inv, int64_t r, int64_t i,
                                                 int h, int pslot) {
    if (pslot >= 0) p.lacc[ak_sd_part_row(p, pslot, h)] = make_float2(lse, inv);
    else if (p.lse != NULL) p.lse[r * p.l_s0 + i * p.l_s1 + h * p.l_s2] = lse;
}

/* Dims d .. d + 3 of head h's finished row of token (r, i), already scaled: this split's partial row
   (fp16 times the CTA's scale sc, one 8-byte store into the aligned workspace) with splits, else
   the output row (bf16 or f32, 4-byte stores: output rows need not be 16-byte aligned). */
__device__ __forceinline__ void ak_sdt_store4(const ak_sd_params &p, float4 v, int64_t r, int64_t i, int h, int d,
                                              int pslot, float sc) {
    if (pslot >= 0) {
        *reinterpret_cast<uint2 *>(p.oacc + ak_sd_part_row(p, pslot, h) * AK_SD_DV + d) =
            make_uint2(ak_sd_pack_f16(v.x * sc, v.y * sc), ak_sd_pack_f16(v.z * sc, v.w * sc));
    } else {
        const int64_t ob = r * p.o_s0 + i * p.o_s1 + h * p.o_s2 + d;
        if (p.out_f32) {
            float *dst = (float *)p.out + ob;
            dst[0] = v.x, dst[1] = v.y, dst[2] = v.z, dst[3] = v.w;
        } else {
            uint16_t *dst = (uint16_t *)p.out + ob;
            *reinterpret_cast<uint32_t *>(dst) = ak_sd_pack_bf16(v.x, v.y);
            *reinterpret_cast<uint32_t *>(dst + 2) = ak_sd_pack_bf16(v.z, v.w);
        }
    }
}

/* Dims d .. d + 7 (d % 8 == 0) of head h's finished row, as ak_sdt_store4: one 16-byte store where
   the row is 16-byte aligned (the workspace's partial rows; bf16 output rows where p.out_bulk),
   else two ak_sdt_store4. Four 4-byte stores per 8 dims made the swap-AB epilogue ~10k cycles at 32
   heads (session 41's trace). */
__device__ __forceinline__ void ak_sdt_store8(const ak_sd_params &p, float4 a, float4 b, int64_t r, int64_t i, int h,
                                              int d, int pslot, float sc) {
    if (pslot >= 0) {
        *reinterpret_cast<uint4 *>(p.oacc + ak_sd_part_row(p, pslot, h) * AK_SD_DV + d) =
            make_uint4(ak_sd_pack_f16(a.x * sc, a.y * sc), ak_sd_pack_f16(a.z * sc, a.w * sc),
                       ak_sd_pack_f16(b.x * sc, b.y * sc), ak_sd_pack_f16(b.z * sc, b.w * sc));
    } else if (p.out_bulk && !p.out_f32) {
        *reinterpret_cast<uint4 *>((uint16_t *)p.out + r * p.o_s0 + i * p.o_s1 + h * p.o_s2 + d) =
            make_uint4(ak_sd_pack_bf16(a.x, a.y), ak_sd_pack_bf16(a.z, a.w), ak_sd_pack_bf16(b.x, b.y),
                       ak_sd_pack_bf16(b.z, b.w));
    } else {
        ak_sdt_store4(p, a, r, i, h, d, pslot, sc);
        ak_sdt_store4(p, b, r, i, h, d + 4, pslot, sc);
    }
}

/* The staged rows of ak_sdt_main's epilogue out, 8 dims per item, by all 384 threads: the
   consumers' epilogue runs one warp per scheduler, so its rows out were a chain of dependent
   instructions that the eight producer warps, done by then, now share (x206). sc: the partial
   rows' scale (ak_sd_part_get of the consumer warps' words). */
template <int LAYOUT, int NH>
__device__ __forceinline__ void ak_sdt_rows_out(const ak_sd_params &p, uint8_t *smem, int64_t r, int64_t i, int h0,
                                                int pslot, float sc, int tid) {
    typedef ak_sdt_map<LAYOUT, NH> M;
    const float *os = reinterpret_cast<const float *>(smem + M::K); /* [NH][OSTR] f32 */
    for (int it = tid; it < NH * (AK_SD_DV / 8); it += AK_SDT_THREADS) {
        const int hl = it / (AK_SD_DV / 8), d = (it % (AK_SD_DV / 8)) * 8, h = h0 + hl;
        if (h >= p.h_q) continue;
        const float *src = os + hl * M::OSTR + d;
        ak_sdt_store8(p, *reinterpret_cast<const float4 *>(src), *reinterpret_cast<const float4 *>(src + 4), r, i, h,
                      d, pslot, sc);
    }
}

template <int LAYOUT, int NH, int GEN, int ORD>
__global__ void __launch_bounds__(AK_SDT_THREADS, 1) ak_sdt_main(const ak_sd_params p) {
    typedef ak_sdt_map<LAYOUT, NH> M;
    enum { DQK = M::DQK, KSTEPS = DQK / 16, NS = NH / 2, /* S^T and per-block O^T registers */
           NC = NH / 4 /* head columns per thread: 8 j + 2 c4 + e */ };
    extern __shared__ __align__(16) uint8_t smem_raw[];
    uint8_t *smem = smem_raw + ((1024u - (ak_smem_addr(smem_raw) & 1023u)) & 1023u);
    const uint32_t bar = ak_smem_addr(smem + M::BAR);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;

    const ak_sdt_work wk = ak_sdt_cta(p, NH);
    const int h0 = wk.h0;
    /* the one-split instance writes output rows only, order 0 (split calls only) partial rows only
       (AK_SD_BY_ORDER_ONE): neither builds the other's epilogue (x322) */
    int pslot = ORD == AK_SD_ORD_ONE ? -1 : wk.pslot, t_begin = wk.t_begin, t_end = wk.t_end;
    if (ORD == 0) __builtin_assume(pslot >= 0);
    int64_t r = wk.r, i = wk.i;
    if (!ak_sd_take_early<ORD>(p, r, i, t_begin, t_end, pslot)) return;
    ak_sd_prefetch_q<NH, DQK>(p, r, i, h0, tid);

    if (tid == 0) {
        for (int b = 0; b < 2; b++) {
            ak_mbar_init(bar + 8 * b, 32 * AK_SDT_PW); /* FULL: every producer thread, after a tile's second half */
            ak_mbar_init(bar + 8 * (2 + b), 128);          /* EMPTY: every consumer thread */
        }
        /* stage barriers: the bulk copies' transaction count, and for V4 each key's scale cp.async */
        for (int k = 0; k < AK_SDT_PW * M::NST; k++) ak_mbar_init(bar + 8 * (4 + k), M::V4 ? 1 + AK_SDT_KPW : 1);
        ak_mbar_init(bar + 8 * M::EPI, 128); /* every consumer thread */
    }
    __syncthreads();
    ak_grid_dep_wait(); /* as in ak_sd_main: only parameters and shared memory above */
    if (!ak_sd_take_late<ORD>(p, r, i, t_begin, t_end, pslot)) return;
    if (warp < AK_SDT_PW) {
        const int32_t len0 = ak_sd_len(p.list[0], r, i), len1 = ak_sd_len(p.list[1], r, i);
        ak_setmaxnreg_dec<AK_SDT_PREG>();
        ak_sdt_produce<LAYOUT, NH, GEN>(p, smem, r, i, len0, len1, t_begin, t_end);
        ak_mbar_wait(bar + 8 * M::EPI, 0); /* the consumers' staged rows and scale words */
        float inv, sc = 1.0f;
        if (pslot >= 0) sc = ak_sd_part_get(reinterpret_cast<const uint32_t *>(smem + M::AMAX), 4, inv);
        ak_sdt_rows_out<LAYOUT, NH>(p, smem, r, i, h0, pslot, sc, tid);
        return;
    }
    ak_setmaxnreg_inc<AK_SDT_CREG>();
    const int ct = tid - 32 * AK_SDT_PW, w = warp - AK_SDT_PW, g = lane >> 2, c4 = lane & 3;
    uint8_t *qs = smem + M::Q;
    float *red = reinterpret_cast<float *>(smem + M::RED);
    ak_sdw_load_q<DQK, NH, 128, ORD == AK_SD_ORD_ONE>(p, qs, r, i, h0, ct);
    ak_fence_proxy_async(); /* Q writes -> the wgmma (async proxy) reads */
    ak_bar_sync(1, 128);
    /* the consumers' lengths after Q, which lands long before the first FULL (x292: b 128 / b 32
       h_q 16 -0.8 / -0.3..0.7%, the small calls level) */
    const int32_t len0 = ak_sd_len(p.list[0], r, i), len1 = ak_sd_len(p.list[1], r, i);

    float o[8][NS]; /* O^T: o[mb][4 j + 2 hr + e] = dim 64 mb + 16 w + g + 8 hr, head 8 j + 2 c4 + e */
#pragma unroll
    for (int mb = 0; mb < 8; mb++)
#pragma unroll
        for (int k = 0; k < NS; k++) o[mb][k] = 0.0f;
    float m_run[NC], l_part[NC]; /* per head column; l_part sums this thread's keys only */
    const ak_sd_kscale kq = ak_sd_kscales<LAYOUT>(p);
#pragma unroll
    for (int c = 0; c < NC; c++) m_run[c] = -INFINITY, l_part[c] = 0.0f;
    const uint32_t ka = ak_smem_addr(smem + M::K), pta = ak_smem_addr(smem + M::PT);
    const uint64_t dk0 = ak_wgmma_desc_sw128(ka, 16, 1024);
    const uint64_t dq0 = ak_wgmma_desc_sw128(ak_smem_addr(qs), 16, 1024);
    const uint64_t dv0 = ak_wgmma_desc_sw128(ka, AK_SDW_TILE, 1024); /* V^T: MN-major, 8 keys per 1024 B */
    const uint64_t dp0 = ak_wgmma_desc_sw128(pta, 16, 1024);
    enum { KBUF = M::KB * AK_SDW_TILE >> 4 };

    /* S^T of tile n + 1 is issued right behind P V of tile n (x327, as ak_sdx_main does), so the
       tensor pipe takes it without the gap of P V's wait, EMPTY, the loop and the FULL wait */
    int n = 0, t = ak_sdw_next<GEN>(p, t_begin, t_end, len0, len1);
    float s[NS];
    if (t < t_end) {
        ak_mbar_wait(bar, 0); /* FULL[0] */
        /* the producers' generic K buffer writes -> this thread's wgmma reads: the writes precede
           the fence through FULL's release and acquire, the fence precedes the products in program
           order (the PTX model's cross-proxy causality; a fence on the reading side also holds
           where the writers are in another CTA) */
        ak_fence_proxy_async();
        ak_sdt_qk<NH, KSTEPS>(s, dk0, dq0);
        ak_wgmma_wait0();
    }
    for (; t < t_end; n++) {
        const int b = n & 1, tn = ak_sdw_next<GEN>(p, t + 1, t_end, len0, len1);
#pragma unroll
        for (int k = 0; k < NS; k++) ak_reg_fence(s[k]);
        /* validity of this thread's keys 16 w + g (+ 8): bit k % KPW of byte k / KPW of the flags,
           read once per tile */
        const uint8_t *kvb = smem + M::VALID + M::VF * b;
        const uint32_t kv[2] = {(uint32_t)(kvb[(16 * w + g) / AK_SDT_KPW] >> ((16 * w + g) % AK_SDT_KPW)) & 1u,
                                (uint32_t)(kvb[(16 * w + g + 8) / AK_SDT_KPW] >> ((16 * w + g + 8) % AK_SDT_KPW)) & 1u};
        const bool ex = ak_sd_extra<GEN>(p, t); /* this tile's list (ak_sd_kscale) */
        const float sl = ex ? kq.sl[1] : kq.sl[0], prel = ex ? kq.rel[1] : kq.rel[0];
        /* the values in log2 units, and whether any of this thread's leaves its head's running max
           behind by more than 8 (NaN counts) */
        bool out = false;
#pragma unroll
        for (int j = 0; j < NH / 8; j++)
#pragma unroll
            for (int e = 0; e < 2; e++)
#pragma unroll
                for (int hr = 0; hr < 2; hr++) {
                    const float v = kv[hr] ? s[4 * j + 2 * hr + e] * sl : -INFINITY;
                    s[4 * j + 2 * hr + e] = v;
                    out |= !(v <= m_run[2 * j + e] + 8.0f);
                }
        /* Lazy rescaling per head, as in ak_sdw_main: while no value of the tile passes its head's
           running max + 8 every head keeps its max, so the column maxima (shuffles, shared memory
           and a second barrier) are exchanged only when one does, the same values either way
           (x74: h_q 32 -6%). V4's 16-head tiles always exchange: there the faster consumer slows
           the producers, which bind (x74 at 16 heads +5%; x324: V4 +1.6%, 656 -2.3%) */
        bool rescale = false;
        float alpha[NC], m_use[NC];
        if ((M::V4 && NH == 16) || ak_bar_any(1, 128, out)) {
            rescale = ak_sdt_colmax<NH>(s, m_run, m_use, alpha, red, w, g, c4, 1);
        } else {
#pragma unroll
            for (int c = 0; c < NC; c++) {
                m_use[c] = m_run[c] == -INFINITY ? 0.0f : m_run[c];
                alpha[c] = 1.0f;
            }
        }
        /* P = 2^(s - m) rounded to bf16 into P^T [head][key] (swizzled); this thread's key sums */
        const float pw[2] = {prel, prel};
        ak_sdt_pwrite<NH>(s, m_use, alpha, pw, l_part, pta, w, lane);
        if (__any_sync(0xffffffffu, rescale)) {
#pragma unroll
            for (int mb = 0; mb < 8; mb++)
#pragma unroll
                for (int k = 0; k < NS; k++) o[mb][k] *= alpha[(k >> 2) * 2 + (k & 1)];
        }
        ak_fence_proxy_async(); /* P^T writes -> the wgmma reads */
        ak_bar_sync(2, 128);     /* P^T complete; every thread has read the column maxima */
        /* O^T[64 mb ..] += V^T P^T: A = dims 64 mb .. of K buffer b (MN-major), B = P^T */
#pragma unroll
        for (int mb = 0; mb < 8; mb++)
#pragma unroll
            for (int k = 0; k < NS; k++) ak_reg_fence(o[mb][k]);
        ak_wgmma_fence();
#pragma unroll
        for (int mb = 0; mb < 8; mb++)
#pragma unroll
            for (int kk = 0; kk < 4; kk++) {
                const uint64_t da = dv0 + b * KBUF + ((mb * AK_SDW_TILE + kk * 2048) >> 4), db = dp0 + (kk * 32 >> 4);
                if (NH == 16) ak_wgmma_m64n16k16_ss<1>(o[mb], da, db, 1);
                else ak_wgmma_m64n32k16_ss<1>(o[mb], da, db, 1);
            }
        ak_wgmma_commit();
        if (tn < t_end) {
            ak_mbar_wait(bar + 8 * (b ^ 1), ((n + 1) >> 1) & 1); /* FULL of tile n + 1 */
            ak_fence_proxy_async();
            ak_sdt_qk<NH, KSTEPS>(s, dk0 + (b ^ 1) * KBUF, dq0);
            ak_wgmma_wait<1>(); /* P V of tile n */
        } else {
            ak_wgmma_wait0();
        }
#pragma unroll
        for (int mb = 0; mb < 8; mb++)
#pragma unroll
            for (int k = 0; k < NS; k++) ak_reg_fence(o[mb][k]);
        ak_mbar_arrive(bar + 8 * (2 + b)); /* EMPTY[b] */
        ak_wgmma_wait0(); /* S^T of tile n + 1: no product is in flight across the loop's edge */
        t = tn;
    }

    ak_grid_dep_launch(); /* the next kernel may start its CTAs during this epilogue */
    /* column sums (the last column maxima were read before the last tile's second barrier) */
    ak_sdt_colsum<NH>(l_part, red, w, g, c4);
    ak_bar_sync(1, 128);
    /* Per head: the factor of its O^T column and its lse (ak_sd_row_scale; per-tensor fp8: times
       ak_sd_kscale::ref); O^T * factor -> shared [head][dim] f32 in K buffer 0 (every product
       that read it has completed), the largest magnitude of the partial rows beside it
       (ak_sd_part_scale, across this barrier), then rows out by every thread (ak_sdt_rows_out). */
    float *os = reinterpret_cast<float *>(smem + M::K);
    float lse[NC], am = 0.0f;
#pragma unroll
    for (int j = 0; j < NH / 8; j++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
            const int c = 2 * j + e, hl = 8 * j + 2 * c4 + e, h = h0 + hl;
            const float lsum = (red[hl] + red[NH + hl]) + (red[2 * NH + hl] + red[3 * NH + hl]);
            const float f =
                ak_sd_row_scale(pslot >= 0, m_run[c], lsum, ak_sd_sink(p, pslot >= 0, h), 1.0f, lse[c]) * kq.ref;
            float a = 0.0f;
#pragma unroll
            for (int mb = 0; mb < 8; mb++)
#pragma unroll
                for (int hr = 0; hr < 2; hr++) {
                    const float v = o[mb][4 * j + 2 * hr + e] * f;
                    os[hl * M::OSTR + 64 * mb + 16 * w + g + 8 * hr] = v;
                    a = fmaxf(a, fabsf(v));
                }
            if (h < p.h_q) am = ak_sd_amax_add(am, a);
        }
    uint32_t *amax = reinterpret_cast<uint32_t *>(smem + M::AMAX);
    float sc = 1.0f, inv = 1.0f;
    if (pslot >= 0) ak_sd_part_put(am, amax, 4);
    /* staged rows and scale words -> all 384 threads, through mbarrier EPI (racecheck reported this
       hand-off across __syncthreads, reached by the producers at another instruction) */
    ak_mbar_arrive(bar + 8 * M::EPI);
    ak_mbar_wait(bar + 8 * M::EPI, 0);
    if (pslot >= 0) sc = ak_sd_part_get(amax, 4, inv);
    if (w == 0 && g == 0)
#pragma unroll
        for (int c = 0; c < NC; c++) {
            const int h = h0 + 8 * (c >> 1) + 2 * c4 + (c & 1);
            if (h < p.h_q) ak_sdt_store_lse(p, lse[c], inv, r, i, h, pslot);
        }
    ak_sdt_rows_out<LAYOUT, NH>(p, smem, r, i, h0, pslot, sc, tid);
}

/*
 * ak_sdr_main: per-tensor fp8 at h_q <= 16, the keys dequantized in the consumers' registers. One
 * CTA = (token, 16-head tile, KV split): four producer warps that only issue bulk copies (16 keys
 * of each 64-key tile, into a ring of four raw tiles) and three consumer warpgroups, warpgroup c
 * serving the tiles n with n % 3 == c; their states merge at the end. Three chains per SM (two
 * left the consumers the bound: x174) at 152 registers, so the products issue in groups of four
 * k16 steps (ptxas checks them against the launch's 128).
 *
 * S^T = K Q^T with K as the wgmma A operand from registers: each thread loads the fp8 bytes of its
 * two keys (rows 16 w + g and + 8) and converts them to bf16(v), exact (the consumers apply
 * k_scale: ak_sd_kscale), B = Q from shared memory. The dims of each k16 step are permuted, the
 * same way in Q, so that a thread's A values of a key are adjacent bytes: in 128-dim block b lane
 * c4 owns bytes 32 c4 .. + 31, its step q of the block bytes 4 q .. + 3; the RoPE's step q is
 * 16 c4 + 4 q.
 * O^T += V^T P'^T with V^T from registers too, each register two keys of one dim: bf16 of v 2^-120
 * by moving its sign, exponent and mantissa bits (exact; e4m3 subnormals become bf16 subnormals)
 * with P'^T = bf16(P prel 2^64), so O carries 2^-56, undone with the row's factor (bf16 keeps
 * fp32's range: P <= 2^8 under the lazy rescale). An invalid key's stage bytes are zeros
 * (ak_sdr_produce), so its V row is zero, not a conversion of stale bytes. The rows of an O^T
 * m-tile lie in one 128-dim block: m-tile 2 b + e, row 16 w + g + 8 hr is dim 128 b + 4 (8 w + g)
 * + 2 e + hr.
 * 656 ran here too until session 61. Its V, the key bf16_rn(float(v) s) converted per key pair
 * with the two keys' scales (x193, exact where bit moves with one P'^T per scale block had
 * rounded each term twice), cost it 7.5% on the H200, and there the swap-AB kernel became the
 * faster of the two for 656 (x264: b 128 h_q 16 -4%, b 64 -7.5%), while per-tensor fp8 stays 5-13%
 * faster here.
 */
#define AK_SDR_PW 4 /* producer warps: 16 keys of each tile */
#define AK_SDR_NWG 3 /* consumer warpgroups: warpgroup c takes the tiles n with n % NWG == c */
#define AK_SDR_CT (128 * AK_SDR_NWG)
#define AK_SDR_THREADS (32 * AK_SDR_PW + AK_SDR_CT)
#define AK_SDR_NBUF 4
/* FULL mbarriers, lcm(NBUF, NWG): tile n completes on FULL[n % NFULL], so each barrier's phases are
   one warpgroup's tiles of one buffer, in order. With one FULL per buffer the buffer's previous
   tile would belong to another warpgroup, its records possibly still landing when this warpgroup
   arrives, and the parity wait would pass on the phase before it (x175: a fault under load). */
#define AK_SDR_NFULL 12
static_assert(AK_SDR_NFULL % AK_SDR_NBUF == 0 && AK_SDR_NFULL % AK_SDR_NWG == 0, "FULL per (buffer, warpgroup)");
#define AK_SDR_PREG 40 /* registers after setmaxnreg (128 x 40 + 384 x 152 <= 64 K) */
#define AK_SDR_CREG 152

template <int LAYOUT> struct ak_sdr_map {
    enum {
        CPY = ak_sd_geo<LAYOUT>::REC,
        STR = 592,                    /* stage row stride: 16 bytes mod 128 (conflict-free loads) */
        Q = 0,                        /* [9][16 heads][128 B] bf16, permuted columns, swizzled */
        P = Q + 9 * 16 * 128,         /* [NWG][16 heads][128 B] bf16 P'^T, swizzled */
        STAGE = P + AK_SDR_NWG * 2048, /* [NBUF][64 keys][STR] raw records */
        VALID = STAGE + AK_SDR_NBUF * 64 * STR, /* [NBUF][4 warps] u16 validity bits */
        RED = VALID + AK_SDR_NBUF * 8,          /* [NWG][4 warps][16] f32 column max, then sums */
        ML = RED + AK_SDR_NWG * 4 * 16 * 4,     /* [NWG][16][2] f32 final max and sum per warpgroup */
        BAR = (ML + AK_SDR_NWG * 16 * 2 * 4 + 7) & ~7, /* FULL[NFULL], EMPTY[NBUF], MERGE[2] */
        BYTES = BAR + (AK_SDR_NFULL + AK_SDR_NBUF + 2) * 8,
        OSTR = AK_SD_DV + 4 /* f32 row stride of the output staging (in STAGE) */
    };
};

/* Logical column (16 kk + j, j = 8 hi + 2 c + e) of the permuted k16 steps holding physical dim d. */
__device__ __forceinline__ int ak_sdr_col(int d) {
    if (d < 512) {
        const int r = d & 127;
        return 16 * (8 * (d >> 7) + ((r >> 2) & 7)) + 8 * ((r >> 1) & 1) + 2 * (r >> 5) + (r & 1);
    }
    const int r = d - 512;
    return 16 * (32 + ((r >> 2) & 3)) + 8 * ((r >> 1) & 1) + 2 * (r >> 4) + (r & 1);
}

/* Q [16 heads x 576] bf16 of token (r, i), heads h0 .., -> qs in permuted columns (zero rows past
   h_q); ct: consumer thread (AK_SDR_CT). */
__device__ __forceinline__ void ak_sdr_load_q(const ak_sd_params &p, uint8_t *qs, int64_t r, int64_t i, int h0,
                                              int ct) {
    const uint16_t *qb = p.q + r * p.q_s0 + i * p.q_s1;
    for (int it = ct; it < 16 * 72; it += AK_SDR_CT) { /* 8 dims per item */
        const int hl = it / 72, d0 = (it % 72) * 8, h = h0 + hl;
        const uint4 x = h < p.h_q ? ak_sd_ldq8(p, qb + (int64_t)h * p.q_s2 + d0) : make_uint4(0, 0, 0, 0);
        const uint32_t wd[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const int col = ak_sdr_col(d0 + 2 * k);
            *reinterpret_cast<uint32_t *>(qs + ak_sdx_off<16>(hl, col) + (col & 7) * 2) = wd[k];
        }
    }
}

/* The e4m3 bytes 0 and 2 (02) or 1 and 3 (13) of x -> bf16x2 of v 2^-120, exactly. */
__device__ __forceinline__ uint32_t ak_sdr_bf16_02(uint32_t x) {
    return ((x << 4) & 0x07f007f0u) | ((x << 8) & 0x80008000u);
}
__device__ __forceinline__ uint32_t ak_sdr_bf16_13(uint32_t x) {
    return ((x >> 4) & 0x07f007f0u) | (x & 0x80008000u);
}

template <int LAYOUT>
__device__ __forceinline__ void ak_sdr_produce(const ak_sd_params &p, uint8_t *smem, int64_t r, int64_t i,
                                               int32_t len0, int32_t len1, int t_begin, int t_end) {
    typedef ak_sdr_map<LAYOUT> M;
    const int w = (int)threadIdx.x >> 5, lane = (int)threadIdx.x & 31, key = 16 * w + (lane & 15);
    const uint32_t bar = ak_smem_addr(smem + M::BAR), stage = ak_smem_addr(smem + M::STAGE);
    int t = ak_sdw_next(p, t_begin, t_end, len0, len1);
    if (t >= t_end) return;
    bool ok;
    int32_t slot = ak_sdw_slot(p, r, i, t, key, len0, len1, ok);
    const uint64_t pol = ak_l2_policy(p.rec_first != 0); /* as ak_sdx_copy (x123) */
    for (int n = 0; t < t_end; n++) {
        const int b = n % AK_SDR_NBUF, f = n % AK_SDR_NFULL;
        const int tn = ak_sdw_next(p, t + 1, t_end, len0, len1);
        bool okn = false;
        const int32_t sn = ak_sdw_slot(p, r, i, tn < t_end ? tn : t, key, len0, len1, okn);
        okn = okn && tn < t_end;
        ak_mbar_wait(bar + 8 * (AK_SDR_NFULL + b), ((n / AK_SDR_NBUF) & 1) ^ 1); /* EMPTY[b] */
        const ak_sd_list &l = p.list[t >= p.list[0].tiles];
        int64_t ro = -1, so;
        if (lane < 16) ak_sdw_locate<LAYOUT>(l, ok ? slot : -1, ro, so);
        const uint32_t vm = __ballot_sync(0xffffffffu, ro >= 0);
        if (lane == 0) {
            *reinterpret_cast<uint16_t *>(smem + M::VALID + 8 * b + 2 * w) = (uint16_t)vm;
            ak_mbar_arrive_tx(bar + 8 * f, 16u * M::CPY); /* FULL[f] */
        }
        /* an invalid key copies zeros (spread over ak_sdx_zero's blocks, as ak_sdx_copy does), so
           the consumers' exact V conversion never meets stale bytes */
        if (lane < 16)
            ak_bulk_g2s_hint(stage + (uint32_t)((b * 64 + key) * M::STR),
                             ro >= 0 ? l.pool + ro : ak_sdx_zero + ((uint32_t)(w * 16 + lane) + 64u * blockIdx.x) % AK_SDX_ZBLK * 1024,
                             M::CPY, bar + 8 * f, pol);
        t = tn;
        slot = sn;
        ok = okn;
    }
}

template <int LAYOUT, int ORD>
__global__ void __launch_bounds__(AK_SDR_THREADS, 1) ak_sdr_main(const ak_sd_params p) {
    static_assert(LAYOUT == AK_LAYOUT_MLA_FP8_PERTENSOR, "656 and V4 run on ak_sdt_main");
    typedef ak_sdr_map<LAYOUT> M;
    extern __shared__ __align__(16) uint8_t smem_raw[];
    uint8_t *smem = smem_raw + ((1024u - (ak_smem_addr(smem_raw) & 1023u)) & 1023u);
    const uint32_t bar = ak_smem_addr(smem + M::BAR);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;

    const ak_sdt_work wk = ak_sdt_cta(p, 16);
    const int h0 = wk.h0;
    int pslot = wk.pslot, t_begin = wk.t_begin, t_end = wk.t_end;
    int64_t r = wk.r, i = wk.i;
    if (!ak_sd_take_early<ORD>(p, r, i, t_begin, t_end, pslot)) return;
    ak_sd_prefetch_q<16, ak_sd_geo<LAYOUT>::DQK>(p, r, i, h0, tid);

    if (tid == 0) {
        for (int f = 0; f < AK_SDR_NFULL; f++) ak_mbar_init(bar + 8 * f, AK_SDR_PW); /* FULL: one arrival per producer warp */
        for (int b = 0; b < AK_SDR_NBUF; b++) ak_mbar_init(bar + 8 * (AK_SDR_NFULL + b), 128); /* EMPTY: the tile's warpgroup */
        for (int k = 0; k < 2; k++) ak_mbar_init(bar + 8 * (AK_SDR_NFULL + AK_SDR_NBUF + k), AK_SDR_CT); /* MERGE: every warpgroup */
    }
    __syncthreads();
    ak_grid_dep_wait(); /* as in ak_sd_main: only parameters and shared memory above */
    if (!ak_sd_take_late<ORD>(p, r, i, t_begin, t_end, pslot)) return;
    const int32_t len0 = ak_sd_len(p.list[0], r, i), len1 = ak_sd_len(p.list[1], r, i);
    if (warp < AK_SDR_PW) {
        ak_setmaxnreg_dec<AK_SDR_PREG>();
        ak_sdr_produce<LAYOUT>(p, smem, r, i, len0, len1, t_begin, t_end);
        return;
    }
    ak_setmaxnreg_inc<AK_SDR_CREG>();
    const int ct = tid - 32 * AK_SDR_PW, w = (ct >> 5) & 3, g = lane >> 2, c4 = lane & 3;
    const int wg = __shfl_sync(0xffffffffu, ct >> 7, 0); /* warp-uniform: the descriptors stay uniform */
    uint8_t *qs = smem + M::Q;
    const uint32_t pta = ak_smem_addr(smem + M::P + wg * 2048); /* this warpgroup's P'^T */
    float *red = reinterpret_cast<float *>(smem + M::RED) + wg * 64;
    const uint32_t mbar = bar + 8 * (AK_SDR_NFULL + AK_SDR_NBUF);
    ak_sdr_load_q(p, qs, r, i, h0, ct);
    ak_fence_proxy_async(); /* Q writes -> the wgmma (async proxy) reads */
    ak_bar_sync(1, AK_SDR_CT);

    /* O^T m-tile mb: o[mb][4 j + 2 hr + e] = dim 128 (mb / 2) + 4 (8 w + g) + 2 (mb % 2) + hr,
       head 8 j + 2 c4 + e */
    float o[8][8];
#pragma unroll
    for (int mb = 0; mb < 8; mb++)
#pragma unroll
        for (int k = 0; k < 8; k++) o[mb][k] = 0.0f;
    float m_run[4], l_part[4]; /* head columns c = 2 j + e */
    const ak_sd_kscale kq = ak_sd_kscales<LAYOUT>(p);
#pragma unroll
    for (int c = 0; c < 4; c++) m_run[c] = -INFINITY, l_part[c] = 0.0f;
    const uint64_t dq0 = ak_wgmma_desc_sw128(ak_smem_addr(qs), 16, 1024);
    const uint64_t dp0 = ak_wgmma_desc_sw128(pta, 16, 1024);
    const int k0 = 16 * w + g; /* this thread's keys (S^T rows) k0 and k0 + 8 */
    const int bar1 = 2 + 2 * wg, bar2 = 3 + 2 * wg; /* this warpgroup's named barriers */

    int n = 0;
    for (int t = ak_sdw_next(p, t_begin, t_end, len0, len1); t < t_end; t = ak_sdw_next(p, t + 1, t_end, len0, len1), n++) {
        if (n % AK_SDR_NWG != wg) continue;
        const int b = n % AK_SDR_NBUF;
        ak_mbar_wait(bar + 8 * (n % AK_SDR_NFULL), (n / AK_SDR_NFULL) & 1); /* FULL[n % NFULL] */
        const uint8_t *st = smem + M::STAGE + b * 64 * M::STR;
        const uint8_t *rw[2] = {st + k0 * M::STR, st + (k0 + 8) * M::STR};
        const uint16_t *vb = reinterpret_cast<const uint16_t *>(smem + M::VALID + 8 * b);
        const uint32_t kv[2] = {(uint32_t)(vb[k0 >> 4] >> (k0 & 15)) & 1u,
                                (uint32_t)(vb[(k0 + 8) >> 4] >> ((k0 + 8) & 15)) & 1u};
        /* S^T: per half 128-dim block 4 k16 steps from the thread's 16 bytes of each key, then the
           RoPE; the groups alternate between two accumulators (half the dependent chain). Four steps
           per group keep the A fragments at 16 registers: at 512 threads ptxas checks the wgmma
           against the launch's 128 registers per thread and serializes them if they do not fit. */
        float s2[2][8];
#pragma unroll
        for (int grp = 0; grp < 9; grp++) {
            uint32_t a[4][4];
            ak_sdr_s_frag(rw, grp, c4, a);
            ak_wgmma_fence();
#pragma unroll
            for (int q = 0; q < 4; q++) {
                const int kk = 4 * grp + q;
                const uint32_t qo = (kk >> 2) * 2048 + (kk & 3) * 32;
                ak_wgmma_m64n16k16_rs(s2[grp & 1], a[q], dq0 + (qo >> 4), q > 0 || grp >= 2);
            }
            ak_wgmma_commit();
            ak_wgmma_wait<1>(); /* the group before has completed: its A registers are free */
        }
        ak_wgmma_wait0();
        float s[8];
#pragma unroll
        for (int k = 0; k < 8; k++) {
            ak_reg_fence(s2[0][k]);
            ak_reg_fence(s2[1][k]);
            s[k] = s2[0][k] + s2[1][k];
        }
        const bool ex = t >= p.list[0].tiles; /* this tile's list (ak_sd_kscale) */
        const float sl = ex ? kq.sl[1] : kq.sl[0], prel = ex ? kq.rel[1] : kq.rel[0];
#pragma unroll
        for (int k = 0; k < 8; k++) s[k] = kv[(k >> 1) & 1] ? s[k] * sl : -INFINITY;
        /* column max over the warpgroup's 64 keys; lazy rescale per head */
        float alpha[4], m_use[4];
        const bool rescale = ak_sdt_colmax<16>(s, m_run, m_use, alpha, red, w, g, c4, bar1);
        /* P'^T [head][key] = bf16(P prel 2^64) (V's bit moves carry 2^-120); invalid keys 0 */
        float pw[2];
#pragma unroll
        for (int hr = 0; hr < 2; hr++) pw[hr] = kv[hr] ? prel * 0x1p64f : 0.0f;
        ak_sdt_pwrite<16>(s, m_use, alpha, pw, l_part, pta, w, lane);
        if (__any_sync(0xffffffffu, rescale)) {
#pragma unroll
            for (int mb = 0; mb < 8; mb++)
#pragma unroll
                for (int k = 0; k < 8; k++) o[mb][k] *= alpha[(k >> 2) * 2 + (k & 1)];
        }
        ak_fence_proxy_async(); /* P'^T writes -> the wgmma reads */
        ak_bar_sync(bar2, 128);  /* P'^T complete; every thread has read the column maxima */
        /* O^T += V^T P'^T, 16 keys per step: keys 16 kc + 2 c4 (+ 1, + 8, + 9), 4 dims of each block */
#pragma unroll
        for (int mb = 0; mb < 8; mb++)
#pragma unroll
            for (int k = 0; k < 8; k++) ak_reg_fence(o[mb][k]);
#pragma unroll
        for (int kh = 0; kh < 8; kh++) { /* key step kc, dim blocks 2 hb, 2 hb + 1 (m-tiles 4 hb) */
            const int kc = kh >> 1, hb = kh & 1, kb = 16 * kc + 2 * c4;
            uint32_t a[4][4];
#pragma unroll
            for (int bl = 0; bl < 2; bl++) {
                const int blk = 2 * hb + bl;
                uint32_t x[4];
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    const uint8_t *rec = st + (kb + (j & 1) + 8 * (j >> 1)) * M::STR;
                    x[j] = *reinterpret_cast<const uint32_t *>(rec + 128 * blk + 4 * (8 * w + g));
                }
                /* bytes (key, dim) 01 of each key; the bit moves pair the keys */
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const uint32_t sel = e ? 0x7632u : 0x5410u;
                    const uint32_t lo = __byte_perm(x[0], x[1], sel);
                    const uint32_t hi = __byte_perm(x[2], x[3], sel);
                    a[2 * bl + e][0] = ak_sdr_bf16_02(lo);
                    a[2 * bl + e][1] = ak_sdr_bf16_13(lo);
                    a[2 * bl + e][2] = ak_sdr_bf16_02(hi);
                    a[2 * bl + e][3] = ak_sdr_bf16_13(hi);
                }
            }
            if (kh == 7) ak_mbar_arrive(bar + 8 * (AK_SDR_NFULL + b)); /* EMPTY[b]: the tile's last raw bytes are read */
            ak_wgmma_fence();
#pragma unroll
            for (int m = 0; m < 4; m++) {
                const int mb = 4 * hb + m;
                ak_wgmma_m64n16k16_rs(o[mb], a[m], dp0 + ((kc * 32) >> 4), 1);
            }
            ak_wgmma_commit();
            ak_wgmma_wait<1>();
        }
        ak_wgmma_wait0();
#pragma unroll
        for (int mb = 0; mb < 8; mb++)
#pragma unroll
            for (int k = 0; k < 8; k++) ak_reg_fence(o[mb][k]);
    }

    ak_grid_dep_launch(); /* the next kernel may start its CTAs during this epilogue */
    /* column sums (the last column maxima were read before the last tile's second barrier) */
    ak_sdt_colsum<16>(l_part, red, w, g, c4);
    ak_bar_sync(bar1, 128);
    float *ml = reinterpret_cast<float *>(smem + M::ML);
    if (w == 0 && g == 0) {
#pragma unroll
        for (int c = 0; c < 4; c++) {
            const int h = 8 * (c >> 1) + 2 * c4 + (c & 1);
            ml[(wg * 16 + h) * 2] = m_run[c];
            ml[(wg * 16 + h) * 2 + 1] = (red[h] + red[16 + h]) + (red[32 + h] + red[48 + h]);
        }
    }
    /* every warpgroup's state (every product has completed and every copy landed: the stages are
       free for the output staging); through mbarriers: racecheck reported this hand-off across a
       256-thread named barrier (x77, x79) */
    ak_mbar_arrive(mbar);
    ak_mbar_wait(mbar, 0);
    /* Per head: the merged max, sum and lse (the warpgroups' terms in order: the same bits every
       run), each warpgroup's O^T column times its factor (ak_sd_row_scale, times ak_sd_kscale::ref
       and 2^56, which undoes P' and V's factors) -> shared [wg][head][dim] f32, then rows
       out in 16-byte pieces, the NWG terms summed in a fixed order. */
    float *os = reinterpret_cast<float *>(smem + M::STAGE);
    float lse[4], am = 0.0f;
#pragma unroll
    for (int c = 0; c < 4; c++) {
        const int hl = 8 * (c >> 1) + 2 * c4 + (c & 1), h = h0 + hl;
        float mt = -INFINITY;
#pragma unroll
        for (int k = 0; k < AK_SDR_NWG; k++) mt = fmaxf(mt, ml[(16 * k + hl) * 2]);
        const float mu = mt == -INFINITY ? 0.0f : mt;
        float lt = 0.0f;
#pragma unroll
        for (int k = 0; k < AK_SDR_NWG; k++) lt += ml[(16 * k + hl) * 2 + 1] * ak_ex2(ml[(16 * k + hl) * 2] - mu);
        const float f = ak_sd_row_scale(pslot >= 0, mt, lt, ak_sd_sink(p, pslot >= 0, h), 1.0f, lse[c]) * kq.ref *
                        0x1p56f * ak_ex2(m_run[c] - mu);
        float a = 0.0f;
#pragma unroll
        for (int mb = 0; mb < 8; mb++)
#pragma unroll
            for (int hr = 0; hr < 2; hr++) {
                const float v = o[mb][4 * (c >> 1) + 2 * hr + (c & 1)] * f;
                os[(wg * 16 + hl) * M::OSTR + 128 * (mb >> 1) + 4 * (8 * w + g) + 2 * (mb & 1) + hr] = v;
                a = fmaxf(a, fabsf(v));
            }
        if (h < p.h_q) am = ak_sd_amax_add(am, a);
    }
    /* the partial rows' largest magnitude (ak_sd_part_scale) across the hand-off, in the column
       sums' words (read before the first one); a stored value sums NWG terms, so NWG times the
       largest term bounds it */
    uint32_t *amax = reinterpret_cast<uint32_t *>(smem + M::RED);
    float sc = 1.0f, inv = 1.0f;
    if (pslot >= 0) ak_sd_part_put((float)AK_SDR_NWG * am, amax, 4 * AK_SDR_NWG);
    ak_mbar_arrive(mbar + 8);
    ak_mbar_wait(mbar + 8, 0);
    if (pslot >= 0) sc = ak_sd_part_get(amax, 4 * AK_SDR_NWG, inv);
    if (wg == 0 && w == 0 && g == 0)
#pragma unroll
        for (int c = 0; c < 4; c++) {
            const int h = h0 + 8 * (c >> 1) + 2 * c4 + (c & 1);
            if (h < p.h_q) ak_sdt_store_lse(p, lse[c], inv, r, i, h, pslot);
        }
    for (int it = ct; it < 16 * (AK_SD_DV / 8); it += AK_SDR_CT) {
        const int hl = it / (AK_SD_DV / 8), d = (it % (AK_SD_DV / 8)) * 8, h = h0 + hl;
        if (h >= p.h_q) continue;
        float4 v[2];
#pragma unroll
        for (int q = 0; q < 2; q++) {
            v[q] = *reinterpret_cast<const float4 *>(os + hl * M::OSTR + d + 4 * q);
#pragma unroll
            for (int k = 1; k < AK_SDR_NWG; k++) {
                const float4 x = *reinterpret_cast<const float4 *>(os + (16 * k + hl) * M::OSTR + d + 4 * q);
                v[q] = make_float4(v[q].x + x.x, v[q].y + x.y, v[q].z + x.z, v[q].w + x.w);
            }
        }
        ak_sdt_store8(p, v[0], v[1], r, i, h, d, pslot, sc);
    }
}

/* ---- host side ----------------------------------------------------------------------------- */

/* Shared-memory bytes of the swap-AB kernel's map at nh (16 or 32) heads per CTA. */
template <int LAYOUT> static size_t ak_sdt_bytes(int nh) {
    return nh == 16 ? (size_t)ak_sdt_map<LAYOUT, 16>::BYTES : (size_t)ak_sdt_map<LAYOUT, 32>::BYTES;
}

/* Serves sparse decode on Hopper tensor cores. 656 and per-tensor fp8: h_q <= 32 on the swap-AB
   kernel (kernel 3, 16- or 32-head tiles; per-tensor fp8 at 16 heads with 16 or more tiles per
   CTA, on devices of at least 28 GB/s of copy per SM, the register-dequantizing kernel 4; at
   b 128 s_q 1 h_q 32 91 us against 135 for the 64-row warp-specialized kernel and 163 for the
   32-row mma.sync tiles, h_q 16 79 against 108 on mma.sync: docs/perf.md runs x13, x15) from 5
   (token, 16-head tile) units; h_q > 32 on the swap-AB kernel's 16-head tiles from 5 such units
   up to 4 (token, 64-head tile) units, and on the warp-specialized kernel (kernel 2) from 5 of
   those. V4 on the swap-AB kernel at h_q <= 32 from 16 units, above 32 on kernel 2 from 8.
   MLA_BF16 at h_q > 32 on the pipelined kernel (kernel 1). Splits from shapes and the SM count only
   (one CTA per SM): the fewest splits minimising waves x (tiles per CTA + 2), the 2 standing for a
   CTA's fixed work (Q tile, row writes). Without it b 128 h_q 128 took 32 splits (63 waves of one
   tile each, then a combine of 1 GB of partial rows: 1140 us in device run w1) over one split (2
   waves of 32 tiles). Declines fewer units (656 and per-tensor: 5 (token, 16-head tile) units; V4:
   16 such units at h_q <= 32, 8 (token, 64-head tile) units above; MLA_BF16: 8 of those): there the
   mma.sync tiles fill the SMs with fewer splits and less fixed work per CTA (at 1 to 4 units kernel
   3 is within -3..+5% of mma.sync, from 5 units -3..-14%: x228, x229). */
int ak_sdw_plan(const ak_context *ctx, const ak_mla_decode_args *a, ak_sd_plan *pl) {
    const int layout = (int)a->cache->layout;
    const int64_t b = a->q->shape[0], s_q = a->q->shape[1], h_q = a->q->shape[2];
    const int ws = layout == AK_LAYOUT_DSA_FP8_BLOCKSCALE || layout == AK_LAYOUT_MLA_FP8_PERTENSOR;
    const int v4 = layout == AK_LAYOUT_DSV4_FP8_UE8M0;
    if (a->block_table != NULL) return 0;
    /* 16 or 32 heads per CTA, nothing padded to 64 rows. 32-head tiles where they make 8 units or
       more; with fewer, a 32-head CTA's chain is longer than two 16-head CTAs' (x228: b 7 h_q 32
       -14%; from 8 units 16-head tiles lose 9-55%). V4 from 16 (token, 16-head tile) units: at 5
       to 8 it lost 6-7% to the mma.sync kernel, at 16 level, beyond 6-41% faster (x231). 656 and
       per-tensor above 32 heads take 16-head tiles below 5 (token, 64-head tile) units (x246: b 1
       h_q 128 -8%, b 3 h_q 64 -13%, b 2 h_q 128 -7% against the mma.sync kernel and kernel 2; at
       5 units +15..17%, at 6 and 7 +16..28%); V4 there gained nothing (-1..+2%) */
    const int64_t u16 = b * s_q * ((h_q + 15) / 16), u64 = b * s_q * ((h_q + AK_SDW_HEADS - 1) / AK_SDW_HEADS);
    if ((ws || v4) && (h_q <= 32 || (ws && u64 < 5))) {
        if (u16 < (v4 ? 16 : 5)) return 0;
        const int nh = h_q > 16 && h_q <= 32 && b * s_q * ((h_q + 31) / 32) >= 8 ? 32 : 16;
        pl->mw = nh / 16;
        pl->htiles = (int)((h_q + nh - 1) / nh);
        pl->kernel = 3;
        pl->smem = 1024 + (layout == AK_LAYOUT_DSA_FP8_BLOCKSCALE
                               ? ak_sdt_bytes<AK_LAYOUT_DSA_FP8_BLOCKSCALE>(nh)
                           : v4 ? ak_sdt_bytes<AK_LAYOUT_DSV4_FP8_UE8M0>(nh)
                                : ak_sdt_bytes<AK_LAYOUT_MLA_FP8_PERTENSOR>(nh));
    } else {
        if (h_q <= 32 || (!ws && !v4 && layout != AK_LAYOUT_MLA_BF16)) return 0;
        /* the warp-specialized kernel: 656 and per-tensor fp8 from 5 units (the swap-AB kernel
           below; x229: from 4 units 10-33% faster than the mma.sync kernel, at 1 and 2 units 3-18%
           slower), V4 from 8 (x229, x230: 3-14% faster than the pipelined kernel at 8 to 24 units,
           which had served V4 below 32); MLA_BF16 on the pipelined kernel from 8 */
        if (!ws && u64 < 8) return 0;
        pl->htiles = (int)((h_q + AK_SDW_HEADS - 1) / AK_SDW_HEADS);
        pl->kernel = ws || v4 ? 2 : 1;
        pl->mw = 4;
        pl->smem = 1024 /* alignment slack */ +
                   (pl->kernel == 1 ? (size_t)ak_sdw_smem_map<AK_LAYOUT_MLA_BF16>::BYTES
                    : v4 ? (size_t)ak_sdx_map<AK_LAYOUT_DSV4_FP8_UE8M0>::BYTES
                    : layout == AK_LAYOUT_DSA_FP8_BLOCKSCALE ? (size_t)ak_sdx_map<AK_LAYOUT_DSA_FP8_BLOCKSCALE>::BYTES
                                                             : (size_t)ak_sdx_map<AK_LAYOUT_MLA_FP8_PERTENSOR>::BYTES);
    }
    const int64_t topk = a->indices->shape[2];
    const int64_t etopk = a->extra_indices != NULL ? a->extra_indices->shape[2] : 0;
    pl->n_tiles = (int)((topk + AK_SD_KEYS - 1) / AK_SD_KEYS + (etopk + AK_SD_KEYS - 1) / AK_SD_KEYS);
    const int64_t slots = ctx->cuda != NULL ? ctx->cuda->prop.multiProcessorCount : 132;
    const int64_t base = b * s_q * pl->htiles;
    int64_t splits = 1, best = INT64_MAX;
    for (int64_t sp = 1; sp <= pl->n_tiles && sp <= 256; sp++) { /* 256: ak_sd_split_range */
        const int64_t waves = (base * sp + slots - 1) / slots, per = (pl->n_tiles + sp - 1) / sp;
        if (waves * (per + 2) < best) best = waves * (per + 2), splits = sp;
    }
    pl->splits = (int)splits;
    /* Per-tensor fp8 at h_q <= 16 (one 16-head tile) with 16 or more 64-key tiles per CTA, on a
       device of at least 28 GB/s of copy bandwidth per SM (the context's ceiling: H200 ~32, H100
       ~23): the register-dequantizing kernel, whose tiles cost fewer cycles but whose CTAs ~4 us
       more than the swap-AB kernel's (x82). On an H100, where the same call is nearer its memory
       bound, the swap-AB kernel stays (x175: 81.4 us against 77.7 for 656). On the H200 of
       session 61 (x264) per-tensor b 128 / 64 h_q 16 took 57.6 / 36.8 us here against 65.2 /
       37.8 on the swap-AB kernel, but 656, whose V costs two conversions per key pair here (x193),
       70.5 / 42.2 against 67.5 / 39.1: 656 keeps the swap-AB kernel. */
    const double bw_per_sm = ctx->info.copy_bytes_per_s / (double)slots;
    if (pl->kernel == 3 && layout == AK_LAYOUT_MLA_FP8_PERTENSOR && h_q <= 16 &&
        (pl->n_tiles + splits - 1) / splits >= 16 && bw_per_sm >= 28e9) {
        pl->kernel = 4;
        pl->smem = 1024 + (size_t)ak_sdr_map<AK_LAYOUT_MLA_FP8_PERTENSOR>::BYTES;
    }
    pl->rows = b * s_q * h_q;
    pl->ws_bytes = ak_sd_ws_bytes((int)splits, pl->rows);
    return 1;
}

/* The instance of kernel K<args..., ORD> for the call's row order: balanced pieces, longest first,
   or as given. */
#define AK_SD_BY_ORDER(p, K, ...)                                                                      \
    ((p).bal   ? (const void *)K<__VA_ARGS__, AK_SD_ORD_BAL>                                           \
     : (p).lpt ? (const void *)K<__VA_ARGS__, AK_SD_ORD_LPT>                                           \
               : (const void *)K<__VA_ARGS__, 0>)

/* Whether a call needs the warp-specialized kernels' general instance (GEN 1: ak_sd_extra): an extra
   list, or pages that are not a power of two. */
static bool ak_sd_general(const ak_sd_params &p) { return p.list[1].tiles > 0 || p.list[0].page_shift < 0; }

/* AK_SD_BY_ORDER for the warp-specialized kernels, whose one-split calls in the given order have an
   instance of their own (AK_SD_ORD_ONE). Their order-0 instances, built for partial rows only
   (x315, x316; the swap-AB kernel's, x322), must never run a call of one split: this is the only
   place that picks them. */
#define AK_SD_BY_ORDER_ONE(p, K, ...)                                                                  \
    ((p).bal || (p).lpt || (p).splits != 1 ? AK_SD_BY_ORDER(p, K, __VA_ARGS__)                         \
                                            : (const void *)K<__VA_ARGS__, AK_SD_ORD_ONE>)

/* The instance of a warp-specialized kernel K<args..., GEN, ORD> for the call. */
#define AK_SD_BY_CALL(p, K, ...)                                                                       \
    (ak_sd_general(p) ? AK_SD_BY_ORDER_ONE(p, K, __VA_ARGS__, 1) : AK_SD_BY_ORDER_ONE(p, K, __VA_ARGS__, 0))

/* One launch of kernel fn (threads per CTA, pl.smem dynamic shared memory) over the plan's grid, as
   a programmatic dependent launch. */
static ak_status ak_sdw_launch_fn(ak_context *ctx, const void *fn, const char *name, int threads,
                                  const ak_sd_params &p, const ak_sd_plan &pl) {
    AK_CUDA_TRY(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)pl.smem));
    const int64_t grid = ak_sd_main_ctas(p, pl);
    void *args[] = {(void *)&p};
    AK_CUDA_TRY(ak_launch_pdl(ctx, fn, (unsigned)grid, threads, pl.smem, args));
    AK_CUDA_CHECK_LAUNCH(name);
    return AK_OK;
}

template <int LAYOUT>
static ak_status ak_sdx_launch_t(ak_context *ctx, const ak_sd_params &p, const ak_sd_plan &pl) {
    static_assert(1024 + ak_sdx_map<LAYOUT>::BYTES <= 232448, "shared memory of ak_sdx_main (227 KB per block)");
    return ak_sdw_launch_fn(ctx, AK_SD_BY_CALL(p, ak_sdx_main, LAYOUT), "ak_sdx_main", AK_SDX_THREADS, p, pl);
}

template <int LAYOUT, int NH>
static ak_status ak_sdt_launch_t(ak_context *ctx, const ak_sd_params &p, const ak_sd_plan &pl) {
    static_assert(1024 + ak_sdt_map<LAYOUT, NH>::BYTES <= 232448, "shared memory of ak_sdt_main (227 KB per block)");
    return ak_sdw_launch_fn(ctx, AK_SD_BY_CALL(p, ak_sdt_main, LAYOUT, NH), "ak_sdt_main", AK_SDT_THREADS, p, pl);
}

template <int LAYOUT>
static ak_status ak_sdr_launch_t(ak_context *ctx, const ak_sd_params &p, const ak_sd_plan &pl) {
    static_assert(1024 + ak_sdr_map<LAYOUT>::BYTES <= 232448, "shared memory of ak_sdr_main (227 KB per block)");
    static_assert(AK_SDR_NWG * 16 * (AK_SD_DV + 4) * 4 <= AK_SDR_NBUF * 64 * ak_sdr_map<LAYOUT>::STR,
                  "output staging fits the stages");
    return ak_sdw_launch_fn(ctx, AK_SD_BY_ORDER(p, ak_sdr_main, LAYOUT), "ak_sdr_main", AK_SDR_THREADS, p, pl);
}

template <int LAYOUT>
static ak_status ak_sdw_launch_t(ak_context *ctx, const ak_sd_params &p, const ak_sd_plan &pl) {
    return ak_sdw_launch_fn(ctx, AK_SD_BY_ORDER(p, ak_sdw_main, LAYOUT), "ak_sdw_main", AK_SDW_THREADS, p, pl);
}

ak_status ak_sdw_launch(ak_context *ctx, const ak_sd_params &p, const ak_sd_plan &pl, int layout) {
    if (pl.kernel == 4) return ak_sdr_launch_t<AK_LAYOUT_MLA_FP8_PERTENSOR>(ctx, p, pl);
    if (pl.kernel == 3) {
        if (layout == AK_LAYOUT_DSA_FP8_BLOCKSCALE)
            return pl.mw == 1 ? ak_sdt_launch_t<AK_LAYOUT_DSA_FP8_BLOCKSCALE, 16>(ctx, p, pl)
                              : ak_sdt_launch_t<AK_LAYOUT_DSA_FP8_BLOCKSCALE, 32>(ctx, p, pl);
        if (layout == AK_LAYOUT_DSV4_FP8_UE8M0)
            return pl.mw == 1 ? ak_sdt_launch_t<AK_LAYOUT_DSV4_FP8_UE8M0, 16>(ctx, p, pl)
                              : ak_sdt_launch_t<AK_LAYOUT_DSV4_FP8_UE8M0, 32>(ctx, p, pl);
        return pl.mw == 1 ? ak_sdt_launch_t<AK_LAYOUT_MLA_FP8_PERTENSOR, 16>(ctx, p, pl)
                          : ak_sdt_launch_t<AK_LAYOUT_MLA_FP8_PERTENSOR, 32>(ctx, p, pl);
    }
    switch (layout) {
    case AK_LAYOUT_MLA_BF16: return ak_sdw_launch_t<AK_LAYOUT_MLA_BF16>(ctx, p, pl);
    case AK_LAYOUT_DSV4_FP8_UE8M0: return ak_sdx_launch_t<AK_LAYOUT_DSV4_FP8_UE8M0>(ctx, p, pl);
    case AK_LAYOUT_MLA_FP8_PERTENSOR: return ak_sdx_launch_t<AK_LAYOUT_MLA_FP8_PERTENSOR>(ctx, p, pl);
    case AK_LAYOUT_DSA_FP8_BLOCKSCALE: return ak_sdx_launch_t<AK_LAYOUT_DSA_FP8_BLOCKSCALE>(ctx, p, pl);
    default:
        return ak_fail(AK_ERR_UNSUPPORTED, "ak_mla_decode: cache layout %d has no sparse CUDA kernel", layout);
    }
}
