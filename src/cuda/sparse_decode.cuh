/* sparse_decode.cuh -- what the sparse MLA decode kernels share: the parameter block, the KV
   split rule, the plan, per-layout record geometry and the dequantization helpers. The main
   kernels and ak_sd_combine all read and write the same partial-row format:
   oacc [splits, rows, 512] fp16 rows, lacc [splits, rows] (lse in log2 units, factor): a split's
   normalized partial row is factor times its fp16 row (ak_sd_part_scale). */
#ifndef AK_SPARSE_DECODE_CUH
#define AK_SPARSE_DECODE_CUH

#include "common/numeric.h"
#include "cuda/cuda_backend.h"
#include "cuda/ptx.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <stdint.h>

#define AK_SD_KEYS 64 /* keys per tile */
#define AK_SD_LPT_MAX 4096 /* token rows of a call whose CTAs take rows longest first (12 bits of ak_sd_lpt_order's keys) */
#define AK_SD_BAL_MAX 4096   /* token rows of a call balanced by its lengths (12 bits of ak_sd_balance's sort keys) */
#define AK_SD_BAL_SPLITS 32  /* pieces of one token row at most (one lane each in ak_sd_bal_combine) */
#define AK_SD_DV 512

/* The wgmma kernels' instances by how a CTA finds its work: from blockIdx (splits fixed by shapes),
   its row from ak_sd_lpt_order's longest-first order, or its piece from ak_sd_balance's schedule;
   the warp-specialized kernels have a fourth, from blockIdx with one split (their Q loads paced,
   x312, x323), and there order 0 serves split calls only (x315, x322). */
#define AK_SD_ORD_LPT 1
#define AK_SD_ORD_BAL 2
#define AK_SD_ORD_ONE 3

struct ak_sd_list {
    const uint8_t *pool;   /* the cache pool */
    int64_t page_stride;   /* bytes */
    int32_t page_size;
    int32_t page_shift;    /* log2(page_size) for a power of two (every common size), else -1 */
    uint32_t capacity;     /* num_pages * page_size (rule I1 bound) */
    const float *k_scale_ptr;
    float k_scale;
    const int32_t *idx;    /* [b, s_q, topk] int32 */
    int64_t idx_s0, idx_s1;
    int32_t topk;
    const int32_t *len;    /* [b] or [b, s_q] int32, or NULL (= topk) */
    int64_t len_s0, len_s1; /* len_s1 = 0 for the [b] form */
    int32_t tiles;         /* ceil(topk / 64) */
};

/* The kernels' parameter block. Its layout moves the small calls: shifting every field by 16 to 48
   bytes, or aligning the block to 64 (a CUtensorMap member would), cost them 0.5-1.8% where its
   size did not (docs/perf.md, session 82). Append new fields at the end, keep it 8-byte aligned. */
struct ak_sd_params {
    const uint16_t *q; /* [b, s_q, h_q, d_qk] bf16 */
    int64_t q_s0, q_s1, q_s2;
    int32_t q_vec;      /* q rows 16-byte aligned: vector loads */
    int32_t b, s_q, h_q, htiles, splits;
    ak_sd_list list[2]; /* main, extra */
    float scale_log2;   /* softmax_scale * log2(e) */
    const float *sink;  /* [h_q] f32 or NULL */
    void *out;          /* [b, s_q, h_q, 512] bf16 or f32 */
    int32_t out_f32;
    int32_t out_bulk;   /* every output row 16-byte aligned: the 64-head kernels store rows by bulk copy */
    int32_t rec_first;  /* the records' lines evict-first in L2 (ak_sd_rec_first) */
    int32_t lpt;        /* token rows taken longest first (ak_sd_lpt_order): several waves, one split, lengths */
    const int32_t *lpt_rows; /* [b * s_q] workspace: the rows in that order */
    int32_t bal;        /* balanced by the lengths (ak_sd_balance): each CTA's piece is read from bal_work */
    const int4 *bal_work; /* [pieces] workspace: (token row or -1 past the last piece, t0, t1, partial slot or -1) */
    int32_t bal_slots;  /* partial slots of the workspace (a schedule's slots are checked against it) */
    int32_t bal_reuse;  /* the schedule was made by an earlier call (AK_BALANCE_REUSE): read before the wait */
    const int2 *bal_rows; /* [b * s_q] workspace: (first partial slot, pieces) of each token row; then [b * s_q + 1]
                             int32: the rows of several pieces, their count (ak_sd_bal_combine) */
    int64_t o_s0, o_s1, o_s2;
    float *lse;         /* [b, s_q, h_q] f32 or NULL */
    int64_t l_s0, l_s1, l_s2;
    __half *oacc;       /* [slots, h_q, 512] fp16 workspace, scaled rows (slots: splits x b s_q, or bal's pieces) */
    float2 *lacc;       /* [slots, h_q] workspace: lse (log2 units, -inf = empty), factor */
    /* splits, htiles and s_q as invariant divisors (ak_divu_q), and the main and extra lists' tiles
       over splits, quotient and remainder: a CTA's work from blockIdx (ak_sd_cta_of) */
    ak_divu dv_splits, dv_htiles, dv_sq;
    int32_t tq, tr;
};
static_assert(alignof(ak_sd_params) == 8, "ak_sd_params keeps 8-byte alignment (see above)");

/* Record geometry per layout: d_qk, 16-byte source chunks per token. */
template <int LAYOUT> struct ak_sd_geo;
template <> struct ak_sd_geo<AK_LAYOUT_MLA_BF16> { enum { DQK = 576, CPT = 72, REC = 1152 }; };
template <> struct ak_sd_geo<AK_LAYOUT_MLA_FP8_PERTENSOR> { enum { DQK = 576, CPT = 36, REC = 576 }; };
template <> struct ak_sd_geo<AK_LAYOUT_DSA_FP8_BLOCKSCALE> { enum { DQK = 576, CPT = 40, REC = 656 }; };
template <> struct ak_sd_geo<AK_LAYOUT_DSV4_FP8_UE8M0> { enum { DQK = 512, CPT = 36, REC = 576 }; };

__device__ __forceinline__ uint32_t ak_sd_pack_bf16(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
}

/* The e4m3 pair in half H of w (low byte first) -> bf16x2 of bf16_rn(float(v) s0), bf16_rn(float(v)
   s1) (s 1: bf16(v), exact; e4m3 -> half is exact). The half is picked in the conversion's operand,
   not by a shift: one instruction less per pair (x82, x109). Two scales pair two keys of one dim
   (scripts/sdq_probe.cu's V). */
template <int H> __device__ __forceinline__ uint32_t ak_sd_deq2s(uint32_t w, float s0, float s1) {
    uint32_t h;
    if (H) asm("{\n.reg .b16 l, h;\nmov.b32 {l, h}, %1;\ncvt.rn.f16x2.e4m3x2 %0, h;\n}\n" : "=r"(h) : "r"(w));
    else asm("{\n.reg .b16 l, h;\nmov.b32 {l, h}, %1;\ncvt.rn.f16x2.e4m3x2 %0, l;\n}\n" : "=r"(h) : "r"(w));
    const float2 f = __half22float2(*reinterpret_cast<const __half2 *>(&h));
    return ak_sd_pack_bf16(f.x * s0, f.y * s1);
}
template <int H> __device__ __forceinline__ uint32_t ak_sd_deq2(uint32_t w, float s) { return ak_sd_deq2s<H>(w, s, s); }

/* 16 e4m3 bytes -> 16 bf16 of bf16_rn(float(q) * s), as two uint4. */
__device__ __forceinline__ void ak_sd_dequant16(uint4 raw, float s, uint4 &lo, uint4 &hi) {
    lo = make_uint4(ak_sd_deq2<0>(raw.x, s), ak_sd_deq2<1>(raw.x, s), ak_sd_deq2<0>(raw.y, s), ak_sd_deq2<1>(raw.y, s));
    hi = make_uint4(ak_sd_deq2<0>(raw.z, s), ak_sd_deq2<1>(raw.z, s), ak_sd_deq2<0>(raw.w, s), ak_sd_deq2<1>(raw.w, s));
}

/* The wgmma A fragments of group grp (k16 steps 4 grp .. 4 grp + 3) of S^T = K Q^T with K from
   registers (ak_sdr_main's operand map, per-tensor fp8: bf16(v), exact), for the thread's two keys,
   whose records are rw[0] (rows 16 w + g) and rw[1] (+ 8): groups 0..7 convert the thread's 16
   bytes of half 128-dim block grp (lane c4: bytes 32 c4 + 16 (grp & 1) of block grp / 2), group 8
   those of the RoPE (bytes 512 + 16 c4). a[q] feeds step 4 grp + q. */
__device__ __forceinline__ void ak_sdr_s_frag(const uint8_t *const (&rw)[2], int grp, int c4,
                                              uint32_t (&a)[4][4]) {
    const int off = grp < 8 ? 128 * (grp >> 1) + 32 * c4 + 16 * (grp & 1) : 512 + 16 * c4;
#pragma unroll
    for (int hr = 0; hr < 2; hr++) {
        const uint4 x = *reinterpret_cast<const uint4 *>(rw[hr] + off);
        const uint32_t wd[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
        for (int q = 0; q < 4; q++) {
            a[q][hr] = ak_sd_deq2<0>(wd[q], 1.0f);
            a[q][2 + hr] = ak_sd_deq2<1>(wd[q], 1.0f);
        }
    }
}

/* Per-tensor fp8 (MLA_FP8_PERTENSOR): the key is float(q) k_scale in fp32 (layouts.md 4), which
   bf16 cannot hold unless k_scale is a power of two. So the kernels put bf16(q), exact, in their K
   buffers and apply the scales outside: S times sl[l] (the softmax scale in log2 units times list
   l's k_scale), P times rel[l] = k_scale[l] / ref before its bf16 rounding (1 unless the extra list
   has its own scale), and the finished rows times ref (list 0's scale, or list 1's where list 0's
   is 0). For the other layouts, whose keys carry their scales, sl is the softmax scale and the rest
   is 1. */
struct ak_sd_kscale {
    float sl[2], rel[2], ref;
};
template <int LAYOUT> __device__ __forceinline__ ak_sd_kscale ak_sd_kscales(const ak_sd_params &p) {
    ak_sd_kscale k;
    float s[2] = {1.0f, 1.0f};
    k.rel[0] = k.rel[1] = k.ref = 1.0f;
    if (LAYOUT == AK_LAYOUT_MLA_FP8_PERTENSOR) {
        s[0] = p.list[0].k_scale_ptr != NULL ? *p.list[0].k_scale_ptr : p.list[0].k_scale;
        s[1] = p.list[1].tiles == 0 ? s[0] : p.list[1].k_scale_ptr != NULL ? *p.list[1].k_scale_ptr : p.list[1].k_scale;
        k.ref = s[0] != 0.0f ? s[0] : s[1];
#pragma unroll
        for (int l = 0; l < 2; l++) k.rel[l] = k.ref != 0.0f ? s[l] / k.ref : 0.0f;
    }
#pragma unroll
    for (int l = 0; l < 2; l++) k.sl[l] = p.scale_log2 * s[l];
    return k;
}

/* The factor a finished row h (running max m2 in log2 units, row sum lsum) is scaled by, and the lse
   it reports: with one split the output row's (1 / l and the sink; natural log, +inf for a row
   with no valid key), else this split's normalized partial row's (1 / l; log2 units, -inf when
   empty) for ak_sd_combine; both times vs (ak_sd_kscale::ref). sink: the row's attention sink
   (ak_sd_sink), -inf for none. The logarithm and the reciprocal are the SFU's (lg2.approx, abs
   error 2^-22.6; __fdividef, 2 ulp), far under the lse tolerance and the rows' 16-bit rounding:
   the accurate log2f and division were ~40 dependent instructions and two branches per row, which
   kept the rows of one thread from overlapping (~1.5k cycles of the swap-AB epilogue at 32 heads,
   session 42's profile). */
__device__ __forceinline__ float ak_sd_row_scale(bool part, float m2, float lsum, float sink, float vs, float &lse) {
    const bool any = lsum > 0.0f;
    const float lse2 = any ? m2 + __log2f(lsum) : -INFINITY, rl = __fdividef(vs, lsum);
    if (part) {
        lse = lse2;
        return any ? rl : 0.0f;
    }
    lse = any ? lse2 * 0.69314718055994531f : INFINITY;
    float f = any ? rl : 0.0f;
    if (any && sink != -INFINITY) f = __fdividef(f, 1.0f + expf(sink - lse));
    return f;
}

/* Head h's attention sink (natural-log units) for a row's factor, or -inf where the call has none,
   h is a padded row past h_q, or the row is a split's partial row (part: the combine applies the
   sink once, to the merged row), so that no load is issued for it. The combines load it beside
   their (lse, factor) pairs and the V4 instance of the 64-head kernel beside Q: read where the
   factor is made, its L2 round trip sat after the combine's merge (x208). */
__device__ __forceinline__ float ak_sd_sink(const ak_sd_params &p, bool part, int h) {
    return !part && p.sink != NULL && h < p.h_q ? p.sink[h] : -INFINITY;
}

/* Partial rows (splits > 1) are stored in fp16, half the bytes of f32 to write and to read back in
   ak_sd_combine (b 8 h_q 128 -5%, V4 b 8 -15%, session 25), with a factor per row that
   the combine multiplies the row's weight by. A normalized partial row is a convex combination of
   V rows, but V has no bound (e4m3 times an fp32 scale, or bf16), so each CTA scales the values it
   stores (the normalized rows, or O before its 1 / l, which then goes into the factor) by 2^e,
   e = 141 - (biased exponent of their largest finite magnitude): that magnitude lands in
   [2^14, 2^15), below fp16's 65504 after rounding, and every value down to 2^-28 of it stays a
   normal fp16 (relative error 2^-11, under the bf16 P's 2^-9 per weight). e is at most 126 so
   that 2^-e is a normal float. am is this thread's largest magnitude (finite, >= 0); the CTA's
   maximum goes through one word per warp in red (NW words of free shared memory) and named
   barrier `bar` over the NW warps' threads, which every one of them reaches (ak_sd_part_put
   before the caller's own hand-off and ak_sd_part_get after it, where it has one). Returns 2^e;
   inv = 2^-e. */
__device__ __forceinline__ void ak_sd_part_put(float am, uint32_t *red, int nw) {
    /* non-negative floats order as their bits do */
    const uint32_t m = __reduce_max_sync(0xffffffffu, __float_as_uint(am));
    if ((threadIdx.x & 31) == 0) red[(threadIdx.x >> 5) % nw] = m;
}
__device__ __forceinline__ float ak_sd_part_get(const uint32_t *red, int nw, float &inv) {
    uint32_t m = red[0];
    for (int k = 1; k < nw; k++) m = max(m, red[k]);
    const int e = min(141 - (int)(m >> 23), 126);
    inv = __uint_as_float((uint32_t)(127 - e) << 23);
    return __uint_as_float((uint32_t)(127 + e) << 23);
}
__device__ __forceinline__ float ak_sd_part_scale(float am, uint32_t *red, int nw, int bar, float &inv) {
    ak_sd_part_put(am, red, nw);
    ak_bar_sync(bar, 32 * nw);
    return ak_sd_part_get(red, nw, inv);
}

/* max(am, x) over the finite x only: a row whose attention reached an infinite V is not finite
   anyway, and must not push the other rows of its CTA out of fp16's range */
__device__ __forceinline__ float ak_sd_amax_add(float am, float x) { return x < INFINITY ? fmaxf(am, x) : am; }

/* The largest |o| of row hr in an mma D fragment (o[4 j + 2 hr] and + 1, j < NJ); NaN is ignored. */
template <int NJ> __device__ __forceinline__ float ak_sd_frag_amax(const float *o, int hr) {
    float a = 0.0f, b = 0.0f;
#pragma unroll
    for (int j = 0; j < NJ; j++) a = fmaxf(a, fabsf(o[4 * j + 2 * hr])), b = fmaxf(b, fabsf(o[4 * j + 2 * hr + 1]));
    return fmaxf(a, b);
}

__device__ __forceinline__ uint32_t ak_sd_pack_f16(float lo, float hi) {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
}

/* Q rows h0 .. h0 + NH - 1 (those below h_q) of token (r, i) into L2, one bulk prefetch per row by
   threads t < NH, issued before the dependency wait so that the fetch overlaps the previous grid's
   end. Without it the 64-head kernel's consumers had their 72 KB of Q ~13k cycles after that wait,
   ~4.5k after the first K buffer (b 128 h_q 64 on an H100; in a DSA step the indexer streams its
   cache between Q's writer and this kernel, so Q comes from DRAM). Only in unsplit calls (large
   batches, where every CTA's Q is its own and a burst beside its first records), and only by the
   first wave (blockIdx below %nsmid, which bounds the SM count; one CTA per SM): later CTAs start
   after the previous grid has ended, with nothing to overlap (V4-Pro +0.5..1% and b 128 s_q 2
   -0.6..+1.5% when they asked too), and the short CTAs of split calls, whose splits share their Q
   through L2 anyway, lost ~0.2 us with split 0 asking (b 8 h_q 16; run x177). A p.lpt call's CTAs
   learn their row after the wait; they ask for the row of blockIdx order, which is theirs when
   the rows were already in order (equal lengths), and some other first-wave row's otherwise. Rows
   must be 16-byte aligned (q_vec). */
template <int NH, int DQK>
__device__ __forceinline__ void ak_sd_prefetch_q(const ak_sd_params &p, int64_t r, int64_t i, int h0, int t) {
    uint32_t nsm;
    asm("mov.u32 %0, %%nsmid;" : "=r"(nsm));
    if (p.splits == 1 && r < p.b && blockIdx.x < nsm && p.q_vec && t < NH && h0 + t < p.h_q)
        ak_bulk_prefetch_l2(p.q + r * p.q_s0 + i * p.q_s1 + (int64_t)(h0 + t) * p.q_s2, DQK * 2);
}

/* Partial slot of split `split` of token row ri (r s_q + i), or -1 with one split (the CTA writes
   the output rows). */
__device__ __forceinline__ int ak_sd_split_slot(const ak_sd_params &p, int split, int64_t ri) {
    return p.splits > 1 ? (int)(split * ((int64_t)p.b * p.s_q) + ri) : -1;
}

/* Row index of head h in partial slot `pslot` of the workspace (a CTA's slot: split s of token row
   ri is s b s_q + ri, a balanced call's pieces take the slots ak_sd_balance gave them). */
__device__ __forceinline__ int64_t ak_sd_part_row(const ak_sd_params &p, int pslot, int h) {
    return (int64_t)pslot * p.h_q + h;
}

/* Writes a finished row h of token (r, i) from an mma D fragment: o[4 j + 2 hr] and
   o[4 j + 2 hr + 1] hold dims d0 + 8 j + 2 c4 and + 1 of the row, for j < NJ; f and lse from
   ak_sd_row_scale. The output row (O times f) and its lse, written when `lse_writer` (one thread
   per row); rows h >= h_q are not stored. (One split.) */
template <int NJ>
__device__ __forceinline__ void ak_sd_write_out_row(const ak_sd_params &p, const float *o, int hr, int64_t r,
                                                    int64_t i, int h, float f, float lse, int d0, int c4,
                                                    bool lse_writer) {
    if (h >= p.h_q) return;
    if (p.lse != NULL && lse_writer) p.lse[r * p.l_s0 + i * p.l_s1 + h * p.l_s2] = lse;
    const int64_t ob = r * p.o_s0 + i * p.o_s1 + h * p.o_s2;
#pragma unroll
    for (int j = 0; j < NJ; j++) {
        const int d = d0 + j * 8 + c4 * 2;
        const float v0 = o[4 * j + 2 * hr] * f, v1 = o[4 * j + 2 * hr + 1] * f;
        if (p.out_f32)
            *reinterpret_cast<float2 *>((float *)p.out + ob + d) = make_float2(v0, v1);
        else
            *reinterpret_cast<uint32_t *>((uint16_t *)p.out + ob + d) = ak_sd_pack_bf16(v0, v1);
    }
}

/* The same fragment as this split's partial row (splits > 1): O times sc (ak_sd_part_scale of the
   CTA's largest |O|, inverse inv) and its (lse, f inv), so the row's factor goes to the combine
   and one multiply per value stays here. NJ is even. Every lane of the warp calls it (lanes trade
   values); rows h >= h_q are not stored. */
template <int NJ>
__device__ __forceinline__ void ak_sd_write_part_row(const ak_sd_params &p, const float *o, int hr, int64_t r,
                                                     int64_t i, int h, int pslot, float f, float lse, float sc,
                                                     float inv, int d0, int c4, bool lse_writer) {
    const bool st = h < p.h_q;
    const int64_t row = ak_sd_part_row(p, pslot, h);
    if (st && lse_writer) p.lacc[row] = make_float2(lse, f * inv);
    __half *dst = p.oacc + row * AK_SD_DV;
    /* A quad holds 8 dims of the row per j: 16 fp16 bytes, half a 32-byte sector. Lanes c4 and
       c4 ^ 1 trade one pair so that each stores 8 bytes of j (even lane) or j + 1 (odd lane), and
       the quad's stores of j and j + 1 fill one whole sector (half-sector stores took V4 b 8 3.6
       us longer, session 25). */
    const bool odd = c4 & 1;
#pragma unroll
    for (int j = 0; j < NJ; j += 2) {
        const uint32_t a = ak_sd_pack_f16(o[4 * j + 2 * hr] * sc, o[4 * j + 2 * hr + 1] * sc);
        const uint32_t b = ak_sd_pack_f16(o[4 * j + 4 + 2 * hr] * sc, o[4 * j + 4 + 2 * hr + 1] * sc);
        const uint32_t x = __shfl_xor_sync(0xffffffffu, odd ? a : b, 1);
        if (st)
            *reinterpret_cast<uint2 *>(dst + d0 + 8 * (j + odd) + 2 * (c4 & 2)) =
                odd ? make_uint2(x, b) : make_uint2(a, x);
    }
}

/* Page of slot s (0 <= s < capacity): a shift for power-of-two pages, a division otherwise. POW2:
   the caller knows the pages are a power of two, so the division's branch is not compiled. */
template <bool POW2 = false>
__device__ __forceinline__ int32_t ak_sd_page(const ak_sd_list &l, int32_t s) {
    return POW2 || l.page_shift >= 0 ? s >> l.page_shift : s / l.page_size;
}

/* Tiles [t0, t1) of the concatenated main + extra tile list that split `s` of `splits` owns:
   floor(s n_tiles / splits) = s tq + floor(s tr / splits), tr < splits <= 256 (the plans). */
__device__ __forceinline__ void ak_sd_split_range(const ak_sd_params &p, int s, int &t0, int &t1) {
    t0 = s * p.tq + (int)ak_divu_q((uint32_t)(s * p.tr), p.dv_splits);
    t1 = (s + 1) * p.tq + (int)ak_divu_q((uint32_t)((s + 1) * p.tr), p.dv_splits);
}

/* Token row ri = r s_q + i (below 2^31: a grid's CTA count) as (r, i). SGN: computed as signed
   values (the swap-AB kernels), else unsigned. The two are the same numbers, but ptxas schedules
   the kernels differently by them (x303, x303c, session 86): unsigned, the swap-AB producers' tile
   walk left the uniform registers and b 128 h_q 16 lost 3%; signed, the 64-head V4 calls lost
   0.9-2.1%. */
template <int SGN = 0>
__device__ __forceinline__ void ak_sd_row_of(const ak_sd_params &p, uint32_t ri, int64_t &r, int64_t &i) {
    if (SGN) {
        const int32_t q = (int32_t)ak_divu_q(ri, p.dv_sq);
        r = q;
        i = (int32_t)ri - q * p.s_q;
    } else {
        const uint32_t q = ak_divu_q(ri, p.dv_sq);
        r = q;
        i = ri - q * (uint32_t)p.s_q;
    }
}

/* A CTA's split, head tile and token row from blockIdx.x (splits fastest, then head tiles). */
__device__ __forceinline__ void ak_sd_cta_of(const ak_sd_params &p, int &split, int &ht, uint32_t &ri) {
    const uint32_t cta = blockIdx.x, rest = ak_divu_q(cta, p.dv_splits);
    ri = ak_divu_q(rest, p.dv_htiles);
    split = (int)(cta - rest * (uint32_t)p.splits);
    ht = (int)(rest - ri * (uint32_t)p.htiles);
}

/* Row length of list `l` for (r, i): clamped to [0, topk]. */
__device__ __forceinline__ int32_t ak_sd_len(const ak_sd_list &l, int64_t r, int64_t i) {
    if (l.len == NULL) return l.topk;
    int32_t n = l.len[r * l.len_s0 + i * l.len_s1];
    return n < 0 ? 0 : (n > l.topk ? l.topk : n);
}

/* 64-key tiles of token row `row` (r s_q + i) inside its lengths, both lists. */
__device__ __forceinline__ int ak_sd_row_tiles(const ak_sd_params &p, int64_t row) {
    int64_t r, i;
    ak_sd_row_of(p, (uint32_t)row, r, i);
    return (ak_sd_len(p.list[0], r, i) + AK_SD_KEYS - 1) / AK_SD_KEYS +
           (ak_sd_len(p.list[1], r, i) + AK_SD_KEYS - 1) / AK_SD_KEYS;
}

/* The token (r, i) of a CTA of a p.lpt launch (the kernels' LPT instance, one split): slot
   blockIdx / htiles of the longest-first row order that ak_sd_lpt_order wrote before the kernel. */
__device__ __forceinline__ void ak_sd_lpt_take(const ak_sd_params &p, int64_t &r, int64_t &i) {
    ak_sd_row_of(p, (uint32_t)p.lpt_rows[ak_divu_q(blockIdx.x, p.dv_htiles)], r, i);
}

/* The piece of a CTA of a p.bal launch (the kernels' BAL instance), entry blockIdx / htiles of the
   schedule ak_sd_balance wrote into the workspace: token (r, i), tiles [t0, t1) of the concatenated
   list and its partial slot (-1: the CTA writes the output rows). The row's lengths are read by the
   kernel afterwards, as in any call: a reused schedule may have been made for other lengths. The
   entry is checked as an index would be: a row outside the call, or an entry past the last
   piece, gives the CTA nothing to do (false); tiles are clamped to the list and a slot outside the
   workspace is refused, so a workspace that holds no schedule gives wrong rows, never a read or
   write outside a buffer. A reused schedule (p.bal_reuse) is read before the dependency wait: the
   call that made it waited for its ak_sd_balance, and every grid since has waited for the one
   before it, so the schedule was complete before this grid could start; the CTA then knows its
   row in time for the Q prefetch (ak_sd_prefetch_q). */
__device__ __forceinline__ bool ak_sd_bal_piece(const ak_sd_params &p, int64_t &r, int64_t &i, int &t0, int &t1,
                                                int &pslot) {
    const int4 w = p.bal_work[ak_divu_q(blockIdx.x, p.dv_htiles)];
    const int nt = p.list[0].tiles + p.list[1].tiles;
    if (w.x < 0 || w.x >= p.b * p.s_q) return false;
    ak_sd_row_of(p, (uint32_t)w.x, r, i);
    t0 = w.y < 0 ? 0 : w.y > nt ? nt : w.y;
    t1 = w.z < t0 ? t0 : w.z > nt ? nt : w.z;
    pslot = w.w >= 0 && w.w < p.bal_slots ? w.w : -1;
    return true;
}

/* How a wgmma kernel's CTA takes its work besides blockIdx (ak_sdw_cta), in two halves around its
   dependency wait: before it, a BAL CTA whose schedule is reused takes its piece (false: past the
   last piece, so the spare CTA exits before the wait and frees its SM at once); after it, an LPT CTA
   its row and a BAL CTA whose schedule this call made its piece. */
template <int ORD>
__device__ __forceinline__ bool ak_sd_take_early(const ak_sd_params &p, int64_t &r, int64_t &i, int &t0, int &t1,
                                                 int &pslot) {
    return ORD != AK_SD_ORD_BAL || !p.bal_reuse || ak_sd_bal_piece(p, r, i, t0, t1, pslot);
}
template <int ORD>
__device__ __forceinline__ bool ak_sd_take_late(const ak_sd_params &p, int64_t &r, int64_t &i, int &t0, int &t1,
                                                int &pslot) {
    if (ORD == AK_SD_ORD_LPT) ak_sd_lpt_take(p, r, i);
    return ORD != AK_SD_ORD_BAL || p.bal_reuse || ak_sd_bal_piece(p, r, i, t0, t1, pslot);
}

struct ak_sd_plan {
    int kernel; /* 0: ak_sd_main (mma.sync); 1: ak_sdw_main, 2: ak_sdx_main, 3: ak_sdt_main, 4: ak_sdr_main (sparse_decode_wgmma.cu) */
    int mw, htiles, splits, n_tiles;
    int lpt; /* rows longest first (ak_sd_lpt_order), their order after the partial rows in the workspace */
    int bal;        /* balanced by the lengths (the caller's AK_BALANCE_MAKE or REUSE): one split, at most AK_SD_BAL_MAX rows */
    int bal_pieces; /* CTAs / htiles of a balanced launch (0 where a call cannot be balanced) */
    int64_t rows;
    size_t smem, ws_bytes;
};

/* CTAs of a plan's main kernel: one per (token row, split), or per balanced piece, and head tile. */
static inline int64_t ak_sd_main_ctas(const ak_sd_params &p, const ak_sd_plan &pl) {
    return (pl.bal ? (int64_t)pl.bal_pieces : (int64_t)p.b * p.s_q * pl.splits) * pl.htiles;
}

/* Workspace bytes of a plan: fp16 partial rows, then one (lse, factor) pair per row. */
static inline size_t ak_sd_ws_bytes(int splits, int64_t rows) {
    return splits > 1 ? (size_t)splits * (size_t)rows * (AK_SD_DV * sizeof(__half) + sizeof(float2)) : 0;
}

/* Partial slots of a balanced call (pieces beyond one per token row can split rows), and its
   workspace: those slots' rows as above, then the pieces (16 bytes each), the rows' table (8 bytes
   a row) and the list of split rows (4 bytes a row, and its count). */
static inline int64_t ak_sd_bal_slots(int64_t pieces, int64_t n) { return pieces > n ? pieces : 0; }
static inline size_t ak_sd_bal_part_bytes(int64_t pieces, int64_t n, int64_t h_q) {
    return ((size_t)ak_sd_bal_slots(pieces, n) * (size_t)h_q * (AK_SD_DV * sizeof(__half) + sizeof(float2)) + 15) &
           ~(size_t)15;
}
static inline size_t ak_sd_bal_ws_bytes(int64_t pieces, int64_t n, int64_t h_q) {
    return ak_sd_bal_part_bytes(pieces, n, h_q) + (size_t)pieces * 16 + (size_t)n * 12 + 16;
}

/* The wgmma kernels (sparse_decode_wgmma.cu): ak_sdw_plan returns 1 and fills the plan when one
   of them serves the call (656 and per-tensor fp8: the swap-AB kernel at h_q <= 32 with 16- or
   32-head tiles, and above with 16-head tiles below 5 (token, 64-head tile) units, or at 16 heads,
   16 or more tiles per CTA and a copy ceiling of at least 28 GB/s per SM the register-dequantizing
   one; the warp-specialized one at h_q > 32 from 5 such units, as for V4 from 8; MLA_BF16: the
   pipelined one at h_q > 32; 64-head tiles for both); ak_sdw_launch runs it (pl.mw:
   head tile / 16), and ak_sd_combine merges its partial rows like those of ak_sd_main. */
int ak_sdw_plan(const ak_context *ctx, const ak_mla_decode_args *a, ak_sd_plan *pl);
ak_status ak_sdw_launch(ak_context *ctx, const ak_sd_params &p, const ak_sd_plan &pl, int layout);

#endif /* AK_SPARSE_DECODE_CUH */
