/*
 * codec.cu -- CUDA codecs: write (quantize and store), gather (dequantize by slot) and convert
 * (layout to layout) for every cache layout. Bytes equal the CPU backend's: the conversions are the
 * bit-exact ones of numeric.h (e4m3 through PTX cvt.rn.satfinite, identical for every non-NaN fp32),
 * quotients encode as the IEEE round-to-nearest division's would (ak_div), scales follow layouts.md
 * section 3.
 *
 * Thread mapping. MLA layouts with aligned views and bf16 rows: lean kernels specialised per
 * (mode, source, destination), a warp per U tokens with every load issued first (writes and
 * converts double-buffer them in shared memory, one step ahead), and flat 16-byte copies through
 * the same double buffer for same-layout converts (section "lean" below). Otherwise (unaligned
 * views, f16/f32 rows): a block of 512 threads stages the source bytes of up to 32 tokens
 * (about 24 KB) in shared memory with cp.async, four stages deep, so three stages are in flight
 * while one is computed; then a warp per token, lane l owning dims [16 l, 16 l + 16) of the NoPE
 * part (a 128-dim 656 tile is 8 lanes, a 64-dim V4 tile 4 lanes, reduced with shuffles; V4's 64
 * RoPE dims are lanes 28..31), and for the 576-dim layouts a second pass with the 4 RoPE chunks
 * of 8 tokens per warp. Indexer layouts: 8 lanes per token, 2-4 tokens per lane in flight. MHA: one
 * thread per 8 elements of one (token, head) row, 4 tokens per thread in flight in converts.
 * Invalid slots (rule I1) are skipped by writers and give zero rows in gathers. No allocation and no
 * host synchronisation: every function is capturable in a CUDA graph.
 */
#include "cuda/cuda_backend.h"
#include "cuda/cuda_common.cuh"
#include "cuda/ptx.cuh"

#include "common/kv_access.h"
#include "common/kv_records.h"
#include "common/numeric.h"

#include <stdint.h>

/* ---- small device helpers -------------------------------------------------------------------- */

/* PTX conversions, each identical to its numeric.h counterpart for every non-NaN input (same
   grid, round to nearest even, e4m3 saturating to +-448, bf16 overflowing to inf like IEEE); NaN
   inputs take the integer path so even NaN bytes match the CPU backend. */
__device__ __forceinline__ uint8_t ak_dev_e4m3(float x) {
    if (ak_isnan_f32(x)) return ak_f32_to_e4m3(x);
    uint16_t r;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(0.0f), "f"(x));
    return (uint8_t)(r & 0xffu);
}

/* True when some v[i] may be NaN: a chain of fma(v, 0, t) is NaN iff some v is NaN or infinite
   (an inf only sends its block to the exact slow path). One FMA-pipe instruction per value,
   where a per-value test costs two or three integer instructions on the busier ALU pipe (run s39). */
__device__ __forceinline__ bool ak_maybe_nan(const float *v, int n) {
    float t[4] = {0.0f, 0.0f, 0.0f, 0.0f}; /* four chains: a quarter of the dependent latency */
    for (int i = 0; i < n; i++) t[i & 3] = __fmaf_rn(v[i], 0.0f, t[i & 3]);
    const float u = (t[0] + t[1]) + (t[2] + t[3]);
    return u != u;
}

/* The packing helpers below build whole 32-bit words (two conversions and a register-pair move)
   instead of extracting bytes or halves from each conversion's result: the byte-wise form cost
   two to four integer instructions per pair on the busy ALU pipe (run s62). */

/* 4 fp32 (no NaN) -> 4 e4m3 bytes in one word, v[0] in the lowest byte. */
__device__ __forceinline__ uint32_t ak_dev_e4m3x4(const float *v) {
    uint32_t w;
    asm("{\n\t.reg .b16 lo, hi;\n\t"
        "cvt.rn.satfinite.e4m3x2.f32 lo, %2, %1;\n\t"
        "cvt.rn.satfinite.e4m3x2.f32 hi, %4, %3;\n\t"
        "mov.b32 %0, {lo, hi};\n\t}"
        : "=r"(w)
        : "f"(v[0]), "f"(v[1]), "f"(v[2]), "f"(v[3]));
    return w;
}

/* N (a multiple of 4) fp32 -> N e4m3 bytes as N / 4 words. */
template <int N>
__device__ __forceinline__ void ak_dev_e4m3w(const float *v, uint32_t *w) {
    if (ak_maybe_nan(v, N)) {
        for (int k = 0; k < N / 4; k++)
            w[k] = (uint32_t)ak_f32_to_e4m3(v[4 * k]) | (uint32_t)ak_f32_to_e4m3(v[4 * k + 1]) << 8 |
                   (uint32_t)ak_f32_to_e4m3(v[4 * k + 2]) << 16 | (uint32_t)ak_f32_to_e4m3(v[4 * k + 3]) << 24;
        return;
    }
    for (int k = 0; k < N / 4; k++) w[k] = ak_dev_e4m3x4(v + 4 * k);
}

/* 16 fp32 -> 16 e4m3 bytes. */
__device__ __forceinline__ void ak_dev_e4m3x16(const float v[16], uint8_t q[16]) {
    uint32_t w[4];
    ak_dev_e4m3w<16>(v, w);
    memcpy(q, w, 16);
}

/* 4 e4m3 bytes (no NaN) of a word -> 4 fp32 (exact: every e4m3 value is an f16 value). */
__device__ __forceinline__ void ak_dev_dec_e4m3x4(uint32_t w, float *v) {
    asm("{\n\t.reg .b16 a, b, c, d;\n\t.reg .b32 p, q;\n\t"
        "mov.b32 {a, b}, %4;\n\t"
        "cvt.rn.f16x2.e4m3x2 p, a;\n\t"
        "cvt.rn.f16x2.e4m3x2 q, b;\n\t"
        "mov.b32 {a, b}, p;\n\t"
        "mov.b32 {c, d}, q;\n\t"
        "cvt.f32.f16 %0, a;\n\t"
        "cvt.f32.f16 %1, b;\n\t"
        "cvt.f32.f16 %2, c;\n\t"
        "cvt.f32.f16 %3, d;\n\t}"
        : "=f"(v[0]), "=f"(v[1]), "=f"(v[2]), "=f"(v[3])
        : "r"(w));
}

/* N (a multiple of 4) e4m3 bytes -> N fp32. */
template <int N>
__device__ __forceinline__ void ak_dev_dec_e4m3n(const uint8_t *b, float *v) {
    uint32_t w[N / 4];
    memcpy(w, b, N);
    uint32_t nan = 0; /* a byte whose low 7 bits are 0x7f is a NaN */
    for (int k = 0; k < N / 4; k++) nan |= ((w[k] & 0x7f7f7f7fu) + 0x01010101u) & 0x80808080u;
    if (nan) {
        for (int i = 0; i < N; i++) v[i] = ak_e4m3_to_f32(b[i]);
        return;
    }
    for (int k = 0; k < N / 4; k++) ak_dev_dec_e4m3x4(w[k], v + 4 * k);
}

/* 2 fp32 (no NaN) -> one word of two bf16, lo in the low half. */
__device__ __forceinline__ uint32_t ak_dev_bf16x2(float lo, float hi) {
    uint32_t r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

/* N (even) fp32 -> bf16 as N / 2 words (NaN quieted as ak_f32_to_bf16). */
template <int N>
__device__ __forceinline__ void ak_dev_bf16w(const float *v, uint32_t *w) {
    if (ak_maybe_nan(v, N)) {
        for (int k = 0; k < N / 2; k++)
            w[k] = (uint32_t)ak_f32_to_bf16(v[2 * k]) | (uint32_t)ak_f32_to_bf16(v[2 * k + 1]) << 16;
        return;
    }
    for (int k = 0; k < N / 2; k++) w[k] = ak_dev_bf16x2(v[2 * k], v[2 * k + 1]);
}

/* n (even) fp32 -> bf16. */
__device__ __forceinline__ void ak_dev_bf16xn(const float *v, uint16_t *h, int n) {
    if (ak_maybe_nan(v, n)) {
        for (int i = 0; i < n; i++) h[i] = ak_f32_to_bf16(v[i]);
        return;
    }
    for (int i = 0; i < n; i += 2) {
        const uint32_t r = ak_dev_bf16x2(v[i], v[i + 1]);
        memcpy(h + i, &r, 4);
    }
}

/* x / s for a fixed s, as an input to the e4m3 encoder, without the IEEE division sequence (a MUFU
   reciprocal, ~8 more instructions and a slow-path branch per value). The encoder sees the same
   value as from __fdiv_rn, or one with the same sign and NaN-ness where that is all that decides
   the byte. A power of two with a normal reciprocal: x * (1 / s), the same real number rounded
   once. Other s in [2^-89, 2^126): Markstein's correction, q0 = x * y with y = RN(1 / s), the
   exact residual r = fma(-q0, s, x), then q = fma(r, y, q0), which is the correctly rounded
   quotient when y is within half an ulp of 1 / s and q0 within an ulp of x / s, as long as r does
   not underflow. It does not for |x| > 2^-100 (checked against the division on 2e9 pairs, half of
   them quotients within 2 ulp of an fp32 midpoint); below that |x / s| <= 2^-11 encodes as a
   signed zero whatever the rounding. |q0| >= 1024 saturates to 448 either way (r could overflow
   there). The sign is x's: copysign keeps -0 and NaN signs as the IEEE quotient has them. Any
   other s takes __fdiv_rn. */
struct ak_divisor {
    float s, rs;
    int kind; /* 0: x * rs (s a power of two, or ak_divisor_bf16 for bf16 values), 1: correction,
                 2: __fdiv_rn */
};
__device__ __forceinline__ ak_divisor ak_divisor_of(float s) {
    const uint32_t u = ak_f32_bits(s), e = u >> 23;
    ak_divisor d;
    d.s = s;
    d.kind = (u & 0x007fffffu) == 0 && e >= 1 && e <= 253 ? 0 : e >= 38 && e <= 252 ? 1 : 2;
    d.rs = d.kind < 2 ? __fdiv_rn(1.0f, s) : 0.0f;
    return d;
}
/* The correction alone, for scales known to be at least 2^-89 (rs = RN(1 / s)). An infinite s
   (an infinite amax) is passed as s = 0, rs = 0: q = q0 = x * 0, the quotient's signed zero. */
__device__ __forceinline__ float ak_div_fast(float x, float s, float rs) {
    const float q0 = __fmul_rn(x, rs);
    const float q = __fmaf_rn(__fmaf_rn(-q0, s, x), rs, q0);
    return !(fabsf(q0) >= 1024.0f) ? copysignf(q, x) : q0;
}
/* ak_div_fast where the scale comes from an amax over the values divided (|x| <= 448 s, so |q0|
   stays far below 1024) or is infinite (s = rs = 0, q0 = 0 or NaN): the saturation test and its
   select are not needed; the copysign keeps -0 (run s65: two ALU instructions per value fewer in
   the indexer writer, +2 points of copy for its page-run writes; in the lean 656 writer's FP32
   branch the change cost the default-rule path a register spill and 2 points, so it stays there). */
__device__ __forceinline__ float ak_div_amax(float x, float s, float rs) {
    const float q0 = __fmul_rn(x, rs);
    return copysignf(__fmaf_rn(__fmaf_rn(-q0, s, x), rs, q0), x);
}
__device__ __forceinline__ float ak_div(const ak_divisor &d, float x) {
    return d.kind == 0 ? copysignf(__fmul_rn(x, d.rs), x)
           : d.kind == 1 ? ak_div_fast(x, d.s, d.rs) : __fdiv_rn(x, d.s);
}
/* N values in place, one uniform branch */
template <int N>
__device__ __forceinline__ void ak_div_n(const ak_divisor &d, float *v) {
    if (d.kind == 0) {
        for (int i = 0; i < N; i++) v[i] = copysignf(__fmul_rn(v[i], d.rs), v[i]);
    } else if (d.kind == 1) {
        for (int i = 0; i < N; i++) v[i] = ak_div_fast(v[i], d.s, d.rs);
    } else {
        for (int i = 0; i < N; i++) v[i] = __fdiv_rn(v[i], d.s);
    }
}

/* 16-byte aligned vector load/store with a scalar fallback for unaligned views. */
__device__ __forceinline__ void ak_ld16(uint8_t dst[16], const uint8_t *p, bool vec) {
    if (vec) {
        uint4 v = *(const uint4 *)p;
        memcpy(dst, &v, 16);
    } else {
        for (int i = 0; i < 16; i++) dst[i] = p[i];
    }
}
__device__ __forceinline__ void ak_st16(uint8_t *p, const uint8_t src[16], bool vec) {
    if (vec) {
        uint4 v;
        memcpy(&v, src, 16);
        *(uint4 *)p = v;
    } else {
        for (int i = 0; i < 16; i++) p[i] = src[i];
    }
}

/* 16 bf16 values of a cache record (any byte alignment when !vec) as fp32. */
__device__ __forceinline__ void ak_ld_bf16x16(float v[16], const uint8_t *p, bool vec) {
    uint8_t b[32];
    ak_ld16(b, p, vec);
    ak_ld16(b + 16, p + 16, vec);
    for (int i = 0; i < 16; i++) v[i] = ak_bf16_to_f32((uint16_t)(b[2 * i] | (b[2 * i + 1] << 8)));
}

/* fp32 scale in a record: a 656 page stride need not be a multiple of 4. */
__device__ __forceinline__ float ak_ld_f32(const uint8_t *p, bool vec) {
    if (vec) return *(const float *)p;
    uint32_t u = (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
    return ak_f32_from_bits(u);
}
__device__ __forceinline__ void ak_st_f32(uint8_t *p, float x, bool vec) {
    if (vec) {
        *(float *)p = x;
        return;
    }
    uint32_t u = ak_f32_bits(x);
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(u >> (8 * i));
}

/* Loads n (8 or 16) consecutive elements of dtype dt as fp32; vec: the address is 16-byte aligned. */
__device__ __forceinline__ void ak_load_vals(float *v, int n, const void *base, int64_t off,
                                             int dt, bool vec) {
    if (dt == AK_DTYPE_F32) {
        const float *p = (const float *)base + off;
        if (vec) {
            for (int i = 0; i < n; i += 4) {
                float4 q = *(const float4 *)(p + i);
                v[i] = q.x; v[i + 1] = q.y; v[i + 2] = q.z; v[i + 3] = q.w;
            }
        } else {
            for (int i = 0; i < n; i++) v[i] = p[i];
        }
    } else {
        const uint16_t *p = (const uint16_t *)base + off;
        uint16_t h[16];
        if (vec) {
            for (int i = 0; i < n; i += 8) {
                uint4 q = *(const uint4 *)(p + i);
                memcpy(h + i, &q, 16);
            }
        } else {
            for (int i = 0; i < n; i++) h[i] = p[i];
        }
        if (dt == AK_DTYPE_BF16)
            for (int i = 0; i < n; i++) v[i] = ak_bf16_to_f32(h[i]);
        else
            for (int i = 0; i < n; i++) v[i] = ak_f16_to_f32(h[i]);
    }
}

/* Stores n (8 or 16) fp32 values as dtype dt (f32, bf16 or f16). */
__device__ __forceinline__ void ak_store_vals(void *base, int64_t off, const float *v, int n,
                                              int dt, bool vec) {
    if (dt == AK_DTYPE_F32) {
        float *p = (float *)base + off;
        if (vec) {
            for (int i = 0; i < n; i += 4) *(float4 *)(p + i) = make_float4(v[i], v[i + 1], v[i + 2], v[i + 3]);
        } else {
            for (int i = 0; i < n; i++) p[i] = v[i];
        }
    } else {
        uint16_t h[16];
        if (dt == AK_DTYPE_BF16 && n % 2 == 0) ak_dev_bf16xn(v, h, n);
        else
            for (int i = 0; i < n; i++)
                h[i] = dt == AK_DTYPE_BF16 ? ak_f32_to_bf16(v[i]) : ak_f32_to_f16(v[i]);
        uint16_t *p = (uint16_t *)base + off;
        if (vec) {
            for (int i = 0; i < n; i += 8) {
                uint4 q;
                memcpy(&q, h + i, 16);
                *(uint4 *)(p + i) = q;
            }
        } else {
            for (int i = 0; i < n; i++) p[i] = h[i];
        }
    }
}

/* A 2-D row view: element (r, c) at data[r * rs + c]. */
struct ak_rows {
    const void *data;
    int64_t rs;
    int32_t dtype;
    bool vec; /* data and row stride 16-byte aligned */
};
struct ak_rows_out {
    void *data;
    int64_t rs;
    int32_t dtype;
    bool vec;
};

static bool ak_vec_ok(const void *p, int64_t row_stride_bytes) {
    return ((uintptr_t)p % 16 == 0) && (row_stride_bytes % 16 == 0);
}
static ak_rows ak_rows_of(const ak_tensor *t) {
    ak_rows r;
    r.data = t->data;
    r.rs = t->ndim >= 2 ? t->strides[0] : 0;
    r.dtype = t->dtype;
    r.vec = ak_vec_ok(t->data, r.rs * ak_dtype_size(t->dtype));
    return r;
}
static ak_rows_out ak_rows_out_of(ak_tensor *t) {
    ak_rows_out r;
    r.data = t->data;
    r.rs = t->ndim >= 2 ? t->strides[0] : 0;
    r.dtype = t->dtype;
    r.vec = ak_vec_ok(t->data, r.rs * ak_dtype_size(t->dtype));
    return r;
}

/* Scale exponent k (scale 2^k) of a 656 / 584 tile under a rule. */
__device__ __forceinline__ int32_t ak_dev_pow2_exp(float amax, int rule) {
    return rule == AK_QUANT_POW2_AMAX_FLOOR ? ak_scale_pow2_amax_floor_exp(amax)
                                            : ak_scale_pow2_exp(amax);
}

__device__ __forceinline__ float ak_group_max(float v, int width) {
    for (int o = 1; o < width; o <<= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

static int ak_grid_for(const ak_context *ctx, int64_t items, int per_block) {
    return ak_grid_cap(ctx, items, per_block, 32);
}

/* ---- MLA layouts: tokens staged through shared memory ---------------------------------------- */

/* Why staged: a token is 576..2304 source bytes and its scale tiles need shuffles across 8 lanes,
   so a register-resident warp keeps only one token (about 1 KB) in flight and the codec stalls near
   half of the copy bandwidth. Here a block copies the source bytes of tb tokens into shared memory
   with cp.async (16-byte pieces, no registers held, all issued before any is waited on), four
   buffers deep, so three stages' bytes (about 72 KB per block, two blocks per SM) are in flight
   while the warps quantize or dequantize the current one from shared memory. */

/* Stages per block: AK_MLA_STAGES - 1 in flight while one is computed. */
#define AK_MLA_STAGES 4
/* Waits until at most AK_MLA_STAGES - 1 committed groups (the newest) are still in flight. */
__device__ __forceinline__ void ak_cp_async_wait_stages(void) {
    ak_cp_async_wait_group<AK_MLA_STAGES - 1>();
}

struct ak_mla_geo {
    ak_cache c;      /* descriptor by value (scale pointer is a device pointer) */
    int64_t stride;  /* page stride, bytes */
    uint32_t cap;    /* capacity in tokens */
    int32_t nope_chunks; /* 32 (512 dims) or 28 (V4, 448 dims) */
    int32_t rec_bytes;   /* 1152, 576, 656 or 576 (V4 data row) */
    int32_t pshift;      /* ak_page_shift(page size) */
    bool vec;        /* pool base and page stride 16-byte aligned */
};

static int32_t ak_mla_rec_bytes(ak_layout l) {
    return l == AK_LAYOUT_MLA_BF16 ? 1152 : l == AK_LAYOUT_DSA_FP8_BLOCKSCALE ? 656 : 576;
}

static ak_mla_geo ak_mla_geo_of(const ak_cache *c) {
    ak_mla_geo g;
    g.c = *c;
    g.stride = ak_cache_stride(c);
    g.cap = (uint32_t)ak_cache_capacity(c);
    g.nope_chunks = c->layout == AK_LAYOUT_DSV4_FP8_UE8M0 ? 28 : 32;
    g.rec_bytes = ak_mla_rec_bytes(c->layout);
    g.pshift = ak_page_shift(c->page_size);
    g.vec = ak_vec_ok(c->data, g.stride);
    return g;
}

/* Byte address of token `slot`'s record (AoS) or data row (V4); *srow: the V4 scale row. */
__device__ __forceinline__ uint8_t *ak_mla_rec(const ak_mla_geo &g, uint32_t slot, uint8_t **srow) {
    const uint32_t page = g.pshift >= 0 ? slot >> g.pshift : slot / (uint32_t)g.c.page_size;
    const uint32_t t = slot - page * (uint32_t)g.c.page_size;
    uint8_t *base = (uint8_t *)g.c.data + (int64_t)page * g.stride;
    *srow = base + (int64_t)g.c.page_size * AK_DSV4_DATA_BYTES + (int64_t)t * AK_DSV4_SCALE_BYTES;
    return base + (int64_t)t * g.rec_bytes;
}

/* Decodes chunk ch (dims [16 ch, 16 ch + 16) of the d_qk vector) of a staged record (16-byte
   aligned shared memory; a V4 record's scale row follows its 576-byte data row). */
__device__ __forceinline__ void ak_mla_decode_chunk(const ak_mla_geo &g, const uint8_t *rec, int ch,
                                                    float v[16]) {
    const bool rope = ch >= g.nope_chunks;
    const int rc = ch - g.nope_chunks;
    uint8_t b[16];
    switch (g.c.layout) {
    case AK_LAYOUT_MLA_BF16: {
        ak_ld_bf16x16(v, rope ? rec + 1024 + rc * 32 : rec + ch * 32, true);
        break;
    }
    case AK_LAYOUT_MLA_FP8_PERTENSOR: {
        float s = ak_kv_k_scale(&g.c);
        ak_ld16(b, rope ? rec + 512 + rc * 16 : rec + ch * 16, true);
        ak_dev_dec_e4m3n<16>(b, v);
        for (int i = 0; i < 16; i++) v[i] = __fmul_rn(v[i], s);
        break;
    }
    case AK_LAYOUT_DSA_FP8_BLOCKSCALE: {
        if (rope) {
            ak_ld_bf16x16(v, rec + 528 + rc * 32, true);
        } else {
            float s = ak_ld_f32(rec + 512 + 4 * (ch >> 3), true);
            ak_ld16(b, rec + ch * 16, true);
            ak_dev_dec_e4m3n<16>(b, v);
            for (int i = 0; i < 16; i++) v[i] = __fmul_rn(v[i], s);
            uint16_t h[16];
            ak_dev_bf16xn(v, h, 16); /* bf16_rn(q * s), layouts.md 4 */
            for (int i = 0; i < 16; i++) v[i] = ak_bf16_to_f32(h[i]);
        }
        break;
    }
    default: { /* DSV4_FP8_UE8M0 */
        if (rope) {
            ak_ld_bf16x16(v, rec + 448 + rc * 32, true);
        } else {
            float s = ak_ue8m0_to_f32(rec[AK_DSV4_DATA_BYTES + (ch >> 2)]);
            ak_ld16(b, rec + ch * 16, true);
            ak_dev_dec_e4m3n<16>(b, v);
            for (int i = 0; i < 16; i++) v[i] = __fmul_rn(v[i], s);
        }
        break;
    }
    }
}

enum { AK_MLA_WRITE = 0, AK_MLA_CONVERT = 1, AK_MLA_GATHER = 2 };

/* One staged MLA codec call. Token i of [0, n) is input row i (write), source visit i (convert:
   the whole pool or the listed pages) or output row i (gather). */
struct ak_mla_job {
    int32_t mode;
    ak_mla_geo dst;           /* write / convert destination */
    ak_mla_geo src;           /* convert / gather source */
    ak_rows nope, rope;       /* write input rows */
    int64_t nope_rsb, rope_rsb; /* write: row strides, bytes */
    int32_t nope_bytes;       /* write: staged bytes of the nope row (the rope row follows) */
    ak_rows_out out;          /* gather output rows */
    const int32_t *slots;     /* write / gather: [n] int32 */
    int64_t slot_stride;
    const int32_t *pages;     /* convert: source pages (NULL = whole pool) */
    int64_t page_stride;
    int64_t n;
    int32_t pieces;           /* 16-byte pieces per token (a V4 source adds one 8-byte piece) */
    int32_t split;            /* bytes read from a token's first source pointer */
    bool tail16;              /* pieces past split are 16 bytes (rope rows), else 8 (V4 scales) */
    int32_t tstride;          /* staged bytes per token (multiple of 16) */
    int32_t tb;               /* tokens per stage */
    int32_t rule;
    bool vec;                 /* every staged piece 16-byte aligned: cp.async, else bytes */
};

/* Source slot of visit index i for convert: the whole pool, or the listed pages (rule I1 on the
   page id). Returns false when the page is invalid. */
__device__ __forceinline__ bool ak_convert_slot(const int32_t *pages, int64_t pstride,
                                                int32_t src_ps, uint32_t src_pages, int64_t i,
                                                uint32_t *slot) {
    if (pages == NULL) {
        *slot = (uint32_t)i;
        return true;
    }
    int64_t k = i / src_ps;
    int32_t p = pages[k * pstride];
    if ((uint32_t)p >= src_pages) return false;
    *slot = (uint32_t)p * (uint32_t)src_ps + (uint32_t)(i - k * src_ps);
    return true;
}

/* A staged token, resolved once per stage by one thread: where its source pieces are, its
   slots, and what to do with it. */
struct ak_mla_tok {
    const uint8_t *a;  /* first `split` bytes: the record / data row, or the nope input row */
    const uint8_t *b;  /* the rest: the V4 scale row, or the rope input row */
    uint32_t ds, ss;   /* destination slot (write / convert), source slot (convert / gather) */
    int32_t state;     /* AK_TOK_SKIP, AK_TOK_LIVE or AK_TOK_ZERO (gather of an invalid slot) */
};
enum { AK_TOK_SKIP = 0, AK_TOK_LIVE = 1, AK_TOK_ZERO = 2 };

/* The global value token i depends on (its slot, or its source page entry for a convert with a
   page list), loaded early so the load overlaps a stage's compute. */
__device__ __forceinline__ uint32_t ak_mla_tok_key(const ak_mla_job &j, int64_t i) {
    if (i >= j.n) return 0;
    if (j.mode != AK_MLA_CONVERT) return (uint32_t)j.slots[i * j.slot_stride];
    return j.pages ? (uint32_t)j.pages[(i / j.src.c.page_size) * j.page_stride] : 0;
}

/* Resolves token i from its key (rule I1: invalid slots and pages are skipped; gathers always
   write their row). */
__device__ ak_mla_tok ak_mla_tok_of(const ak_mla_job &j, int64_t i, uint32_t key) {
    ak_mla_tok t = {NULL, NULL, 0, 0, AK_TOK_SKIP};
    if (i >= j.n) return t;
    if (j.mode == AK_MLA_CONVERT) {
        if (j.pages) {
            if (key >= (uint32_t)j.src.c.num_pages) return t;
            const int64_t k = i / j.src.c.page_size;
            t.ss = key * (uint32_t)j.src.c.page_size + (uint32_t)(i - k * j.src.c.page_size);
        } else {
            t.ss = (uint32_t)i;
        }
        t.ds = t.ss;
        if (t.ds >= j.dst.cap) return t;
    } else {
        t.ds = t.ss = key;
        if (j.mode == AK_MLA_WRITE && key >= j.dst.cap) return t;
    }
    if (j.mode == AK_MLA_WRITE) {
        t.a = (const uint8_t *)j.nope.data + i * j.nope_rsb;
        t.b = (const uint8_t *)j.rope.data + i * j.rope_rsb;
    } else if (t.ss < j.src.cap) {
        uint8_t *srow;
        t.a = ak_mla_rec(j.src, t.ss, &srow);
        t.b = srow;
    } else {
        t.state = AK_TOK_ZERO; /* gather of an invalid slot: a zero row, nothing read */
        return t;
    }
    t.state = AK_TOK_LIVE;
    return t;
}

/* Issues the copies of a resolved stage into buf: a warp per token, lanes over its pieces. */
__device__ void ak_mla_stage(const ak_mla_job &j, const ak_mla_tok *toks, uint8_t *buf) {
    const int lane = threadIdx.x & 31;
    for (int k = threadIdx.x >> 5; k < j.tb; k += blockDim.x >> 5) {
        const ak_mla_tok t = toks[k];
        if (t.state != AK_TOK_LIVE) continue;
        uint8_t *s = buf + (int64_t)k * j.tstride;
        for (int p = lane; p < j.pieces; p += 32) {
            const int32_t off = p * 16;
            const bool head = off < j.split;
            const uint8_t *g = head ? t.a + off : t.b + (off - j.split);
            const int bytes = head || j.tail16 ? 16 : 8;
            if (j.vec) {
                if (bytes == 16) ak_cp_async16(ak_smem_addr(s + off), g, 16);
                else ak_cp_async8(ak_smem_addr(s + off), g, 8);
            } else {
                for (int q = 0; q < bytes; q++) s[off + q] = g[q];
            }
        }
    }
}

/* Chunk ch of a staged token as fp32: input rows (write) or a source record (convert). */
__device__ __forceinline__ void ak_mla_src_chunk(const ak_mla_job &j, const uint8_t *s, int ch,
                                                 float v[16]) {
    const int nc = j.dst.nope_chunks;
    if (j.mode == AK_MLA_CONVERT) ak_mla_decode_chunk(j.src, s, ch, v);
    else if (ch >= nc) ak_load_vals(v, 16, s + j.nope_bytes, (ch - nc) * 16, j.rope.dtype, true);
    else ak_load_vals(v, 16, s, ch * 16, j.nope.dtype, true);
}

/* Stores RoPE chunk rc (dims [16 rc, 16 rc + 16) of the 64) of a destination record. */
__device__ __forceinline__ void ak_mla_store_rope(const ak_mla_geo &dst, uint8_t *rec, int rc,
                                                  float v[16]) {
    if (dst.c.layout == AK_LAYOUT_MLA_FP8_PERTENSOR) {
        const float sc = ak_kv_k_scale(&dst.c);
        uint8_t q[16];
        const ak_divisor dv = ak_divisor_of(sc);
        ak_div_n<16>(dv, v);
        ak_dev_e4m3x16(v, q);
        ak_st16(rec + 512 + rc * 16, q, dst.vec);
        return;
    }
    const int off = dst.c.layout == AK_LAYOUT_MLA_BF16 ? 1024
                    : dst.c.layout == AK_LAYOUT_DSA_FP8_BLOCKSCALE ? 528 : 448;
    uint16_t h[16];
    ak_dev_bf16xn(v, h, 16);
    ak_st16(rec + off + rc * 32, (const uint8_t *)h, dst.vec);
    ak_st16(rec + off + rc * 32 + 16, (const uint8_t *)(h + 8), dst.vec);
}

/* Writes chunk ch = lane of one staged token: the 32 NoPE chunks (656, BF16, FP8-PT) or the 28
   NoPE and 4 RoPE chunks (V4). All 32 lanes call it together (tile amax shuffles). */
__device__ void ak_mla_encode_lane(const ak_mla_job &j, const uint8_t *s, uint32_t slot, int ch) {
    const ak_mla_geo &dst = j.dst;
    uint8_t *srow;
    uint8_t *rec = ak_mla_rec(dst, slot, &srow);
    const int layout = dst.c.layout;
    const bool rope = ch >= dst.nope_chunks;
    /* 576 per-tensor -> 656 keeps the NoPE e4m3 bytes and writes k_scale as every tile scale */
    const bool pt_to_656 = j.mode == AK_MLA_CONVERT &&
                           j.src.c.layout == AK_LAYOUT_MLA_FP8_PERTENSOR &&
                           layout == AK_LAYOUT_DSA_FP8_BLOCKSCALE;
    float v[16];
    uint8_t q[16];
    if (pt_to_656) {
        ak_ld16(q, s + ch * 16, true);
        for (int i = 0; i < 16; i++) v[i] = 0.0f;
    } else {
        ak_mla_src_chunk(j, s, ch, v);
    }
    /* tile amax: 656 tiles are 8 lanes, V4 tiles 4 lanes (lanes 28..31 hold RoPE, their own
       group of 4, whose result is never used as a scale) */
    float amax = 0.0f;
    for (int i = 0; i < 16; i++) amax = fmaxf(amax, fabsf(v[i]));
    if (layout == AK_LAYOUT_DSA_FP8_BLOCKSCALE) amax = ak_group_max(amax, 8);
    else if (layout == AK_LAYOUT_DSV4_FP8_UE8M0) amax = ak_group_max(amax, 4);
    if (rope) {
        ak_mla_store_rope(dst, rec, ch - dst.nope_chunks, v);
        return;
    }
    switch (layout) {
    case AK_LAYOUT_MLA_BF16: {
        uint16_t h[16];
        ak_dev_bf16xn(v, h, 16);
        ak_st16(rec + ch * 32, (const uint8_t *)h, dst.vec);
        ak_st16(rec + ch * 32 + 16, (const uint8_t *)(h + 8), dst.vec);
        break;
    }
    case AK_LAYOUT_MLA_FP8_PERTENSOR: {
        float sc = ak_kv_k_scale(&dst.c);
        const ak_divisor dv = ak_divisor_of(sc);
        ak_div_n<16>(dv, v);
        ak_dev_e4m3x16(v, q);
        ak_st16(rec + ch * 16, q, dst.vec);
        break;
    }
    case AK_LAYOUT_DSA_FP8_BLOCKSCALE: {
        float sc;
        if (pt_to_656) {
            sc = ak_kv_k_scale(&j.src.c);
        } else {
            if (j.rule == AK_QUANT_FP32) {
                sc = __fdiv_rn(amax, 448.0f);
                if (!(sc >= 1e-4f)) sc = 1e-4f;
                /* sc >= 1e-4: the correction applies */
                const float rs = __fdiv_rn(1.0f, sc), sr = rs == 0.0f ? 0.0f : sc;
                for (int i = 0; i < 16; i++) v[i] = ak_div_fast(v[i], sr, rs);
            } else {
                /* AMAX_FLOOR is a 584-only rule. x / 2^k == x * 2^-k exactly (one rounding of
                   the same real number), so the power-of-two path multiplies. */
                int32_t k = ak_scale_pow2_exp(amax);
                sc = ak_pow2_f32(k);
                const float rs = ak_pow2_f32(-k);
                for (int i = 0; i < 16; i++) v[i] = __fmul_rn(v[i], rs);
            }
            ak_dev_e4m3x16(v, q);
        }
        ak_st16(rec + ch * 16, q, dst.vec);
        if ((ch & 7) == 0) ak_st_f32(rec + 512 + 4 * (ch >> 3), sc, dst.vec);
        break;
    }
    default: { /* DSV4_FP8_UE8M0 */
        int32_t e = 127 + ak_dev_pow2_exp(amax, j.rule);
        e = e < 1 ? 1 : e > 254 ? 254 : e;
        /* 1 / 2^(e-127) is exact (2^-127 is an fp32 subnormal): multiply, as above */
        const float rs = __fdiv_rn(1.0f, ak_ue8m0_to_f32((uint8_t)e));
        for (int i = 0; i < 16; i++) v[i] = __fmul_rn(v[i], rs);
        ak_dev_e4m3x16(v, q);
        ak_st16(rec + ch * 16, q, dst.vec);
        if ((ch & 3) == 0) srow[ch >> 2] = (uint8_t)e;
        if (ch == 0) srow[7] = 0;
        break;
    }
    }
}

/* Computes one stage (tokens [t0, t0 + tb) staged in buf, resolved in toks). Same-layout convert
   copies the staged bytes out. Otherwise two passes keep every lane busy: a warp per token over
   chunks 0..31 (the 32 NoPE chunks, or V4's 28 NoPE + 4 RoPE), then for the 36-chunk layouts the
   4 RoPE chunks of 8 tokens per warp. */
__device__ void ak_mla_compute(const ak_mla_job &j, int64_t t0, const ak_mla_tok *toks,
                               const uint8_t *buf) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarp = blockDim.x >> 5;
    if (j.mode == AK_MLA_CONVERT && j.src.c.layout == j.dst.c.layout) {
        for (int k = warp; k < j.tb; k += nwarp) {
            const ak_mla_tok t = toks[k];
            if (t.state != AK_TOK_LIVE) continue;
            const uint8_t *s = buf + (int64_t)k * j.tstride;
            uint8_t *srow;
            uint8_t *rec = ak_mla_rec(j.dst, t.ds, &srow);
            for (int p = lane; p < j.pieces; p += 32) {
                if (p * 16 < j.dst.rec_bytes) {
                    uint8_t b[16];
                    ak_ld16(b, s + p * 16, true);
                    ak_st16(rec + p * 16, b, j.dst.vec);
                } else { /* V4 scale row */
                    for (int q = 0; q < AK_DSV4_SCALE_BYTES; q++) srow[q] = s[p * 16 + q];
                }
            }
        }
        return;
    }
    const int nc = j.mode == AK_MLA_GATHER ? j.src.nope_chunks : j.dst.nope_chunks;
    for (int k = warp; k < j.tb; k += nwarp) { /* warp-uniform: one token per warp */
        const ak_mla_tok t = toks[k];
        if (t.state == AK_TOK_SKIP) continue;
        const uint8_t *s = buf + (int64_t)k * j.tstride;
        if (j.mode != AK_MLA_GATHER) {
            ak_mla_encode_lane(j, s, t.ds, lane);
            continue;
        }
        float v[16];
        if (t.state == AK_TOK_LIVE) ak_mla_decode_chunk(j.src, s, lane, v);
        else
            for (int q = 0; q < 16; q++) v[q] = 0.0f;
        ak_store_vals(j.out.data, (t0 + k) * j.out.rs + lane * 16, v, 16, j.out.dtype, j.out.vec);
    }
    if (nc != 32) return; /* V4: RoPE done in the first pass */
    for (int k0 = 8 * warp; k0 < j.tb; k0 += 8 * nwarp) {
        const int k = k0 + (lane >> 2), rc = lane & 3;
        if (k >= j.tb) continue;
        const ak_mla_tok t = toks[k];
        if (t.state == AK_TOK_SKIP) continue;
        const uint8_t *s = buf + (int64_t)k * j.tstride;
        float v[16];
        if (j.mode != AK_MLA_GATHER) {
            uint8_t *srow;
            ak_mla_src_chunk(j, s, 32 + rc, v);
            ak_mla_store_rope(j.dst, ak_mla_rec(j.dst, t.ds, &srow), rc, v);
            continue;
        }
        if (t.state == AK_TOK_LIVE) ak_mla_decode_chunk(j.src, s, 32 + rc, v);
        else
            for (int q = 0; q < 16; q++) v[q] = 0.0f;
        ak_store_vals(j.out.data, (t0 + k) * j.out.rs + (32 + rc) * 16, v, 16, j.out.dtype,
                      j.out.vec);
    }
}

/* Grid-stride over stages of tb tokens through AK_MLA_STAGES shared buffers of tb * tstride
   bytes: AK_MLA_STAGES - 1 stages are in flight while one is computed. A stage's tokens are
   resolved (slots, pointers) by threads 0..tb-1 at the end of the iteration before its copies
   are issued, from keys loaded at that iteration's start, so no slot load is on the issue path. */
#define AK_MLA_THREADS 512
#define AK_MLA_STAGE_BYTES 24576
#define AK_MLA_SMEM_MAX (AK_MLA_STAGES * AK_MLA_STAGE_BYTES)
__global__ void __launch_bounds__(AK_MLA_THREADS, 2) ak_mla_codec_kernel(ak_mla_job j) {
    extern __shared__ __align__(16) uint8_t ak_stage_mem[];
    __shared__ ak_mla_tok toks[AK_MLA_STAGES][32];
    const int64_t step = (int64_t)gridDim.x * j.tb;
    const int64_t buf_bytes = (int64_t)j.tb * j.tstride;
    const int64_t t0 = (int64_t)blockIdx.x * j.tb;
    const int tid = threadIdx.x;
    if (tid < j.tb)
        for (int s = 0; s < AK_MLA_STAGES; s++) {
            const int64_t i = t0 + s * step + tid;
            toks[s][tid] = ak_mla_tok_of(j, i, ak_mla_tok_key(j, i));
        }
    __syncthreads();
    for (int s = 0; s < AK_MLA_STAGES - 1; s++) {
        ak_mla_stage(j, toks[s], ak_stage_mem + s * buf_bytes);
        ak_cp_async_commit();
    }
    int b = 0;
    for (int64_t t = t0; t < j.n; t += step, b = b + 1 == AK_MLA_STAGES ? 0 : b + 1) {
        /* the stage AK_MLA_STAGES - 1 ahead goes into the buffer computed last iteration */
        const int bn = b == 0 ? AK_MLA_STAGES - 1 : b - 1;
        ak_mla_stage(j, toks[bn], ak_stage_mem + bn * buf_bytes);
        ak_cp_async_commit();
        /* the key of the token that takes over this iteration's table row, used below */
        const int64_t inext = t + AK_MLA_STAGES * step + tid;
        const uint32_t key = tid < j.tb ? ak_mla_tok_key(j, inext) : 0;
        ak_cp_async_wait_stages();
        __syncthreads();
        ak_mla_compute(j, t, toks[b], ak_stage_mem + b * buf_bytes);
        __syncthreads(); /* buffer b and toks[b] are free: refilled below and next iteration */
        if (tid < j.tb) toks[b][tid] = ak_mla_tok_of(j, inext, key);
        __syncthreads(); /* the next iteration's stage reads toks[b] */
    }
}

/* ---- MLA layouts: lean register-resident kernels ---------------------------------------------- */

/* Why: the staged kernel is issue-bound (Nsight Compute, run 3): every 16-byte piece went through
   shared memory and a runtime-layout decode/encode. Here each (mode, source, destination) pair is
   its own instantiation, so a chunk is a few vector loads, conversions and stores with no switch.
   A warp takes U tokens per step: lane k < U resolves token k (slot, pointers; rule I1) and the
   warp shares the result by shuffles; every lane then loads its NoPE chunk (dims [16 l, 16 l + 16))
   of all U tokens and one RoPE chunk (lane = 4 token + chunk) before it converts and stores any.
   Writes and converts stage those bytes through a per-warp shared-memory double buffer filled by
   cp.async one step ahead; gathers load them straight into registers. V4 keeps its 4 RoPE chunks
   in lanes 28..31.
   Used when every view is 16-byte aligned and the rows are bf16 (write) / bf16 or f32 (gather);
   other cases take the staged kernel. */
#define AK_LEAN_ROWS (-1) /* write: the source is bf16 input rows */
#define AK_LEAN_THREADS 256
#define AK_LEAN_U 4 /* tokens per warp step of the same-layout copy kernel */

/* Tokens per warp step (U) and resident blocks per SM (the register cap) of each instantiation,
   measured on the H200 (docs/perf.md, runs s26, s38, s41, s42). The staged kernels (writes and
   converts) take 2 tokens per step at 4 blocks (64 registers), FP8-PT -> 656 (a byte copy with a
   RoPE conversion) 4; the register-loading gathers 4 tokens at 4 blocks, the V4 gather 2 at 6. */
template <int MODE, int SL, int DL> __host__ __device__ constexpr int ak_lean_u() {
    return (MODE == AK_MLA_CONVERT && SL == AK_LAYOUT_MLA_FP8_PERTENSOR && DL == AK_LAYOUT_DSA_FP8_BLOCKSCALE) ||
                   (MODE == AK_MLA_GATHER && SL != AK_LAYOUT_DSV4_FP8_UE8M0)
               ? 4
               : 2;
}
/* Staged (cp.async double buffer, runs s41-s42): writes and converts, which gained 1-12 points of
   copy; the gathers (random slots) lost 1-10 staged and load into registers. */
template <int MODE, int SL, int DL> __host__ __device__ constexpr bool ak_lean_staged() {
    return MODE != AK_MLA_GATHER;
}
/* Warp steps per warp the grid is sized for (ak_lean_grid, run s70): one for the 4-token gathers,
   about two for the staged kernels, 16 for 656 -> FP8-PT, whose decode, rescale and encode make it
   the one compute-heavy instantiation (at two it lost 5 points). */
template <int MODE, int SL, int DL> __host__ __device__ constexpr int ak_lean_steps() {
    return MODE == AK_MLA_GATHER && ak_lean_u<MODE, SL, DL>() == 4 ? 1
           : MODE == AK_MLA_CONVERT && SL == AK_LAYOUT_DSA_FP8_BLOCKSCALE && DL == AK_LAYOUT_MLA_FP8_PERTENSOR ? 16
                                                                                                           : 2;
}
template <int MODE, int SL, int DL> __host__ __device__ constexpr int ak_lean_min_blocks() {
    return MODE == AK_MLA_GATHER && SL == AK_LAYOUT_DSV4_FP8_UE8M0 ? 6 : 4;
}

__device__ __forceinline__ const uint8_t *ak_shfl_ptr(const void *p, int src) {
    return (const uint8_t *)__shfl_sync(0xffffffffu, (unsigned long long)(uintptr_t)p, src);
}

/* 8 bf16 in a uint4 <-> fp32 (exact widening). */
__device__ __forceinline__ void ak_bf16x8_to_f32(uint4 w, float *v) {
    const uint32_t u[4] = {w.x, w.y, w.z, w.w};
    for (int m = 0; m < 4; m++) {
        v[2 * m] = ak_f32_from_bits(u[m] << 16);
        v[2 * m + 1] = ak_f32_from_bits(u[m] & 0xffff0000u);
    }
}

/* 16 fp32 -> bf16 (round to nearest even, NaN quieted as ak_f32_to_bf16) in two uint4. */
__device__ __forceinline__ void ak_f32_to_bf16x16(const float v[16], uint4 o[2]) {
    uint32_t w[8];
    ak_dev_bf16w<16>(v, w);
    o[0] = make_uint4(w[0], w[1], w[2], w[3]);
    o[1] = make_uint4(w[4], w[5], w[6], w[7]);
}

/* 16 e4m3 bytes -> fp32 times s (__fmul_rn), as ak_dev_dec_e4m3n. */
__device__ __forceinline__ void ak_e4m3x16_scaled(uint4 w, float s, float v[16]) {
    uint8_t b[16];
    memcpy(b, &w, 16);
    ak_dev_dec_e4m3n<16>(b, v);
    for (int i = 0; i < 16; i++) v[i] = __fmul_rn(v[i], s);
}

__device__ __forceinline__ uint4 ak_e4m3x16_pack(const float v[16]) {
    uint32_t w[4];
    ak_dev_e4m3w<16>(v, w);
    return make_uint4(w[0], w[1], w[2], w[3]);
}

/* The same for values known to hold no NaN (a finite ak_absmax_nan16): no screen. */
__device__ __forceinline__ uint4 ak_e4m3x16_pack_finite(const float v[16]) {
    return make_uint4(ak_dev_e4m3x4(v), ak_dev_e4m3x4(v + 4), ak_dev_e4m3x4(v + 8), ak_dev_e4m3x4(v + 12));
}

/* max |v[i]| over 16 values, NaN if one is NaN (max.NaN), inf if one is infinite. The
   quantizers compute their amax this way: where it is finite, the scaled values are finite too,
   so the encoder's NaN screen (21 instructions per 16 values) is skipped; otherwise the amax is
   recomputed ignoring NaN (fmaxf, the CPU backend's rule) and the screen runs (run s63). */
__device__ __forceinline__ float ak_absmax_nan16(const float v[16]) {
    float m = 0.0f;
    for (int i = 0; i < 16; i++) asm("max.NaN.f32 %0, %0, %1;" : "+f"(m) : "f"(fabsf(v[i])));
    return m;
}
__device__ __forceinline__ float ak_absmax16(const float v[16]) {
    float m = 0.0f;
    for (int i = 0; i < 16; i++) m = fmaxf(m, fabsf(v[i]));
    return m;
}
__device__ __forceinline__ bool ak_amax_finite(float amax) { return amax <= 3.402823466e38f; }

/* 16 fp32 holding no NaN -> bf16 in two uint4, no screen. */
__device__ __forceinline__ void ak_f32_to_bf16x16_finite(const float v[16], uint4 o[2]) {
    uint32_t w[8];
    for (int k = 0; k < 8; k++) w[k] = ak_dev_bf16x2(v[2 * k], v[2 * k + 1]);
    o[0] = make_uint4(w[0], w[1], w[2], w[3]);
    o[1] = make_uint4(w[4], w[5], w[6], w[7]);
}

/* 656 -> FP8-PT NoPE bytes without the fp32 round trip, when the tile scale s and k_scale k are
   powers of two in [2^-100, 2^100] and no byte is a NaN: then bf16_rn(q s) = q s exactly and
   (q s) / k = q 2^d with d = log2(s / k), so the byte is e4m3_sat(q 2^d). For d in [-24, 15] the
   product is exact in f16 wherever the e4m3 rounding can see it (f16 rounds only below 2^-14,
   which encodes to a signed zero either way; above 65504 it is inf, which saturates to 448 like
   the exact value): per two values a conversion to f16x2, one HMUL2 and a conversion back,
   instead of decode, scale, bf16 round, quotient and encode per value. Returns false (o unset)
   when the conditions fail. */
__device__ __forceinline__ bool ak_e4m3x16_rescale(uint4 w, float s, float k, uint4 *o) {
    const uint32_t us = ak_f32_bits(s), uk = ak_f32_bits(k);
    const int es = (int)(us >> 23) - 127, ek = (int)(uk >> 23) - 127, d = es - ek;
    const uint32_t wd[4] = {w.x, w.y, w.z, w.w};
    uint32_t nan = 0; /* a byte whose low 7 bits are 0x7f is a NaN */
    for (int i = 0; i < 4; i++) nan |= ((wd[i] & 0x7f7f7f7fu) + 0x01010101u) & 0x80808080u;
    if ((us & 0x807fffffu) != 0 || (uk & 0x807fffffu) != 0 || es < -100 || es > 100 || ek < -100 ||
        ek > 100 || d < -24 || d > 15 || nan != 0)
        return false;
    const uint32_t f = d >= -14 ? (uint32_t)(d + 15) << 10 : 1u << (d + 24); /* 2^d as f16 */
    const uint32_t f2 = f | f << 16;
    uint32_t r[4];
    for (int i = 0; i < 4; i++) {
        uint16_t b[2];
        for (int h = 0; h < 2; h++) {
            uint32_t x;
            asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(x) : "h"((uint16_t)(wd[i] >> (16 * h))));
            asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(x) : "r"(x), "r"(f2));
            asm("cvt.rn.satfinite.e4m3x2.f16x2 %0, %1;" : "=h"(b[h]) : "r"(x));
        }
        r[i] = (uint32_t)b[0] | (uint32_t)b[1] << 16;
    }
    *o = make_uint4(r[0], r[1], r[2], r[3]);
    return true;
}

/* ak_dev_pow2_exp without its fp32 division, for an amax that is a bf16 value (low 16 bits zero:
   the lean kernels quantize bf16 rows). amax / 448 = 2^(E-8) (1.f / 1.75): with 8 significant
   bits, 1.f / 1.75 is either exactly 1 or at least 2^-8 away from every power of two, so rounding
   the quotient never moves ceil(log2) and it is E - 8 + (f > 0.75). The default rule floors the
   quotient at 1e-4, i.e. the result at ceil(log2(1e-4)) = -13; the amax-floor rule floors amax
   at 1e-4, giving -22 below it. Zero, subnormal, inf and NaN amax, or one that is not bf16, take
   the exact functions. Checked against both on every positive normal bf16 value; saves the
   division (~10 instructions per lane and token, run s54). */
__device__ __forceinline__ int32_t ak_lean_pow2_exp(float amax, int rule) {
    const uint32_t u = ak_f32_bits(amax), ef = (u >> 23) & 0xffu;
    if ((u & 0x8000ffffu) != 0 || ef == 0 || ef == 255) return ak_dev_pow2_exp(amax, rule);
    const int32_t k = (int32_t)ef - 135 + ((u & 0x7fffffu) > 0x600000u ? 1 : 0);
    if (rule == AK_QUANT_POW2_AMAX_FLOOR) return amax >= 1e-4f ? k : -22;
    return k > -13 ? k : -13;
}

/* Encodes NoPE chunk ch of a destination record from v (tile amax already reduced). */
template <int DL>
__device__ __forceinline__ void ak_lean_enc_nope(uint8_t *rec, uint8_t *srow, int ch, float v[16],
                                                 float amax, bool finite, int rule, const ak_divisor &kd) {
    if (DL == AK_LAYOUT_MLA_BF16) {
        uint4 o[2];
        ak_f32_to_bf16x16(v, o);
        *(uint4 *)(rec + ch * 32) = o[0];
        *(uint4 *)(rec + ch * 32 + 16) = o[1];
    } else if (DL == AK_LAYOUT_MLA_FP8_PERTENSOR) {
        ak_div_n<16>(kd, v);
        *(uint4 *)(rec + ch * 16) = ak_e4m3x16_pack(v);
    } else if (DL == AK_LAYOUT_DSA_FP8_BLOCKSCALE) {
        float sc;
        if (rule == AK_QUANT_FP32) {
            sc = __fdiv_rn(amax, 448.0f);
            if (!(sc >= 1e-4f)) sc = 1e-4f;
            /* sc >= 1e-4: the correction applies */
            const float rs = __fdiv_rn(1.0f, sc), sr = rs == 0.0f ? 0.0f : sc;
            for (int i = 0; i < 16; i++) v[i] = ak_div_fast(v[i], sr, rs);
        } else { /* x / 2^k == x * 2^-k exactly */
            const int32_t k = ak_lean_pow2_exp(amax, AK_QUANT_DEFAULT);
            sc = ak_pow2_f32(k);
            const float rs = ak_pow2_f32(-k);
            for (int i = 0; i < 16; i++) v[i] = __fmul_rn(v[i], rs);
        }
        *(uint4 *)(rec + ch * 16) = finite ? ak_e4m3x16_pack_finite(v) : ak_e4m3x16_pack(v);
        if ((ch & 7) == 0) *(float *)(rec + 512 + 4 * (ch >> 3)) = sc;
    } else { /* DSV4_FP8_UE8M0 */
        int32_t e = 127 + ak_lean_pow2_exp(amax, rule);
        e = e < 1 ? 1 : e > 254 ? 254 : e;
        /* 1 / 2^(e - 127), exactly (2^-127 is an fp32 subnormal) */
        const float rs = e < 254 ? ak_pow2_f32(127 - e) : ak_f32_from_bits(0x00400000u);
        for (int i = 0; i < 16; i++) v[i] = __fmul_rn(v[i], rs);
        *(uint4 *)(rec + ch * 16) = finite ? ak_e4m3x16_pack_finite(v) : ak_e4m3x16_pack(v);
        if ((ch & 3) == 0) srow[ch >> 2] = (uint8_t)e;
        if (ch == 0) srow[7] = 0;
    }
}

/* Encodes RoPE chunk rc (dims [16 rc, 16 rc + 16) of the 64) of a destination record. */
template <int DL>
__device__ __forceinline__ void ak_lean_enc_rope(uint8_t *rec, int rc, float v[16], bool finite,
                                                 const ak_divisor &kd) {
    if (DL == AK_LAYOUT_MLA_FP8_PERTENSOR) {
        ak_div_n<16>(kd, v);
        *(uint4 *)(rec + 512 + rc * 16) = ak_e4m3x16_pack(v);
        return;
    }
    const int off = DL == AK_LAYOUT_MLA_BF16 ? 1024 : DL == AK_LAYOUT_DSA_FP8_BLOCKSCALE ? 528 : 448;
    uint4 o[2];
    if (finite) ak_f32_to_bf16x16_finite(v, o);
    else ak_f32_to_bf16x16(v, o);
    *(uint4 *)(rec + off + rc * 32) = o[0];
    *(uint4 *)(rec + off + rc * 32 + 16) = o[1];
}

/* Stores 16 fp32 as output row elements (bf16 or f32, 16-byte aligned). */
template <int DT>
__device__ __forceinline__ void ak_lean_out(void *base, int64_t off, const float v[16]) {
    if (DT == AK_DTYPE_BF16) {
        uint4 o[2];
        ak_f32_to_bf16x16(v, o);
        uint4 *p = (uint4 *)((uint16_t *)base + off);
        p[0] = o[0];
        p[1] = o[1];
    } else {
        float4 *p = (float4 *)((float *)base + off);
        for (int i = 0; i < 4; i++) p[i] = make_float4(v[4 * i], v[4 * i + 1], v[4 * i + 2], v[4 * i + 3]);
    }
}

/* Source bytes of one token a lean kernel stages: SA from the token's first pointer (the record,
   the V4 data row, or the nope input row), SB from its second (the V4 scale row, the rope input
   row); RB the staged stride. */
template <int SL, int DL> struct ak_lean_src {
    enum {
        SA = SL == AK_LEAN_ROWS ? (DL == AK_LAYOUT_DSV4_FP8_UE8M0 ? 896 : 1024)
             : SL == AK_LAYOUT_MLA_BF16 ? 1152 : SL == AK_LAYOUT_DSA_FP8_BLOCKSCALE ? 656 : 576,
        SB = SL == AK_LEAN_ROWS ? 128 : SL == AK_LAYOUT_DSV4_FP8_UE8M0 ? 8 : 0,
        RB = (SA + SB + 15) / 16 * 16
    };
};

/* Lane k < U resolves token i0 + k (rule I1): its state, source pointers and destination record /
   V4 scale row; other lanes get AK_TOK_SKIP and NULLs. */
template <int MODE, int U>
__device__ __forceinline__ int ak_lean_resolve(const ak_mla_job &j, int64_t i0, const uint8_t *&ma,
                                               const uint8_t *&mb, uint8_t *&md, uint8_t *&mds) {
    ma = mb = NULL;
    md = mds = NULL;
    if ((int)(threadIdx.x & 31) >= U) return AK_TOK_SKIP;
    const int64_t i = i0 + (threadIdx.x & 31);
    const ak_mla_tok t = ak_mla_tok_of(j, i, ak_mla_tok_key(j, i));
    ma = t.a;
    mb = t.b;
    if (MODE != AK_MLA_GATHER && t.state == AK_TOK_LIVE) md = ak_mla_rec(j.dst, t.ds, &mds);
    return t.state;
}

/* Resolves the U tokens of the step at i0 (ak_lean_resolve) and issues the
   cp.async copies of their live source bytes into buf ([U][RB], one commit group); returns the
   lane's token state and its destination record / V4 scale row. */
template <int MODE, int SL, int DL, int U>
__device__ __forceinline__ int ak_lean_issue(const ak_mla_job &j, int64_t i0, uint8_t *buf, uint8_t *&md,
                                             uint8_t *&mds) {
    typedef ak_lean_src<SL, DL> G;
    enum { PA = G::SA / 16, NA = (U * PA + 31) / 32 };
    const int lane = threadIdx.x & 31;
    const uint8_t *ma, *mb;
    const int mst = ak_lean_resolve<MODE, U>(j, i0, ma, mb, md, mds);
    const uint32_t base = ak_smem_addr(buf);
#pragma unroll
    for (int it = 0; it < NA; it++) {
        const int e = it * 32 + lane, k = e < U * PA ? e / PA : 0, p = e - k * PA;
        const uint8_t *a = ak_shfl_ptr(ma, k);
        const int st = __shfl_sync(0xffffffffu, mst, k);
        if (e < U * PA && st == AK_TOK_LIVE) ak_cp_async16(base + k * G::RB + p * 16, a + p * 16, 16);
    }
    if (G::SB == 128) { /* rope input rows: 8 pieces per token, U <= 4 */
        const int k = lane >> 3 < U ? lane >> 3 : 0, p = lane & 7;
        const uint8_t *b = ak_shfl_ptr(mb, k);
        const int st = __shfl_sync(0xffffffffu, mst, k);
        if (lane < 8 * U && st == AK_TOK_LIVE) ak_cp_async16(base + k * G::RB + G::SA + p * 16, b + p * 16, 16);
    } else if (G::SB == 8) { /* V4 scale row */
        if (lane < U && mst == AK_TOK_LIVE) ak_cp_async8(base + lane * G::RB + G::SA, mb, 8);
    }
    ak_cp_async_commit();
    return mst;
}

/* One warp step of a lean kernel: tokens i0 .. i0 + U - 1, resolved by lanes k < U (state mst,
   destination md / mds). Source bytes come from the stage sbuf (STAGED) or straight from global
   memory through the lanes' pointers ma / mb: every lane loads its NoPE chunk of all U tokens and
   one RoPE chunk before it converts and stores any. */
template <int MODE, int SL, int DL, int DT, int U, bool STAGED>
__device__ __forceinline__ void ak_lean_step(const ak_mla_job &j, int64_t i0, int mst, uint8_t *md, uint8_t *mds,
                                             const uint8_t *ma, const uint8_t *mb, const uint8_t *sbuf,
                                             float ks, const ak_divisor &kd) {
    typedef ak_lean_src<SL, DL> G;
    constexpr int LAY = MODE == AK_MLA_GATHER ? SL : DL;
    constexpr bool V4 = LAY == AK_LAYOUT_DSV4_FP8_UE8M0; /* 28 NoPE + 4 RoPE chunks in one pass */
    constexpr bool BF16SRC = SL == AK_LEAN_ROWS || SL == AK_LAYOUT_MLA_BF16; /* 32-byte chunks */
    constexpr bool PT656 = MODE == AK_MLA_CONVERT && SL == AK_LAYOUT_MLA_FP8_PERTENSOR &&
                           DL == AK_LAYOUT_DSA_FP8_BLOCKSCALE; /* NoPE bytes kept */
    constexpr bool TOPT656 = MODE == AK_MLA_CONVERT && SL == AK_LAYOUT_DSA_FP8_BLOCKSCALE &&
                             DL == AK_LAYOUT_MLA_FP8_PERTENSOR; /* ak_e4m3x16_rescale */
    /* 656 NoPE decodes to bf16_rn(q * s); a destination that stores bf16 rounds it once itself */
    constexpr bool BF16DST = (MODE == AK_MLA_CONVERT && DL == AK_LAYOUT_MLA_BF16) ||
                             (MODE == AK_MLA_GATHER && DT == AK_DTYPE_BF16);
    /* staged fp8 -> BF16 converts read the stage as lane l owning dims [8 l, 8 l + 8) and
       [256 + 8 l, ...), so each 16-byte store instruction writes 512 contiguous bytes */
    constexpr bool REMAP = STAGED && MODE == AK_MLA_CONVERT && DL == AK_LAYOUT_MLA_BF16 && !BF16SRC;
    const int lane = threadIdx.x & 31;
    const int rk = lane >> 2, rc = lane & 3; /* RoPE item of this lane (lane < 4 U) */
    uint4 raw[U][2];
    float sc[U];
    int st[U];
    uint8_t *dp[U], *dsp[U];
#pragma unroll
    for (int k = 0; k < U; k++) {
        st[k] = __shfl_sync(0xffffffffu, mst, k);
        const uint8_t *a = STAGED ? sbuf + k * G::RB : ak_shfl_ptr(ma, k);
        const uint8_t *b = STAGED ? a + G::SA : ak_shfl_ptr(mb, k);
        dp[k] = (uint8_t *)ak_shfl_ptr(md, k);
        dsp[k] = V4 && MODE != AK_MLA_GATHER ? (uint8_t *)ak_shfl_ptr(mds, k) : NULL;
        /* staged: a token's stage bytes are read whatever its state (stale for a skipped token,
           whose results are never stored), which spares a zeroed copy and a predicated move per
           word (s66) */
        if (!STAGED) {
            raw[k][0] = raw[k][1] = make_uint4(0, 0, 0, 0);
            sc[k] = 0.0f;
        }
        if (REMAP || (!STAGED && st[k] != AK_TOK_LIVE)) continue;
        if (V4 && lane >= 28) { /* V4 RoPE: bf16 */
            const uint8_t *p = SL == AK_LEAN_ROWS ? b + (lane - 28) * 32 : a + 448 + (lane - 28) * 32;
            raw[k][0] = *(const uint4 *)p;
            raw[k][1] = *(const uint4 *)(p + 16);
        } else if (BF16SRC) {
            raw[k][0] = *(const uint4 *)(a + lane * 32);
            raw[k][1] = *(const uint4 *)(a + lane * 32 + 16);
        } else {
            raw[k][0] = *(const uint4 *)(a + lane * 16);
            if (SL == AK_LAYOUT_DSA_FP8_BLOCKSCALE && !PT656)
                sc[k] = *(const float *)(a + 512 + 4 * (lane >> 3));
            else if (SL == AK_LAYOUT_DSV4_FP8_UE8M0)
                sc[k] = ak_ue8m0_to_f32(b[lane >> 2]);
        }
    }
    uint4 rr[2] = {make_uint4(0, 0, 0, 0), make_uint4(0, 0, 0, 0)};
    int rst = AK_TOK_SKIP;
    uint8_t *rdp = NULL;
    if (!V4) {
        rst = __shfl_sync(0xffffffffu, mst, rk);
        const uint8_t *a = STAGED ? sbuf + (rk < U ? rk : 0) * G::RB : ak_shfl_ptr(ma, rk);
        const uint8_t *b = STAGED ? a + G::SA : ak_shfl_ptr(mb, rk);
        rdp = (uint8_t *)ak_shfl_ptr(md, rk);
        if (lane >= 4 * U) rst = AK_TOK_SKIP;
        if (STAGED || rst == AK_TOK_LIVE) {
            if (SL == AK_LAYOUT_MLA_FP8_PERTENSOR) {
                rr[0] = *(const uint4 *)(a + 512 + rc * 16);
            } else {
                const uint8_t *p = SL == AK_LEAN_ROWS ? b + rc * 32
                                   : SL == AK_LAYOUT_MLA_BF16 ? a + 1024 + rc * 32
                                                              : a + 528 + rc * 32;
                rr[0] = *(const uint4 *)p;
                rr[1] = *(const uint4 *)(p + 16);
            }
        }
    }
    /* convert and store, token by token (warp-uniform state: tile shuffles) */
#pragma unroll
    for (int k = 0; k < U; k++) {
        if (st[k] == AK_TOK_SKIP) continue;
        const bool rope = V4 && lane >= 28;
        float v[16];
        if (REMAP) { /* a convert's token is LIVE here */
            const uint8_t *a = sbuf + k * G::RB;
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int g = 32 * h + lane;
                const float s = SL == AK_LAYOUT_DSA_FP8_BLOCKSCALE ? *(const float *)(a + 512 + 4 * (g >> 4)) : ks;
                ak_dev_dec_e4m3n<8>(a + 8 * g, v);
                for (int i = 0; i < 8; i++) v[i] = __fmul_rn(v[i], s);
                uint32_t o[4];
                ak_dev_bf16w<8>(v, o);
                *(uint4 *)(dp[k] + 16 * g) = make_uint4(o[0], o[1], o[2], o[3]);
            }
            continue;
        }
        if (PT656) {
            *(uint4 *)(dp[k] + lane * 16) = raw[k][0];
            if ((lane & 7) == 0) *(float *)(dp[k] + 512 + 4 * (lane >> 3)) = ks;
            continue;
        }
        if (TOPT656 && st[k] == AK_TOK_LIVE) {
            uint4 o;
            if (ak_e4m3x16_rescale(raw[k][0], sc[k], kd.s, &o)) {
                *(uint4 *)(dp[k] + lane * 16) = o;
                continue;
            }
        }
        if (st[k] == AK_TOK_ZERO) {
            for (int i = 0; i < 16; i++) v[i] = 0.0f;
        } else if (BF16SRC || rope) {
            ak_bf16x8_to_f32(raw[k][0], v);
            ak_bf16x8_to_f32(raw[k][1], v + 8);
        } else if (SL == AK_LAYOUT_MLA_FP8_PERTENSOR) {
            ak_e4m3x16_scaled(raw[k][0], ks, v);
        } else {
            ak_e4m3x16_scaled(raw[k][0], sc[k], v);
            if (SL == AK_LAYOUT_DSA_FP8_BLOCKSCALE && !BF16DST)
                for (int i = 0; i < 16; i++) v[i] = ak_bf16_round_f32(v[i]);
        }
        if (MODE == AK_MLA_GATHER && DT == AK_DTYPE_BF16) {
            /* lane l holds dims [16 l, 16 l + 16) as halves h0, h1; lane l ^ 16 takes this lane's h1,
               so each 16-byte store instruction covers 512 contiguous bytes (dims [0, 256), then
               [256, 512)) instead of half of every sector in a 1 KB span (run s58) */
            uint4 o[2];
            ak_f32_to_bf16x16(v, o);
            const uint4 ph = make_uint4(__shfl_xor_sync(0xffffffffu, o[1].x, 16), __shfl_xor_sync(0xffffffffu, o[1].y, 16),
                                        __shfl_xor_sync(0xffffffffu, o[1].z, 16), __shfl_xor_sync(0xffffffffu, o[1].w, 16));
            uint4 *row = (uint4 *)((uint16_t *)j.out.data + (i0 + k) * j.out.rs); /* 8 dims per uint4 */
            /* selects, not a branch: both halves of the warp must store in the same instruction */
            const bool lo = lane < 16;
            const int own = 2 * lane, other = 2 * (lane ^ 16) + 1; /* own h0, partner's h1 */
            row[lo ? own : other] = lo ? o[0] : ph; /* dims [0, 256) */
            row[lo ? other : own] = lo ? ph : o[0]; /* dims [256, 512) */
            continue;
        }
        if (MODE == AK_MLA_GATHER) {
            ak_lean_out<DT>(j.out.data, (i0 + k) * j.out.rs + lane * 16, v);
            continue;
        }
        float amax = 0.0f;
        bool finite = false;
        if (DL == AK_LAYOUT_DSA_FP8_BLOCKSCALE || DL == AK_LAYOUT_DSV4_FP8_UE8M0) {
            amax = ak_absmax_nan16(v);
            finite = ak_amax_finite(amax);
            if (!finite) amax = ak_absmax16(v);
            amax = ak_group_max(amax, DL == AK_LAYOUT_DSA_FP8_BLOCKSCALE ? 8 : 4);
        }
        if (rope) {
            ak_lean_enc_rope<DL>(dp[k], lane - 28, v, finite, kd);
        } else {
            ak_lean_enc_nope<DL>(dp[k], dsp[k], lane, v, amax, finite, j.rule, kd);
        }
    }
    if (!V4 && rst != AK_TOK_SKIP) {
        float v[16];
        if (rst == AK_TOK_ZERO) {
            for (int i = 0; i < 16; i++) v[i] = 0.0f;
        } else if (SL == AK_LAYOUT_MLA_FP8_PERTENSOR) {
            ak_e4m3x16_scaled(rr[0], ks, v);
        } else {
            ak_bf16x8_to_f32(rr[0], v);
            ak_bf16x8_to_f32(rr[1], v + 8);
        }
        if (MODE == AK_MLA_GATHER) ak_lean_out<DT>(j.out.data, (i0 + rk) * j.out.rs + (32 + rc) * 16, v);
        else ak_lean_enc_rope<DL>(rdp, rc, v, false, kd);
    }
}

/* Kind 1 -> 0 where the values divided are bf16 and x * rs encodes as x / s for all of them
   (ak_e4m3_recip_exact, one significand per thread: about one scale in 40000 fails). The whole
   block calls it. The product costs one multiply per value instead of the correction's three
   instructions, a compare and a select (run s61: BF16 -> FP8-PT at k_scale 0.0179 was issue-bound,
   443 warp instructions per token). */
__device__ __forceinline__ void ak_divisor_bf16(ak_divisor &d) {
    static_assert(AK_LEAN_THREADS >= 128, "one significand per thread");
    const bool ok = threadIdx.x >= 128 || ak_e4m3_recip_exact(d.s, d.rs, threadIdx.x);
    if (__syncthreads_and(ok)) d.kind = 0;
}
/* MODE: AK_MLA_WRITE / CONVERT / GATHER. SL: source layout (AK_LEAN_ROWS for write). DL:
   destination layout (write / convert). DT: gather output dtype. Staged instantiations
   (ak_lean_staged) double-buffer each warp's source bytes in shared memory: the next step's
   cp.async copies are issued before this step's wait, so a warp keeps a step of loads in flight
   through its conversion instead of holding them in registers. */
template <int MODE, int SL, int DL, int DT, int U>
__global__ void __launch_bounds__(AK_LEAN_THREADS, (ak_lean_min_blocks<MODE, SL, DL>())) ak_mla_lean_kernel(ak_mla_job j) {
    typedef ak_lean_src<SL, DL> G;
    constexpr bool STAGED = ak_lean_staged<MODE, SL, DL>();
    const int64_t warp = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int64_t step = (((int64_t)gridDim.x * blockDim.x) >> 5) * U;
    const float ks = SL == AK_LAYOUT_MLA_FP8_PERTENSOR ? ak_kv_k_scale(&j.src.c) : 1.0f;
    ak_divisor kd = ak_divisor_of(
        MODE != AK_MLA_GATHER && DL == AK_LAYOUT_MLA_FP8_PERTENSOR ? ak_kv_k_scale(&j.dst.c) : 1.0f);
    /* the values a lean quantizer divides are bf16: input rows, or 656 keys rounded to bf16 */
    static_assert(SL != AK_LAYOUT_DSV4_FP8_UE8M0 || DL != AK_LAYOUT_MLA_FP8_PERTENSOR, "V4 values are not bf16");
    if (MODE != AK_MLA_GATHER && DL == AK_LAYOUT_MLA_FP8_PERTENSOR && kd.kind == 1) ak_divisor_bf16(kd);
    enum { SBYTES = STAGED ? U * G::RB : 16 };
    static_assert(AK_LEAN_THREADS / 32 * 2 * SBYTES <= 48 * 1024, "static stage over 48 KB");
    __shared__ __align__(16) uint8_t stage[AK_LEAN_THREADS / 32][2][SBYTES];
    int64_t i0 = warp * U;
    if (!STAGED) {
        for (; i0 < j.n; i0 += step) {
            const uint8_t *ma, *mb;
            uint8_t *md, *mds;
            const int mst = ak_lean_resolve<MODE, U>(j, i0, ma, mb, md, mds);
            ak_lean_step<MODE, SL, DL, DT, U, false>(j, i0, mst, md, mds, ma, mb, NULL, ks, kd);
        }
        return;
    }
    uint8_t(*const sw)[SBYTES] = stage[threadIdx.x >> 5];
    if (i0 >= j.n) return;
    uint8_t *md, *mds;
    int mst = ak_lean_issue<MODE, SL, DL, U>(j, i0, sw[0], md, mds);
    for (int sb = 0; i0 < j.n; i0 += step, sb ^= 1) {
        /* the next step's copies go out before this step's wait */
        uint8_t *nd = NULL, *nds = NULL;
        int nst = AK_TOK_SKIP;
        if (i0 + step < j.n) nst = ak_lean_issue<MODE, SL, DL, U>(j, i0 + step, sw[sb ^ 1], nd, nds);
        else ak_cp_async_commit(); /* an empty group keeps the wait below uniform */
        ak_cp_async_wait_group<1>();
        __syncwarp();
        ak_lean_step<MODE, SL, DL, DT, U, true>(j, i0, mst, md, mds, NULL, NULL, sw[sb], ks, kd);
        __syncwarp(); /* buffer sb is refilled by the next step's issue */
        md = nd;
        mds = nds;
        mst = nst;
    }
}

/* V4 re-page (C8, listed pages; the AoS layouts take ak_run_copy_kernel below): a warp copies the
   576-byte data rows of AK_LEAN_U tokens as one flat run of 16-byte pieces through a shared-memory
   double buffer, the next step's cp.async copies issued before this step's stores; a token's
   8-byte scale row is copied by the lane that resolved it. */
__device__ __forceinline__ void ak_copy_issue(const ak_mla_job &j, int64_t i0, uint8_t *buf, uint8_t *&md,
                                              const uint8_t *&mss, uint8_t *&mds) {
    enum { REC = 576, U = AK_LEAN_U, P = REC / 16, NIT = (U * P + 31) / 32 };
    const int lane = threadIdx.x & 31;
    const uint8_t *ms = NULL;
    md = mds = NULL;
    mss = NULL;
    if (lane < U) {
        const int64_t i = i0 + lane;
        const ak_mla_tok t = ak_mla_tok_of(j, i, ak_mla_tok_key(j, i));
        if (t.state == AK_TOK_LIVE) {
            ms = t.a;
            mss = t.b;
            md = ak_mla_rec(j.dst, t.ds, &mds);
        }
    }
    const uint32_t base = ak_smem_addr(buf);
#pragma unroll
    for (int it = 0; it < NIT; it++) {
        const int e = it * 32 + lane, k = e < U * P ? e / P : 0, p = e - k * P;
        const uint8_t *src = ak_shfl_ptr(ms, k);
        if (e < U * P && src != NULL) ak_cp_async16(base + k * REC + p * 16, src + p * 16, 16);
    }
    ak_cp_async_commit();
}

__global__ void __launch_bounds__(AK_LEAN_THREADS) ak_mla_copy_kernel(ak_mla_job j) {
    enum { REC = 576, U = AK_LEAN_U, P = REC / 16, NIT = (U * P + 31) / 32 };
    static_assert(AK_LEAN_THREADS / 32 * 2 * U * REC <= 48 * 1024, "static stage over 48 KB");
    __shared__ __align__(16) uint8_t stage[AK_LEAN_THREADS / 32][2][U * REC];
    uint8_t(*const sw)[U * REC] = stage[threadIdx.x >> 5];
    const int lane = threadIdx.x & 31;
    const int64_t warp = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int64_t step = (((int64_t)gridDim.x * blockDim.x) >> 5) * U;
    int64_t i0 = warp * U;
    if (i0 >= j.n) return;
    uint8_t *md, *mds;
    const uint8_t *mss;
    ak_copy_issue(j, i0, sw[0], md, mss, mds);
    for (int sb = 0; i0 < j.n; i0 += step, sb ^= 1) {
        uint8_t *nd = NULL, *nds = NULL;
        const uint8_t *nss = NULL;
        if (i0 + step < j.n) ak_copy_issue(j, i0 + step, sw[sb ^ 1], nd, nss, nds);
        else ak_cp_async_commit(); /* an empty group keeps the wait below uniform */
        ak_cp_async_wait_group<1>();
        __syncwarp();
#pragma unroll
        for (int it = 0; it < NIT; it++) {
            const int e = it * 32 + lane, k = e < U * P ? e / P : 0, p = e - k * P;
            uint8_t *d = (uint8_t *)ak_shfl_ptr(md, k);
            if (e < U * P && d != NULL) *(uint4 *)(d + p * 16) = *(const uint4 *)(sw[sb] + k * REC + p * 16);
        }
        if (md != NULL) *(uint2 *)mds = *(const uint2 *)mss;
        __syncwarp(); /* buffer sb is refilled by the next step's issue */
        md = nd;
        mds = nds;
        mss = nss;
    }
}

/* Same-layout re-page of the AoS layouts (1152, 576 and 656 bytes per token). Slot ids are kept,
   so runs of L = gcd(source, destination page size) tokens are contiguous in both pools. The runs'
   16-byte pieces form one flat sequence that the grid streams like a memcpy: lane l of a warp
   step takes pieces c0 + 32 u + l, AK_RUN_U loads issued before the stores, and the grid's warps
   cover consecutive spans (DRAM rows are consumed whole). The per-token copy kernel above held
   656 re-paged into padded pages at 69% of the copy bandwidth; a warp streaming one whole run at
   a time, 82-83% (runs s48-s49). */
#define AK_RUN_U 4
struct ak_run_job {
    const uint8_t *src; /* [src pages] of sstride bytes */
    uint8_t *dst;       /* [dst pages] of dstride bytes */
    int64_t sstride, dstride;
    const int32_t *pages; /* listed source pages (NULL: the whole pool) */
    int64_t pstride;
    int64_t nruns;        /* visited source pages * rpp */
    int32_t rpp, L;       /* runs per source page, tokens per run */
    int32_t sps, dps;     /* page sizes */
    uint32_t spages, dcap;
    int32_t rec;          /* bytes per token, a multiple of 16 */
};

/* A warp's place in a flat sequence of units (runs, pages) of `per` 16-byte pieces that the grid
   walks in strides: its step's first piece as (unit u, piece e), advanced without divisions (a
   64-bit division per step cost the quantizing MHA converts a fifth of their speed, run s49). */
struct ak_flat_pos {
    int64_t c0, total, stride; /* first piece of the step, pieces in all, pieces per grid step */
    int64_t u, du;
    int32_t e, de, per;
};
__device__ __forceinline__ ak_flat_pos ak_flat_begin(int64_t total, int32_t per, int pu) {
    ak_flat_pos f;
    f.total = total;
    f.per = per;
    f.stride = (((int64_t)gridDim.x * blockDim.x) >> 5) * 32 * pu;
    f.du = f.stride / per;
    f.de = (int32_t)(f.stride - f.du * per);
    f.c0 = (((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5) * 32 * pu;
    f.u = f.c0 / per;
    f.e = (int32_t)(f.c0 - f.u * per);
    return f;
}
__device__ __forceinline__ void ak_flat_next(ak_flat_pos &f) {
    f.c0 += f.stride;
    f.u += f.du;
    f.e += f.de;
    if (f.e >= f.per) f.e -= f.per, f.u++;
}

/* Source and destination of run w's first piece, or false when the run is skipped (rule I1 on
   the listed page, or past the destination capacity: runs never straddle it, L divides dps). */
__device__ __forceinline__ bool ak_run_at(const ak_run_job &j, int64_t w, const uint4 *&sp, uint4 *&dp) {
    const int64_t k = w / j.rpp;
    const int32_t r = (int32_t)(w - k * j.rpp);
    const uint32_t pg = j.pages != NULL ? (uint32_t)j.pages[k * j.pstride] : (uint32_t)k;
    if (pg >= j.spages) return false;
    const uint32_t s0 = pg * (uint32_t)j.sps + (uint32_t)(r * j.L);
    if (s0 >= j.dcap) return false;
    const uint32_t dpg = s0 / (uint32_t)j.dps;
    sp = (const uint4 *)(j.src + (int64_t)pg * j.sstride + (int64_t)r * j.L * j.rec);
    dp = (uint4 *)(j.dst + (int64_t)dpg * j.dstride + (int64_t)(s0 - dpg * (uint32_t)j.dps) * j.rec);
    return true;
}

__global__ void __launch_bounds__(256) ak_run_copy_kernel(ak_run_job j) {
    const int lane = threadIdx.x & 31;
    const int32_t np = j.L * (j.rec / 16); /* pieces per run */
    for (ak_flat_pos f = ak_flat_begin(j.nruns * np, np, AK_RUN_U); f.c0 < f.total; ak_flat_next(f)) {
        const int64_t w0 = f.u;
        const int32_t e0 = f.e;
        const uint4 *sp0 = NULL;
        uint4 *dp0 = NULL;
        const bool ok0 = ak_run_at(j, w0, sp0, dp0);
        uint4 v[AK_RUN_U];
        uint4 *o[AK_RUN_U];
#pragma unroll
        for (int u = 0; u < AK_RUN_U; u++) {
            o[u] = NULL;
            int32_t e = e0 + u * 32 + lane;
            if (f.c0 + u * 32 + lane >= f.total) continue;
            const uint4 *sp = sp0;
            uint4 *dp = dp0;
            bool ok = ok0;
            if (e >= np) { /* the step crosses into a later run */
                const int32_t q = e / np;
                e -= q * np;
                ok = ak_run_at(j, w0 + q, sp, dp);
            }
            if (!ok) continue;
            v[u] = ak_ldg_nc_v4(sp + e);
            o[u] = dp + e;
        }
#pragma unroll
        for (int u = 0; u < AK_RUN_U; u++)
            if (o[u] != NULL) *o[u] = v[u];
    }
}

static int32_t ak_gcd(int32_t a, int32_t b) {
    while (b != 0) {
        const int32_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

static ak_status ak_run_copy(ak_context *ctx, const ak_mla_job *j) {
    ak_run_job r;
    r.src = (const uint8_t *)j->src.c.data;
    r.dst = (uint8_t *)j->dst.c.data;
    r.sstride = j->src.stride;
    r.dstride = j->dst.stride;
    r.pages = j->pages;
    r.pstride = j->page_stride;
    r.sps = j->src.c.page_size;
    r.dps = j->dst.c.page_size;
    r.L = ak_gcd(r.sps, r.dps);
    r.rpp = r.sps / r.L;
    r.nruns = j->n / r.sps * r.rpp;
    r.spages = (uint32_t)j->src.c.num_pages;
    r.dcap = j->dst.cap;
    r.rec = j->src.rec_bytes;
    const int64_t pieces = r.nruns * r.L * (r.rec / 16);
    /* 256 blocks per SM, about two grid steps for a 1 GiB pool: at 32 a warp's stride over the pool
       cost C13 2.7 points of copy (run s72) */
    ak_run_copy_kernel<<<ak_grid_cap(ctx, (pieces + AK_RUN_U - 1) / AK_RUN_U, 256, 256), 256, 0, ak_stream(ctx)>>>(r);
    AK_CUDA_CHECK_LAUNCH("ak_run_copy_kernel");
    return AK_OK;
}

/* Blocks of a lean or copy kernel over n tokens, u per warp step, `steps` steps per warp
   (ak_lean_steps): the staged kernels (and the V4 gather) run best at about two (the first step's
   copies are in flight before the loop, the second's behind the first's conversion), the 4-token
   register-loading gathers at one (run s70: with the grid capped at 32 blocks per SM, as before, a
   1 GiB convert took about 14 steps per warp and lost 1-7 points of copy; at one step the staged
   writers lose their overlap, 7 points). At least one step per warp until the GPU is full, so
   small calls stay parallel; at most 1024 blocks per SM (larger calls stride). */
static int ak_lean_grid(const ak_context *ctx, int64_t n, int u, int steps) {
    const int64_t sms = ctx->info.sm_count > 0 ? ctx->info.sm_count : 132, wpb = AK_LEAN_THREADS / 32;
    const int64_t warps = (n + u - 1) / u, full = (warps + wpb - 1) / wpb;
    int64_t blocks = (warps + steps * wpb - 1) / (steps * wpb);
    if (blocks < full && blocks < sms * 4) blocks = full < sms * 4 ? full : sms * 4;
    return (int)(blocks < 1 ? 1 : blocks < sms * 1024 ? blocks : sms * 1024);
}

template <int MODE, int SL, int DL, int DT>
static ak_status ak_lean_go(ak_context *ctx, const ak_mla_job *j) {
    constexpr int U = ak_lean_u<MODE, SL, DL>();
    const int grid = ak_lean_grid(ctx, j->n, U, ak_lean_steps<MODE, SL, DL>());
    ak_mla_lean_kernel<MODE, SL, DL, DT, U><<<grid, AK_LEAN_THREADS, 0, ak_stream(ctx)>>>(*j);
    AK_CUDA_CHECK_LAUNCH("ak_mla_lean_kernel");
    return AK_OK;
}

/* Runs job j with a lean kernel when one fits; *done = false leaves it to the staged kernel. */
static ak_status ak_mla_lean(ak_context *ctx, const ak_mla_job *j, bool *done) {
    *done = false;
    if (j->n == 0) {
        *done = true;
        return AK_OK;
    }
    if (j->mode == AK_MLA_WRITE) {
        if (!(j->vec && j->dst.vec && j->nope.dtype == AK_DTYPE_BF16 && j->rope.dtype == AK_DTYPE_BF16))
            return AK_OK;
        *done = true;
        switch (j->dst.c.layout) {
        case AK_LAYOUT_MLA_BF16: return ak_lean_go<AK_MLA_WRITE, AK_LEAN_ROWS, AK_LAYOUT_MLA_BF16, 0>(ctx, j);
        case AK_LAYOUT_MLA_FP8_PERTENSOR:
            return ak_lean_go<AK_MLA_WRITE, AK_LEAN_ROWS, AK_LAYOUT_MLA_FP8_PERTENSOR, 0>(ctx, j);
        case AK_LAYOUT_DSA_FP8_BLOCKSCALE:
            return ak_lean_go<AK_MLA_WRITE, AK_LEAN_ROWS, AK_LAYOUT_DSA_FP8_BLOCKSCALE, 0>(ctx, j);
        default: return ak_lean_go<AK_MLA_WRITE, AK_LEAN_ROWS, AK_LAYOUT_DSV4_FP8_UE8M0, 0>(ctx, j);
        }
    }
    if (j->mode == AK_MLA_GATHER) {
        const int dt = j->out.dtype;
        if (!(j->src.vec && j->out.vec && (dt == AK_DTYPE_BF16 || dt == AK_DTYPE_F32))) return AK_OK;
        *done = true;
        const int l = j->src.c.layout;
#define AK_LEAN_G(L)                                                                               \
    if (l == L) {                                                                                  \
        if (dt == AK_DTYPE_BF16) return ak_lean_go<AK_MLA_GATHER, L, 0, AK_DTYPE_BF16>(ctx, j);    \
        return ak_lean_go<AK_MLA_GATHER, L, 0, AK_DTYPE_F32>(ctx, j);                              \
    }
        AK_LEAN_G(AK_LAYOUT_MLA_BF16)
        AK_LEAN_G(AK_LAYOUT_MLA_FP8_PERTENSOR)
        AK_LEAN_G(AK_LAYOUT_DSA_FP8_BLOCKSCALE)
        AK_LEAN_G(AK_LAYOUT_DSV4_FP8_UE8M0)
#undef AK_LEAN_G
        *done = false;
        return AK_OK;
    }
    /* convert */
    if (!(j->src.vec && j->dst.vec)) return AK_OK;
    const int sl = j->src.c.layout, dl = j->dst.c.layout;
    *done = true;
    if (sl == dl) {
        if (sl != AK_LAYOUT_DSV4_FP8_UE8M0) return ak_run_copy(ctx, j);
        ak_mla_copy_kernel<<<ak_lean_grid(ctx, j->n, AK_LEAN_U, 2), AK_LEAN_THREADS, 0, ak_stream(ctx)>>>(*j);
        AK_CUDA_CHECK_LAUNCH("ak_mla_copy_kernel");
        return AK_OK;
    }
#define AK_LEAN_C(SL_, DL_)                                                                        \
    if (sl == SL_ && dl == DL_) return ak_lean_go<AK_MLA_CONVERT, SL_, DL_, 0>(ctx, j);
    AK_LEAN_C(AK_LAYOUT_MLA_BF16, AK_LAYOUT_MLA_FP8_PERTENSOR)
    AK_LEAN_C(AK_LAYOUT_MLA_BF16, AK_LAYOUT_DSA_FP8_BLOCKSCALE)
    AK_LEAN_C(AK_LAYOUT_MLA_FP8_PERTENSOR, AK_LAYOUT_MLA_BF16)
    AK_LEAN_C(AK_LAYOUT_MLA_FP8_PERTENSOR, AK_LAYOUT_DSA_FP8_BLOCKSCALE)
    AK_LEAN_C(AK_LAYOUT_DSA_FP8_BLOCKSCALE, AK_LAYOUT_MLA_BF16)
    AK_LEAN_C(AK_LAYOUT_DSA_FP8_BLOCKSCALE, AK_LAYOUT_MLA_FP8_PERTENSOR)
#undef AK_LEAN_C
    *done = false;
    return AK_OK;
}

/* Staged bytes of one source token of a cache layout (a V4 data row and its scale row). */
static int32_t ak_mla_staged_bytes(ak_layout l) {
    return ak_mla_rec_bytes(l) + (l == AK_LAYOUT_DSV4_FP8_UE8M0 ? AK_DSV4_SCALE_BYTES : 0);
}

/* Runs a lean kernel when one fits; otherwise sizes the stages (about 24 KB each, at most 32
   tokens; 96 KB of buffers per block, two blocks per SM) and launches one persistent grid. */
static ak_status ak_mla_launch(ak_context *ctx, ak_mla_job *j, int32_t token_bytes) {
    if (j->n == 0) return AK_OK;
    bool lean;
    AK_TRY(ak_mla_lean(ctx, j, &lean));
    if (lean) return AK_OK;
    j->pieces = (token_bytes + 15) / 16;
    j->tstride = j->pieces * 16;
    int32_t tb = AK_MLA_STAGE_BYTES / j->tstride; /* tstride <= 2304: tb >= 10 */
    j->tb = tb > 32 ? 32 : tb;
    const size_t smem = AK_MLA_STAGES * (size_t)j->tb * (size_t)j->tstride;
    /* more than the default 48 KB of dynamic shared memory: opt in once per device */
    static int opted[64];
    const int dev = ctx->device_id;
    if (dev < 0 || dev >= 64 || !opted[dev]) {
        AK_CUDA_TRY(cudaFuncSetAttribute(ak_mla_codec_kernel,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         AK_MLA_SMEM_MAX));
        AK_CUDA_TRY(cudaFuncSetAttribute(ak_mla_codec_kernel,
                                         cudaFuncAttributePreferredSharedMemoryCarveout,
                                         cudaSharedmemCarveoutMaxShared));
        if (dev >= 0 && dev < 64) opted[dev] = 1;
    }
    int64_t groups = (j->n + j->tb - 1) / j->tb;
    int64_t cap = (int64_t)(ctx->info.sm_count > 0 ? ctx->info.sm_count : 132) * 2;
    int grid = (int)(groups < cap ? groups : cap);
    ak_mla_codec_kernel<<<grid, AK_MLA_THREADS, smem, ak_stream(ctx)>>>(*j);
    AK_CUDA_CHECK_LAUNCH("ak_mla_codec_kernel");
    return AK_OK;
}

/* ---- indexer layouts: 8 lanes per token, 16 dims per lane ------------------------------------- */

/* A warp covers 4 tokens per round and AK_IDX_U (gather) or AK_IDX_WU (write) rounds per step:
   every round's loads are issued before the first is used, so each lane keeps several loads in
   flight instead of one. */
#define AK_IDX_U 4
#define AK_IDX_WU 2 /* writers hold 16 fp32 per token: 2 tokens keep them under 64 registers */

struct ak_idx_geo {
    uint8_t *data;
    int64_t stride;
    uint32_t cap;
    int32_t fp4;
    bool vec;
};

static ak_idx_geo ak_idx_geo_of(const ak_cache *c) {
    ak_idx_geo g;
    g.data = (uint8_t *)c->data;
    g.stride = ak_cache_stride(c);
    g.cap = (uint32_t)ak_cache_capacity(c);
    g.fp4 = c->layout == AK_LAYOUT_INDEXER_FP4;
    g.vec = ak_vec_ok(c->data, g.stride);
    return g;
}

/* One lane's 16 values (sub: which 16 of the 128) of an FP8 indexer token at row t of page pg:
   the token's scale from the 8 lanes' amax (every lane of the warp calls it: shuffles), then, for
   a valid slot (ok), the e4m3 bytes and, by lane sub 0, the scale at the page tail. */
__device__ __forceinline__ void ak_idx_store_fp8(const ak_idx_geo &g, uint8_t *pg, uint32_t t, bool ok, int sub,
                                                 float amax, float *v, int rule) {
    amax = ak_group_max(amax, 8);
    if (!ok) return;
    float a = amax >= 1e-4f ? amax : 1e-4f;
    float s = __fdiv_rn(a, 448.0f);
    if (rule == AK_QUANT_POW2) s = ak_pow2_f32(ak_ceil_log2_f32(s));
    /* s >= 2^-23 (power of two or not): the correction applies */
    const float rs = __fdiv_rn(1.0f, s), sr = rs == 0.0f ? 0.0f : s;
    for (int k = 0; k < 16; k++) v[k] = ak_div_amax(v[k], sr, rs);
    uint8_t qb[16];
    ak_dev_e4m3x16(v, qb);
    ak_st16(pg + t * 128 + sub * 16, qb, g.vec);
    if (sub == 0) ((float *)(pg + 8192))[t] = s;
}

__global__ void ak_idx_write_kernel(ak_idx_geo g, ak_rows in, const int32_t *slots,
                                    int64_t slot_stride, int64_t n, int rule) {
    const int sub = threadIdx.x & 7, q = (threadIdx.x >> 3) & 3; /* chunk of 16 dims, token */
    const int64_t warp = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int64_t nwarps = ((int64_t)gridDim.x * blockDim.x) >> 5;
    /* whole warps iterate together (shuffles) */
    for (int64_t b = warp * 4 * AK_IDX_WU; b < n; b += nwarps * 4 * AK_IDX_WU) {
        uint32_t slot[AK_IDX_WU];
        float v[AK_IDX_WU][16];
#pragma unroll
        for (int u = 0; u < AK_IDX_WU; u++) {
            const int64_t i = b + 4 * u + q;
            slot[u] = i < n ? (uint32_t)slots[i * slot_stride] : 0xffffffffu;
        }
#pragma unroll
        for (int u = 0; u < AK_IDX_WU; u++) {
            if (slot[u] < g.cap)
                ak_load_vals(v[u], 16, in.data, (b + 4 * u + q) * in.rs + sub * 16, in.dtype,
                             in.vec);
            else
                for (int k = 0; k < 16; k++) v[u][k] = 0.0f;
        }
#pragma unroll
        for (int u = 0; u < AK_IDX_WU; u++) {
            const bool ok = slot[u] < g.cap;
            float amax = ak_absmax16(v[u]);
            uint32_t page = ok ? slot[u] / 64u : 0, t = ok ? slot[u] % 64u : 0;
            uint8_t *pg = g.data + (int64_t)page * g.stride;
            if (!g.fp4) {
                ak_idx_store_fp8(g, pg, t, ok, sub, amax, v[u], rule);
            } else {
                amax = ak_group_max(amax, 2); /* 32-value scale group = 2 lanes */
                if (!ok) continue;
                float r = __fdiv_rn(amax, 6.0f);
                if (!(r >= 1e-4f)) r = 1e-4f;
                int32_t e = 127 + ak_ceil_log2_f32(r);
                e = e < 1 ? 1 : e > 254 ? 254 : e;
                float s = ak_ue8m0_to_f32((uint8_t)e);
                uint8_t qb[8];
                for (int k = 0; k < 8; k++)
                    qb[k] = (uint8_t)(ak_f32_to_e2m1(__fdiv_rn(v[u][2 * k], s)) |
                                      (ak_f32_to_e2m1(__fdiv_rn(v[u][2 * k + 1], s)) << 4));
                uint8_t *kp = pg + t * 64 + sub * 8;
                if (g.vec) {
                    uint2 w;
                    memcpy(&w, qb, 8);
                    *(uint2 *)kp = w;
                } else {
                    for (int k = 0; k < 8; k++) kp[k] = qb[k];
                }
                if ((sub & 1) == 0) pg[4096 + t * 4 + (sub >> 1)] = (uint8_t)e;
            }
        }
    }
}

/* FP8 indexer writes from 16-byte aligned bf16 rows (the common case): a grid of resident blocks
   whose warps take steps of 4 AK_IDX_WU tokens, the next step's slot ids and row bytes (two
   16-byte loads per lane and token) loaded before this step's quantization, so one step's loads
   are in flight through the previous one's arithmetic. The generic kernel above loads, converts
   and stores one step per warp (55-62% of the copy bandwidth, run s52). */
__device__ __forceinline__ void ak_idx_load_step(const ak_rows &in, const int32_t *slots, int64_t slot_stride,
                                                 int64_t n, int64_t b, int q, int sub, uint32_t cap,
                                                 uint4 (*raw)[2], uint32_t *slot) {
#pragma unroll
    for (int u = 0; u < AK_IDX_WU; u++) {
        const int64_t i = b + 4 * u + q;
        slot[u] = i < n ? (uint32_t)slots[i * slot_stride] : 0xffffffffu;
        raw[u][0] = raw[u][1] = make_uint4(0, 0, 0, 0);
        if (slot[u] < cap) {
            const uint4 *r = (const uint4 *)((const uint16_t *)in.data + i * in.rs + sub * 16);
            raw[u][0] = r[0];
            raw[u][1] = r[1];
        }
    }
}

__global__ void __launch_bounds__(256, 3) ak_idx_write_bf16_kernel(ak_idx_geo g, ak_rows in, const int32_t *slots,
                                                                   int64_t slot_stride, int64_t n, int rule) {
    const int sub = threadIdx.x & 7, q = (threadIdx.x >> 3) & 3; /* chunk of 16 dims, token */
    const int64_t step = (((int64_t)gridDim.x * blockDim.x) >> 5) * 4 * AK_IDX_WU;
    int64_t b = (((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5) * 4 * AK_IDX_WU;
    if (b >= n) return; /* whole warps: the shuffles below need every lane */
    uint4 raw[AK_IDX_WU][2];
    uint32_t slot[AK_IDX_WU];
    ak_idx_load_step(in, slots, slot_stride, n, b, q, sub, g.cap, raw, slot);
    for (; b < n; b += step) {
        uint4 nraw[AK_IDX_WU][2];
        uint32_t nslot[AK_IDX_WU];
        const bool more = b + step < n;
        if (more) ak_idx_load_step(in, slots, slot_stride, n, b + step, q, sub, g.cap, nraw, nslot);
#pragma unroll
        for (int u = 0; u < AK_IDX_WU; u++) {
            float v[16];
            ak_bf16x8_to_f32(raw[u][0], v);
            ak_bf16x8_to_f32(raw[u][1], v + 8);
            float amax = ak_absmax16(v);
            const bool ok = slot[u] < g.cap;
            const uint32_t page = ok ? slot[u] / 64u : 0, t = ok ? slot[u] % 64u : 0;
            ak_idx_store_fp8(g, g.data + (int64_t)page * g.stride, t, ok, sub, amax, v, rule);
        }
        if (more) {
#pragma unroll
            for (int u = 0; u < AK_IDX_WU; u++) raw[u][0] = nraw[u][0], raw[u][1] = nraw[u][1], slot[u] = nslot[u];
        }
    }
}

__global__ void ak_idx_gather_kernel(ak_idx_geo g, const int32_t *slots, int64_t slot_stride,
                                     int64_t n, ak_rows_out out, float *out_scale,
                                     int64_t scale_stride) {
    const int sub = threadIdx.x & 7;
    const int64_t grp = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 3;
    const int64_t ngrp = ((int64_t)gridDim.x * blockDim.x) >> 3;
    for (int64_t b = grp; b < n; b += ngrp * AK_IDX_U) {
        uint32_t slot[AK_IDX_U];
        uint8_t raw[AK_IDX_U][16]; /* FP8: 16 keys; FP4: 8 packed pair bytes */
        uint32_t sc[AK_IDX_U];     /* FP8: fp32 scale bits; FP4: the UE8M0 byte */
#pragma unroll
        for (int u = 0; u < AK_IDX_U; u++) {
            const int64_t i = b + u * ngrp;
            slot[u] = i < n ? (uint32_t)slots[i * slot_stride] : 0xffffffffu;
        }
#pragma unroll
        for (int u = 0; u < AK_IDX_U; u++) {
            for (int k = 0; k < 16; k++) raw[u][k] = 0;
            sc[u] = 0;
            if (slot[u] >= g.cap) continue;
            const uint8_t *pg = g.data + (int64_t)(slot[u] / 64u) * g.stride;
            const uint32_t t = slot[u] % 64u;
            if (!g.fp4) {
                ak_ld16(raw[u], pg + t * 128 + sub * 16, g.vec);
                sc[u] = ak_f32_bits(((const float *)(pg + 8192))[t]);
            } else {
                const uint8_t *kp = pg + t * 64 + sub * 8;
                if (g.vec) {
                    uint2 w = *(const uint2 *)kp;
                    memcpy(raw[u], &w, 8);
                } else {
                    for (int k = 0; k < 8; k++) raw[u][k] = kp[k];
                }
                sc[u] = pg[4096 + t * 4 + (sub >> 1)];
            }
        }
#pragma unroll
        for (int u = 0; u < AK_IDX_U; u++) {
            const int64_t i = b + u * ngrp;
            if (i >= n) continue;
            const bool ok = slot[u] < g.cap;
            float v[16];
            if (!g.fp4) {
                const float s = ak_f32_from_bits(sc[u]);
                if (out.dtype == AK_DTYPE_E4M3) {
                    ak_st16((uint8_t *)out.data + i * out.rs + sub * 16, raw[u], out.vec);
                    if (out_scale != NULL && sub == 0) out_scale[i * scale_stride] = s;
                    continue;
                }
                for (int k = 0; k < 16; k++) v[k] = ok ? ak_e4m3_to_f32(raw[u][k]) * s : 0.0f;
            } else {
                const float gs = ak_ue8m0_to_f32((uint8_t)sc[u]);
                for (int k = 0; k < 8; k++) {
                    v[2 * k] = ok ? ak_e2m1_to_f32(raw[u][k] & 0xfu) * gs : 0.0f;
                    v[2 * k + 1] = ok ? ak_e2m1_to_f32(raw[u][k] >> 4) * gs : 0.0f;
                }
            }
            ak_store_vals(out.data, i * out.rs + sub * 16, v, 16, out.dtype, out.vec);
        }
    }
}

/* ---- MHA: one thread per 8 elements of a (token, head) row ------------------------------------ */

struct ak_mha_pool {
    ak_cache c;
    uint8_t *data;
    int64_t stride; /* page stride, bytes */
    int32_t dim;
    int32_t is_v;
    uint32_t cap;
    bool vec;
};

static ak_mha_pool ak_mha_pool_of(const ak_cache *c, int is_v) {
    ak_mha_pool p;
    p.c = *c;
    p.is_v = is_v;
    p.data = (uint8_t *)(is_v ? c->v_data : c->data);
    p.stride = is_v ? ak_cache_v_stride(c) : ak_cache_stride(c);
    p.dim = is_v ? c->head_dim_v : c->head_dim;
    p.cap = (uint32_t)ak_cache_capacity(c);
    p.vec = ak_vec_ok(p.data, p.stride) && p.dim % 16 == 0;
    return p;
}

__device__ __forceinline__ float ak_mha_scale(const ak_mha_pool &p) {
    return p.is_v ? ak_kv_v_scale(&p.c) : ak_kv_k_scale(&p.c);
}

/* Loads the bytes of w (8, or 1 for odd dims) elements at element offset off of a pool. */
__device__ __forceinline__ void ak_mha_load_raw(const ak_mha_pool &p, int64_t off, int w,
                                                uint8_t raw[16]) {
    if (p.c.elem_dtype == AK_DTYPE_E4M3) {
        const uint8_t *q = p.data + off;
        if (w == 8 && p.vec) {
            uint2 u = *(const uint2 *)q;
            memcpy(raw, &u, 8);
        } else {
            for (int k = 0; k < w; k++) raw[k] = q[k];
        }
    } else {
        const uint16_t *h = (const uint16_t *)p.data + off;
        if (w == 8 && p.vec) {
            uint4 u = *(const uint4 *)h;
            memcpy(raw, &u, 16);
        } else {
            for (int k = 0; k < w; k++) {
                raw[2 * k] = (uint8_t)(h[k] & 0xffu);
                raw[2 * k + 1] = (uint8_t)(h[k] >> 8);
            }
        }
    }
}

/* The w values of loaded bytes as fp32 (e4m3 times the pool scale). */
__device__ __forceinline__ void ak_mha_decode(const ak_mha_pool &p, const uint8_t raw[16], int w,
                                              float *v, float scale) {
    const int dt = p.c.elem_dtype;
    for (int k = 0; k < w; k++) {
        if (dt == AK_DTYPE_E4M3) {
            v[k] = ak_e4m3_to_f32(raw[k]) * scale;
        } else {
            const uint16_t x = (uint16_t)(raw[2 * k] | (raw[2 * k + 1] << 8));
            v[k] = dt == AK_DTYPE_BF16 ? ak_bf16_to_f32(x) : ak_f16_to_f32(x);
        }
    }
}

/* Loads w elements at element offset off of a pool: bytes and fp32 values. */
__device__ __forceinline__ void ak_mha_load(const ak_mha_pool &p, int64_t off, int w, float *v,
                                            uint8_t *raw, float scale) {
    ak_mha_load_raw(p, off, w, raw);
    ak_mha_decode(p, raw, w, v, scale);
}

/* Stores w elements; use_raw: raw holds bytes of the same dtype, copied unchanged. */
__device__ __forceinline__ void ak_mha_store(const ak_mha_pool &p, int64_t off, int w,
                                             const float *v, const uint8_t *raw, bool use_raw,
                                             float scale) {
    const int dt = p.c.elem_dtype;
    if (dt == AK_DTYPE_E4M3) {
        uint8_t q[8];
        const ak_divisor dv = ak_divisor_of(scale);
        for (int k = 0; k < w; k++) q[k] = use_raw ? raw[k] : ak_dev_e4m3(ak_div(dv, v[k]));
        uint8_t *d = p.data + off;
        if (w == 8 && p.vec) {
            uint2 u;
            memcpy(&u, q, 8);
            *(uint2 *)d = u;
        } else {
            for (int k = 0; k < w; k++) d[k] = q[k];
        }
    } else {
        uint16_t x[8];
        for (int k = 0; k < w; k++)
            x[k] = use_raw ? (uint16_t)(raw[2 * k] | (raw[2 * k + 1] << 8))
                   : dt == AK_DTYPE_BF16 ? ak_f32_to_bf16(v[k]) : ak_f32_to_f16(v[k]);
        uint16_t *d = (uint16_t *)p.data + off;
        if (w == 8 && p.vec) {
            uint4 u;
            memcpy(&u, x, 16);
            *(uint4 *)d = u;
        } else {
            for (int k = 0; k < w; k++) d[k] = x[k];
        }
    }
}

/* A [n, h, d] tensor view. */
struct ak_nhd {
    void *data;
    int64_t s0, s1;
    int32_t dtype;
    bool vec;
};

static ak_nhd ak_nhd_of(const ak_tensor *t) {
    ak_nhd v;
    v.data = t->data;
    v.s0 = t->strides[0];
    v.s1 = t->strides[1];
    v.dtype = t->dtype;
    int64_t es = ak_dtype_size(t->dtype);
    v.vec = ((uintptr_t)t->data % 16 == 0) && (v.s0 * es) % 16 == 0 && (v.s1 * es) % 16 == 0;
    return v;
}

/* Work of one token is R = h_kv * chunks items. A block covers T = blockDim / R tokens per step
   (one token in several rounds when R > blockDim), so the slot, page and in-page offset are
   computed once per token and only 32-bit divisions remain per item. */
struct ak_tok_map {
    int32_t T, off, r0, rstep;
};
__device__ __forceinline__ ak_tok_map ak_tok_map_of(int32_t R) {
    ak_tok_map m;
    if (R >= (int32_t)blockDim.x) {
        m.T = 1;
        m.off = 0;
        m.r0 = threadIdx.x;
        m.rstep = blockDim.x;
    } else {
        m.T = blockDim.x / R;
        m.off = threadIdx.x / R;
        m.r0 = threadIdx.x - m.off * R;
        m.rstep = R;
    }
    return m;
}
static int ak_tok_per_block(int32_t R) { return R >= 256 ? 1 : 256 / R; }

/* Element offset of (token at in-page offset t of the page starting at element `base`, head):
   ak_kv_mha_offset with the page split hoisted out of the per-item loop. */
__device__ __forceinline__ int64_t ak_mha_base(const ak_mha_pool &p, uint32_t slot, uint32_t *t) {
    const uint32_t page = slot / (uint32_t)p.c.page_size;
    *t = slot - page * (uint32_t)p.c.page_size;
    const int64_t esz = p.c.elem_dtype == AK_DTYPE_E4M3 ? 1 : 2;
    return (int64_t)page * (p.stride / esz);
}
__device__ __forceinline__ int64_t ak_mha_off(const ak_mha_pool &p, int64_t base, uint32_t t,
                                              int32_t head) {
    if (p.c.layout == AK_LAYOUT_MHA_NHD) return base + ((int64_t)t * p.c.h_kv + head) * p.dim;
    return base + ((int64_t)head * p.c.page_size + t) * p.dim;
}

template <int w>
__global__ void ak_mha_write_kernel(ak_mha_pool p, ak_nhd in, const int32_t *slots,
                                    int64_t slot_stride, int64_t n) {
    const int32_t cpr = (p.dim + w - 1) / w; /* chunks per row */
    const ak_tok_map m = ak_tok_map_of(p.c.h_kv * cpr);
    if (m.off >= m.T) return;
    const float scale = p.c.elem_dtype == AK_DTYPE_E4M3 ? ak_mha_scale(p) : 1.0f;
    for (int64_t i = (int64_t)blockIdx.x * m.T + m.off; i < n; i += (int64_t)gridDim.x * m.T) {
        const uint32_t slot = (uint32_t)slots[i * slot_stride];
        if (slot >= p.cap) continue;
        uint32_t t;
        const int64_t base = ak_mha_base(p, slot, &t);
        for (int32_t r = m.r0; r < p.c.h_kv * cpr; r += m.rstep) {
            const int32_t head = r / cpr, d0 = (r - head * cpr) * w;
            float v[8];
            const int64_t ioff = i * in.s0 + head * in.s1 + d0;
            if (w == 8) ak_load_vals(v, 8, in.data, ioff, in.dtype, in.vec);
            else ak_load_vals(v, 1, in.data, ioff, in.dtype, false);
            ak_mha_store(p, ak_mha_off(p, base, t, head) + d0, w, v, NULL, false, scale);
        }
    }
}

template <int w>
__global__ void ak_mha_gather_kernel(ak_mha_pool p, const int32_t *slots, int64_t slot_stride,
                                     int64_t n, ak_nhd out) {
    const int32_t cpr = (p.dim + w - 1) / w;
    const ak_tok_map m = ak_tok_map_of(p.c.h_kv * cpr);
    if (m.off >= m.T) return;
    const float scale = p.c.elem_dtype == AK_DTYPE_E4M3 ? ak_mha_scale(p) : 1.0f;
    for (int64_t i = (int64_t)blockIdx.x * m.T + m.off; i < n; i += (int64_t)gridDim.x * m.T) {
        const uint32_t slot = (uint32_t)slots[i * slot_stride];
        const bool ok = slot < p.cap;
        uint32_t t = 0;
        const int64_t base = ok ? ak_mha_base(p, slot, &t) : 0;
        for (int32_t r = m.r0; r < p.c.h_kv * cpr; r += m.rstep) {
            const int32_t head = r / cpr, d0 = (r - head * cpr) * w;
            float v[8];
            uint8_t raw[16];
            if (ok) ak_mha_load(p, ak_mha_off(p, base, t, head) + d0, w, v, raw, scale);
            else
                for (int k = 0; k < 8; k++) v[k] = 0.0f;
            const int64_t ooff = i * out.s0 + head * out.s1 + d0;
            if (w == 8) ak_store_vals(out.data, ooff, v, 8, out.dtype, out.vec);
            else ak_store_vals(out.data, ooff, v, 1, out.dtype, false);
        }
    }
}

/* MHA convert: every (source slot, head, chunk); same element type copies the bytes. A thread
   loads the items of AK_MHA_U tokens (grid-strided) before storing any, so AK_MHA_U loads are in
   flight per thread. */
#define AK_MHA_U 4
template <int w>
__global__ void __launch_bounds__(256, 4)
    ak_mha_convert_kernel(ak_mha_pool s, ak_mha_pool d, const int32_t *pages, int64_t pstride,
                          int64_t nslots) {
    const int32_t cpr = (s.dim + w - 1) / w;
    const ak_tok_map m = ak_tok_map_of(s.c.h_kv * cpr);
    if (m.off >= m.T) return;
    const float ss = s.c.elem_dtype == AK_DTYPE_E4M3 ? ak_mha_scale(s) : 1.0f;
    const float ds = d.c.elem_dtype == AK_DTYPE_E4M3 ? ak_mha_scale(d) : 1.0f;
    const bool same = s.c.elem_dtype == d.c.elem_dtype;
    const int64_t stride = (int64_t)gridDim.x * m.T;
    for (int64_t i0 = (int64_t)blockIdx.x * m.T + m.off; i0 < nslots; i0 += stride * AK_MHA_U) {
        for (int32_t r = m.r0; r < s.c.h_kv * cpr; r += m.rstep) {
            const int32_t head = r / cpr, d0 = (r - head * cpr) * w;
            uint8_t raw[AK_MHA_U][16];
            int64_t doff[AK_MHA_U];
#pragma unroll
            for (int u = 0; u < AK_MHA_U; u++) {
                const int64_t i = i0 + u * stride;
                uint32_t slot;
                doff[u] = -1;
                if (i >= nslots ||
                    !ak_convert_slot(pages, pstride, s.c.page_size, (uint32_t)s.c.num_pages, i,
                                     &slot) ||
                    slot >= d.cap)
                    continue;
                uint32_t st, dt;
                const int64_t sb = ak_mha_base(s, slot, &st), db = ak_mha_base(d, slot, &dt);
                ak_mha_load_raw(s, ak_mha_off(s, sb, st, head) + d0, w, raw[u]);
                doff[u] = ak_mha_off(d, db, dt, head) + d0;
            }
#pragma unroll
            for (int u = 0; u < AK_MHA_U; u++) {
                if (doff[u] < 0) continue;
                float v[8];
                if (!same) ak_mha_decode(s, raw[u], w, v, ss);
                ak_mha_store(d, doff[u], w, v, raw[u], same, ds);
            }
        }
    }
}

/* MHA converts between pools of the same page size and head geometry (C11 NHD <-> HND, C12 bf16
   <-> e4m3, or both): a listed page holds the same page_size * h_kv * dim elements in both pools,
   in (token, head) or (head, token) row order, so a piece of a row moves as a whole and only its
   row is remapped (t h <-> h t). Per element the same functions as ak_mha_decode / ak_mha_store:
   the same bytes; the same element type copies the bytes. The generic kernel above re-derives
   head, slot and page per 8 elements with runtime element types. */
struct ak_mha_remap {
    int32_t rp, P, H;    /* pieces per row, page size, heads */
    int lrp, lh, lp;     /* their log2 when powers of two (the common shapes), else -1 */
    bool on, src_nhd, dst_nhd;
};
static ak_mha_remap ak_mha_remap_of(const ak_cache *sc, const ak_cache *dc, int32_t dim, int32_t e) {
    ak_mha_remap m;
    m.rp = dim / e;
    m.P = sc->page_size;
    m.H = sc->h_kv;
    m.lrp = (m.rp & (m.rp - 1)) == 0 ? __builtin_ctz(m.rp) : -1;
    m.lh = (m.H & (m.H - 1)) == 0 ? __builtin_ctz(m.H) : -1;
    m.lp = (m.P & (m.P - 1)) == 0 ? __builtin_ctz(m.P) : -1;
    m.on = sc->layout != dc->layout;
    m.src_nhd = sc->layout == AK_LAYOUT_MHA_NHD;
    m.dst_nhd = dc->layout == AK_LAYOUT_MHA_NHD;
    return m;
}
/* Destination piece of source piece c within a page. */
__device__ __forceinline__ int32_t ak_mha_remap_piece(const ak_mha_remap &m, int32_t c) {
    if (!m.on) return c;
    const int32_t row = m.lrp >= 0 ? c >> m.lrp : c / m.rp, x = c - row * m.rp;
    int32_t t, h;
    if (m.src_nhd) t = m.lh >= 0 ? row >> m.lh : row / m.H, h = row - t * m.H;
    else h = m.lp >= 0 ? row >> m.lp : row / m.P, t = row - h * m.P;
    return (m.dst_nhd ? t * m.H + h : h * m.P + t) * m.rp + x;
}

#define AK_MHA_PU 4

/* Same element type (C11): the listed pages' 16-byte pieces form one flat sequence that the grid
   streams like a memcpy (ak_flat_pos); lane l of a warp step takes pieces c0 + 32 u + l, u <
   AK_MHA_PU, all loads before any store. Run s48: 75 -> 84-91%
   of the copy bandwidth against a block per page with 32-byte runs per thread. */
__global__ void __launch_bounds__(256) ak_mha_page_copy_kernel(ak_mha_pool s, ak_mha_pool d, ak_mha_remap m,
                                                              const int32_t *pages, int64_t pstride,
                                                              int64_t npages, int32_t ppp) {
    const int lane = threadIdx.x & 31;
    for (ak_flat_pos f = ak_flat_begin(npages * ppp, ppp, AK_MHA_PU); f.c0 < f.total; ak_flat_next(f)) {
        const int64_t k0 = f.u;
        const int32_t cs = f.e;
        const int32_t pg0 = pages != NULL ? pages[k0 * pstride] : (int32_t)k0;
        const int32_t left = f.total - f.c0 < 32 * AK_MHA_PU ? (int32_t)(f.total - f.c0) : 32 * AK_MHA_PU;
        uint4 in[AK_MHA_PU];
        uint4 *o[AK_MHA_PU];
#pragma unroll
        for (int u = 0; u < AK_MHA_PU; u++) {
            o[u] = NULL;
            if (u * 32 + lane >= left) continue;
            uint32_t c = (uint32_t)cs + u * 32 + lane;
            uint32_t pg = (uint32_t)pg0;
            if (c >= (uint32_t)ppp) { /* the step crosses into later pages */
                const uint32_t q = c / (uint32_t)ppp;
                c -= q * (uint32_t)ppp;
                pg = (uint32_t)(pages != NULL ? pages[(k0 + q) * pstride] : k0 + q);
            }
            if (pg >= (uint32_t)s.c.num_pages || pg >= (uint32_t)d.c.num_pages) continue; /* rule I1 */
            in[u] = ((const uint4 *)(s.data + (int64_t)pg * s.stride))[c];
            o[u] = (uint4 *)(d.data + (int64_t)pg * d.stride) + ak_mha_remap_piece(m, (int32_t)c);
        }
#pragma unroll
        for (int u = 0; u < AK_MHA_PU; u++)
            if (o[u] != NULL) *o[u] = in[u];
    }
}

/* A piece of a type change: E elements, 8 from an e4m3 source (its 16-bit output is one 16-byte
   store, so each store instruction writes 512 contiguous bytes; 16 elements wrote two 16-byte
   halves per lane, run s50), else 16. */
template <int SD, int DD> struct ak_mha_cast {
    enum {
        E = SD == AK_DTYPE_E4M3 ? 8 : 16,
        SB = E * (SD == AK_DTYPE_E4M3 ? 1 : 2), DB = E * (DD == AK_DTYPE_E4M3 ? 1 : 2) /* bytes */
    };
};
/* 8 or 16 bytes as words; 32 as two 16-byte loads. */
template <int B> __device__ __forceinline__ void ak_ld_words(const uint8_t *p, uint32_t *w) {
    if (B == 8) {
        const uint2 v = *(const uint2 *)p;
        w[0] = v.x, w[1] = v.y;
    } else {
#pragma unroll
        for (int h = 0; h < B / 16; h++) {
            const uint4 v = *(const uint4 *)(p + 16 * h);
            w[4 * h] = v.x, w[4 * h + 1] = v.y, w[4 * h + 2] = v.z, w[4 * h + 3] = v.w;
        }
    }
}
template <int B> __device__ __forceinline__ void ak_st_words(uint8_t *p, const uint32_t *w) {
    if (B == 8) {
        *(uint2 *)p = make_uint2(w[0], w[1]);
    } else {
#pragma unroll
        for (int h = 0; h < B / 16; h++) *(uint4 *)(p + 16 * h) = make_uint4(w[4 * h], w[4 * h + 1], w[4 * h + 2], w[4 * h + 3]);
    }
}

/* One piece of a type change, as ak_mha_decode / ak_mha_store do it: wd holds its source bytes,
   o receives the destination bytes. Values as words and scalars only: byte arrays would live in
   local memory (and a memcpy into the output compiles to byte stores). */
template <int SD, int DD>
__device__ __forceinline__ void ak_mha_piece_convert(const uint32_t *wd, uint8_t *o, float ss, const ak_divisor &dv) {
    enum { E = ak_mha_cast<SD, DD>::E };
    float v[E];
    if (SD == AK_DTYPE_E4M3) {
        uint32_t nan = 0; /* a byte whose low 7 bits are 0x7f is a NaN */
#pragma unroll
        for (int k = 0; k < E / 4; k++) nan |= ((wd[k] & 0x7f7f7f7fu) + 0x01010101u) & 0x80808080u;
#pragma unroll
        for (int e = 0; e < E; e += 2) {
            const uint16_t pair = (uint16_t)(wd[e >> 2] >> (8 * (e & 3)));
            if (nan) { /* the integer path keeps NaN payloads as the CPU backend does */
                v[e] = ak_e4m3_to_f32((uint8_t)pair);
                v[e + 1] = ak_e4m3_to_f32((uint8_t)(pair >> 8));
            } else { /* exact: every e4m3 value is an f16 value */
                uint32_t h2;
                asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h2) : "h"(pair));
                asm("cvt.f32.f16 %0, %1;" : "=f"(v[e]) : "h"((uint16_t)(h2 & 0xffffu)));
                asm("cvt.f32.f16 %0, %1;" : "=f"(v[e + 1]) : "h"((uint16_t)(h2 >> 16)));
            }
            v[e] *= ss;
            v[e + 1] *= ss;
        }
    } else {
#pragma unroll
        for (int e = 0; e < E; e++) {
            const uint16_t x = (uint16_t)(wd[e >> 1] >> (16 * (e & 1)));
            v[e] = SD == AK_DTYPE_BF16 ? ak_bf16_to_f32(x) : ak_f16_to_f32(x);
        }
    }
    uint32_t x[E / 2];
    if (DD == AK_DTYPE_E4M3) {
        ak_div_n<E>(dv, v);
#pragma unroll
        for (int w = 0; w < E / 4; w++)
            x[w] = (uint32_t)ak_dev_e4m3(v[4 * w]) | (uint32_t)ak_dev_e4m3(v[4 * w + 1]) << 8 |
                   (uint32_t)ak_dev_e4m3(v[4 * w + 2]) << 16 | (uint32_t)ak_dev_e4m3(v[4 * w + 3]) << 24;
    } else {
#pragma unroll
        for (int w = 0; w < E / 2; w++) {
            const float lo = v[2 * w], hi = v[2 * w + 1];
            if (DD == AK_DTYPE_BF16 && !ak_isnan_f32(lo) && !ak_isnan_f32(hi)) {
                asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(x[w]) : "f"(hi), "f"(lo));
            } else {
                const uint32_t a = DD == AK_DTYPE_BF16 ? ak_f32_to_bf16(lo) : ak_f32_to_f16(lo);
                const uint32_t b = DD == AK_DTYPE_BF16 ? ak_f32_to_bf16(hi) : ak_f32_to_f16(hi);
                x[w] = a | b << 16;
            }
        }
    }
    ak_st_words<ak_mha_cast<SD, DD>::DB>(o, x);
}

/* Element type change (C12): a block per listed page, each thread converting AK_MHA_PU pieces 256
   pieces apart, all loads before any conversion. The flat form of the copy kernel measured 20
   (bf16 -> e4m3) and 8 (e4m3 -> bf16) points slower here (run s49, not understood). */
template <int SD, int DD>
__global__ void __launch_bounds__(256) ak_mha_page_cast_kernel(ak_mha_pool s, ak_mha_pool d, ak_mha_remap m,
                                                              const int32_t *pages, int64_t pstride,
                                                              int64_t npages, int32_t ppp) {
    typedef ak_mha_cast<SD, DD> C;
    const float ss = SD == AK_DTYPE_E4M3 ? ak_mha_scale(s) : 1.0f;
    const ak_divisor dv = ak_divisor_of(DD == AK_DTYPE_E4M3 ? ak_mha_scale(d) : 1.0f);
    for (int64_t k = blockIdx.x; k < npages; k += gridDim.x) {
        const uint32_t pg = pages != NULL ? (uint32_t)pages[k * pstride] : (uint32_t)k;
        if (pg >= (uint32_t)s.c.num_pages || pg >= (uint32_t)d.c.num_pages) continue; /* rule I1 */
        const uint8_t *src = s.data + (int64_t)pg * s.stride;
        uint8_t *dst = d.data + (int64_t)pg * d.stride;
        for (int32_t c0 = threadIdx.x; c0 < ppp; c0 += 256 * AK_MHA_PU) {
            uint32_t in[AK_MHA_PU][C::SB / 4];
#pragma unroll
            for (int u = 0; u < AK_MHA_PU; u++)
                if (c0 + u * 256 < ppp) ak_ld_words<C::SB>(src + (int64_t)(c0 + u * 256) * C::SB, in[u]);
#pragma unroll
            for (int u = 0; u < AK_MHA_PU; u++)
                if (c0 + u * 256 < ppp)
                    ak_mha_piece_convert<SD, DD>(in[u], dst + (int64_t)ak_mha_remap_piece(m, c0 + u * 256) * C::DB,
                                                 ss, dv);
        }
    }
}

/* The page kernels' element types (runtime -> template), or -1 when they do not apply: both
   pools the same page size, heads and dims (a multiple of 16), 16-byte aligned pages. */
static int ak_mha_page_convert_kind(const ak_cache *sc, const ak_cache *dc, const ak_mha_pool &s,
                                    const ak_mha_pool &d) {
    if (sc->page_size != dc->page_size || sc->h_kv != dc->h_kv || s.dim != d.dim || s.dim % 16 != 0)
        return -1;
    if (sc->layout == dc->layout && sc->elem_dtype == dc->elem_dtype) return -1; /* not a convert */
    const int64_t elems = (int64_t)sc->page_size * sc->h_kv * s.dim;
    if (elems / 8 > INT32_MAX || !s.vec || !d.vec) return -1; /* pieces of 8 or 16 elements */
    return sc->elem_dtype * 4 + dc->elem_dtype;
}

typedef void (*ak_mha_page_cast_fn)(ak_mha_pool, ak_mha_pool, ak_mha_remap, const int32_t *, int64_t,
                                    int64_t, int32_t);

/* The cast instance for kind = source dtype * 4 + destination dtype (the 16-bit pair F16 <-> BF16
   included). */
static ak_mha_page_cast_fn ak_mha_page_cast_of(int kind) {
    switch (kind) {
    case AK_DTYPE_BF16 * 4 + AK_DTYPE_E4M3: return ak_mha_page_cast_kernel<AK_DTYPE_BF16, AK_DTYPE_E4M3>;
    case AK_DTYPE_F16 * 4 + AK_DTYPE_E4M3: return ak_mha_page_cast_kernel<AK_DTYPE_F16, AK_DTYPE_E4M3>;
    case AK_DTYPE_E4M3 * 4 + AK_DTYPE_BF16: return ak_mha_page_cast_kernel<AK_DTYPE_E4M3, AK_DTYPE_BF16>;
    case AK_DTYPE_E4M3 * 4 + AK_DTYPE_F16: return ak_mha_page_cast_kernel<AK_DTYPE_E4M3, AK_DTYPE_F16>;
    case AK_DTYPE_BF16 * 4 + AK_DTYPE_F16: return ak_mha_page_cast_kernel<AK_DTYPE_BF16, AK_DTYPE_F16>;
    default: return ak_mha_page_cast_kernel<AK_DTYPE_F16, AK_DTYPE_BF16>;
    }
}

/* Runs one pool (K or V) of a page-kernel convert. */
static ak_status ak_mha_page_convert(ak_context *ctx, const ak_cache *src, const ak_cache *dst, int kind,
                                     const ak_mha_pool &s, const ak_mha_pool &d, const int32_t *pg,
                                     int64_t pstride, int64_t npages) {
    const int sd = kind / 4, dd = kind % 4;
    /* elements per piece: 16 bytes of a copy; ak_mha_cast's E for a type change */
    const int32_t e = sd == dd ? 16 / ak_dtype_size((ak_dtype)sd) : sd == AK_DTYPE_E4M3 ? 8 : 16;
    const int32_t ppp = (int32_t)((int64_t)src->page_size * src->h_kv * s.dim / e);
    const ak_mha_remap m = ak_mha_remap_of(src, dst, s.dim, e);
    cudaStream_t st = ak_stream(ctx);
    if (sd == dd) {
        const int grid = ak_grid_for(ctx, (npages * ppp + AK_MHA_PU - 1) / AK_MHA_PU, 256);
        ak_mha_page_copy_kernel<<<grid, 256, 0, st>>>(s, d, m, pg, pstride, npages, ppp);
        AK_CUDA_CHECK_LAUNCH("ak_mha_page_copy_kernel");
        return AK_OK;
    }
    /* a block per page: e4m3 sources (their output is twice their input) run best with all pages
       in flight (256 per SM: C12 e4m3 -> bf16 89.5 -> 93.2% of copy), 16-bit sources with about
       four pages per block (32 per SM; at 128, bf16 -> e4m3 lost 7 points; run s72) */
    const int cap = sd == AK_DTYPE_E4M3 ? 256 : 32;
    ak_mha_page_cast_of(kind)<<<ak_grid_cap(ctx, npages * 256, 256, cap), 256, 0, st>>>(s, d, m, pg, pstride, npages, ppp);
    AK_CUDA_CHECK_LAUNCH("ak_mha_page_cast_kernel");
    return AK_OK;
}

/* ---- same-layout byte copies for the indexer layouts ----------------------------------------- */

/* Per token: key bytes (kb) at page + t * kb, scale bytes (sb) at page + 64 * kb + t * sb. */
__global__ void ak_idx_copy_kernel(ak_idx_geo s, ak_idx_geo d, const int32_t *pages,
                                   int64_t pstride, int64_t nslots, uint32_t src_pages) {
    const int kb = s.fp4 ? 64 : 128, sb = 4;
    const int pieces = kb / 16 + 1;
    const int64_t total = nslots * pieces;
    for (int64_t it = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; it < total;
         it += (int64_t)gridDim.x * blockDim.x) {
        int64_t i = it / pieces;
        int pc = (int)(it - i * pieces);
        uint32_t slot;
        if (!ak_convert_slot(pages, pstride, 64, src_pages, i, &slot)) continue;
        if (slot >= d.cap) continue;
        const uint8_t *sp = s.data + (int64_t)(slot / 64u) * s.stride;
        uint8_t *dp = d.data + (int64_t)(slot / 64u) * d.stride;
        const uint32_t t = slot % 64u;
        if (pc < kb / 16) {
            uint8_t b[16];
            ak_ld16(b, sp + t * kb + pc * 16, s.vec);
            ak_st16(dp + t * kb + pc * 16, b, d.vec);
        } else {
            for (int k = 0; k < sb; k++) dp[64 * kb + t * sb + k] = sp[64 * kb + t * sb + k];
        }
    }
}

/* Destination page padding (bytes past the token payload up to the page stride, K and V pools)
   is zeroed for every destination page whose first slot lies in a converted source page: one
   owner per destination page, as in the CPU backend. */
struct ak_pad_geo {
    uint8_t *k, *v;       /* pools (v NULL unless MHA) */
    int64_t kstride, vstride;
    int64_t kpay, vpay;   /* payload bytes per page */
    int32_t dps, dpages;  /* destination page size and count */
};

__global__ void ak_pad_kernel(ak_pad_geo g, const int32_t *pages, int64_t pstride, int64_t items,
                              int32_t sps, uint32_t src_pages, int64_t span, int64_t maxpad) {
    /* a warp per (item, destination page of its span): the divisions once per warp, the lanes
       over the padding bytes */
    const int lane = threadIdx.x & 31;
    const int64_t nw = ((int64_t)gridDim.x * blockDim.x) >> 5;
    for (int64_t w = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5; w < items * span; w += nw) {
        const int64_t item = w / span, j = w - item * span;
        const int32_t p = pages ? pages[item * pstride] : (int32_t)item;
        if ((uint32_t)p >= src_pages) continue;
        const int64_t s0 = (int64_t)p * sps, s1 = s0 + sps;
        const int64_t q = (s0 + g.dps - 1) / g.dps + j;
        if (q * g.dps >= s1 || q >= g.dpages) continue;
        for (int64_t b = lane; b < maxpad; b += 32) {
            if (g.kpay + b < g.kstride) g.k[q * g.kstride + g.kpay + b] = 0;
            if (g.v != NULL && g.vpay + b < g.vstride) g.v[q * g.vstride + g.vpay + b] = 0;
        }
    }
}

static int64_t ak_payload_bytes(const ak_cache *c, int is_v) {
    switch (c->layout) {
    case AK_LAYOUT_MLA_BF16: return (int64_t)c->page_size * 1152;
    case AK_LAYOUT_MLA_FP8_PERTENSOR: return (int64_t)c->page_size * 576;
    case AK_LAYOUT_DSA_FP8_BLOCKSCALE: return (int64_t)c->page_size * 656;
    case AK_LAYOUT_DSV4_FP8_UE8M0: return (int64_t)c->page_size * 584;
    case AK_LAYOUT_INDEXER_FP8: return 8448;
    case AK_LAYOUT_INDEXER_FP4: return 4352;
    default:
        return (int64_t)c->page_size * c->h_kv * (is_v ? c->head_dim_v : c->head_dim) *
               ak_dtype_size(c->elem_dtype);
    }
}

static ak_status ak_zero_padding(ak_context *ctx, const ak_cache *src, const ak_cache *dst,
                                 const int32_t *pg, int64_t pstride, int64_t items) {
    ak_pad_geo g;
    const bool mha = dst->layout == AK_LAYOUT_MHA_NHD || dst->layout == AK_LAYOUT_MHA_HND;
    g.k = (uint8_t *)dst->data;
    g.v = mha ? (uint8_t *)dst->v_data : NULL;
    g.kstride = ak_cache_stride(dst);
    g.vstride = mha ? ak_cache_v_stride(dst) : 0;
    g.kpay = ak_payload_bytes(dst, 0);
    g.vpay = mha ? ak_payload_bytes(dst, 1) : 0;
    g.dps = dst->page_size;
    g.dpages = dst->num_pages;
    int64_t maxpad = g.kstride - g.kpay;
    if (mha && g.vstride - g.vpay > maxpad) maxpad = g.vstride - g.vpay;
    if (maxpad <= 0 || items == 0) return AK_OK;
    const int64_t span = src->page_size / dst->page_size + 2;
    ak_pad_kernel<<<ak_grid_for(ctx, items * span * 32, 256), 256, 0, ak_stream(ctx)>>>(
        g, pg, pstride, items, src->page_size, (uint32_t)src->num_pages, span, maxpad);
    AK_CUDA_CHECK_LAUNCH("ak_pad_kernel");
    return AK_OK;
}

/* ---- entry points ------------------------------------------------------------------------------ */

static bool ak_is_indexer(ak_layout l) {
    return l == AK_LAYOUT_INDEXER_FP8 || l == AK_LAYOUT_INDEXER_FP4;
}
static bool ak_is_mha(ak_layout l) { return l == AK_LAYOUT_MHA_NHD || l == AK_LAYOUT_MHA_HND; }

extern "C" ak_status ak_cuda_cache_write(ak_context *ctx, const ak_cache *cache,
                                         const ak_tensor *nope, const ak_tensor *rope,
                                         const ak_tensor *slots, ak_quant_rule rule) {
    AK_CUDA_ENTER(ctx);
    const int64_t n = slots->shape[0];
    if (n == 0 || cache->num_pages == 0) return AK_OK;
    cudaStream_t st = ak_stream(ctx);
    if (ak_is_indexer(cache->layout)) {
        ak_idx_geo g = ak_idx_geo_of(cache);
        const ak_rows in = ak_rows_of(nope);
        int grid = ak_grid_for(ctx, (n + 4 * AK_IDX_WU - 1) / (4 * AK_IDX_WU) * 32, 256);
        if (!g.fp4 && in.dtype == AK_DTYPE_BF16 && in.vec) {
            const int resident = (ctx->info.sm_count > 0 ? ctx->info.sm_count : 132) * 3; /* 3 blocks per SM */
            ak_idx_write_bf16_kernel<<<grid < resident ? grid : resident, 256, 0, st>>>(
                g, in, (const int32_t *)slots->data, slots->strides[0], n, (int)rule);
            AK_CUDA_CHECK_LAUNCH("ak_idx_write_bf16_kernel");
            return AK_OK;
        }
        ak_idx_write_kernel<<<grid, 256, 0, st>>>(g, in, (const int32_t *)slots->data, slots->strides[0], n,
                                                  (int)rule);
        AK_CUDA_CHECK_LAUNCH("ak_idx_write_kernel");
        return AK_OK;
    }
    ak_mla_job j = {};
    j.mode = AK_MLA_WRITE;
    j.dst = ak_mla_geo_of(cache);
    j.nope = ak_rows_of(nope);
    j.rope = ak_rows_of(rope);
    j.nope_rsb = j.nope.rs * ak_dtype_size(nope->dtype);
    j.rope_rsb = j.rope.rs * ak_dtype_size(rope->dtype);
    j.nope_bytes = (int32_t)(nope->shape[1] * ak_dtype_size(nope->dtype));
    j.slots = (const int32_t *)slots->data;
    j.slot_stride = slots->strides[0];
    j.n = n;
    j.rule = (int32_t)rule;
    j.split = j.nope_bytes;
    j.tail16 = true;
    j.vec = j.nope.vec && j.rope.vec;
    return ak_mla_launch(ctx, &j,
                         j.nope_bytes + (int32_t)(rope->shape[1] * ak_dtype_size(rope->dtype)));
}

static int ak_mha_width(const ak_cache *c, int is_v) {
    int32_t d = is_v ? c->head_dim_v : c->head_dim;
    return d % 8 == 0 ? 8 : 1;
}

extern "C" ak_status ak_cuda_mha_cache_write(ak_context *ctx, const ak_cache *cache,
                                             const ak_tensor *k, const ak_tensor *v,
                                             const ak_tensor *slots) {
    AK_CUDA_ENTER(ctx);
    const int64_t n = slots->shape[0];
    if (n == 0 || cache->num_pages == 0) return AK_OK;
    cudaStream_t st = ak_stream(ctx);
    for (int is_v = 0; is_v < 2; is_v++) {
        const ak_tensor *t = is_v ? v : k;
        if (t == NULL) continue;
        ak_mha_pool p = ak_mha_pool_of(cache, is_v);
        int w = ak_mha_width(cache, is_v);
        int64_t items = n * 256 / ak_tok_per_block(cache->h_kv * ((p.dim + w - 1) / w));
        if (w == 8)
            ak_mha_write_kernel<8><<<ak_grid_for(ctx, items, 256), 256, 0, st>>>(
                p, ak_nhd_of(t), (const int32_t *)slots->data, slots->strides[0], n);
        else
            ak_mha_write_kernel<1><<<ak_grid_for(ctx, items, 256), 256, 0, st>>>(
                p, ak_nhd_of(t), (const int32_t *)slots->data, slots->strides[0], n);
        AK_CUDA_CHECK_LAUNCH("ak_mha_write_kernel");
    }
    return AK_OK;
}

static ak_status ak_mha_gather_pool(ak_context *ctx, const ak_cache *cache, int is_v,
                                    const ak_tensor *slots, ak_tensor *out) {
    const int64_t n = slots->shape[0];
    ak_mha_pool p = ak_mha_pool_of(cache, is_v);
    int w = ak_mha_width(cache, is_v);
    int64_t items = n * 256 / ak_tok_per_block(cache->h_kv * ((p.dim + w - 1) / w));
    if (w == 8)
        ak_mha_gather_kernel<8><<<ak_grid_for(ctx, items, 256), 256, 0, ak_stream(ctx)>>>(
            p, (const int32_t *)slots->data, slots->strides[0], n, ak_nhd_of(out));
    else
        ak_mha_gather_kernel<1><<<ak_grid_for(ctx, items, 256), 256, 0, ak_stream(ctx)>>>(
            p, (const int32_t *)slots->data, slots->strides[0], n, ak_nhd_of(out));
    AK_CUDA_CHECK_LAUNCH("ak_mha_gather_kernel");
    return AK_OK;
}

extern "C" ak_status ak_cuda_cache_gather(ak_context *ctx, const ak_cache *cache,
                                          const ak_tensor *slots, ak_tensor *out,
                                          ak_tensor *out_scale) {
    AK_CUDA_ENTER(ctx);
    const int64_t n = slots->shape[0];
    if (n == 0) return AK_OK;
    cudaStream_t st = ak_stream(ctx);
    if (ak_is_mha(cache->layout)) return ak_mha_gather_pool(ctx, cache, 0, slots, out);
    if (ak_is_indexer(cache->layout)) {
        ak_idx_geo g = ak_idx_geo_of(cache);
        const int grid = ak_grid_for(ctx, (n + AK_IDX_U - 1) / AK_IDX_U * 8, 256);
        ak_idx_gather_kernel<<<grid, 256, 0, st>>>(
            g, (const int32_t *)slots->data, slots->strides[0], n, ak_rows_out_of(out),
            out_scale ? (float *)out_scale->data : NULL, out_scale ? out_scale->strides[0] : 0);
        AK_CUDA_CHECK_LAUNCH("ak_idx_gather_kernel");
        return AK_OK;
    }
    ak_mla_job j = {};
    j.mode = AK_MLA_GATHER;
    j.src = ak_mla_geo_of(cache);
    j.out = ak_rows_out_of(out);
    j.slots = (const int32_t *)slots->data;
    j.slot_stride = slots->strides[0];
    j.n = n;
    j.split = j.src.rec_bytes;
    j.vec = j.src.vec;
    return ak_mla_launch(ctx, &j, ak_mla_staged_bytes(cache->layout));
}

extern "C" ak_status ak_cuda_mha_cache_gather(ak_context *ctx, const ak_cache *cache,
                                              const ak_tensor *slots, ak_tensor *k_out,
                                              ak_tensor *v_out) {
    AK_CUDA_ENTER(ctx);
    if (slots->shape[0] == 0) return AK_OK;
    if (k_out != NULL) AK_TRY(ak_mha_gather_pool(ctx, cache, 0, slots, k_out));
    if (v_out != NULL) AK_TRY(ak_mha_gather_pool(ctx, cache, 1, slots, v_out));
    return AK_OK;
}

extern "C" ak_status ak_cuda_cache_convert(ak_context *ctx, const ak_cache *src,
                                           const ak_cache *dst, const ak_tensor *pages,
                                           ak_quant_rule rule) {
    AK_CUDA_ENTER(ctx);
    cudaStream_t st = ak_stream(ctx);
    const int32_t *pg = pages ? (const int32_t *)pages->data : NULL;
    const int64_t pstride = pages ? pages->strides[0] : 0;
    const int64_t npages = pages ? pages->shape[0] : src->num_pages;
    const int64_t nslots = npages * src->page_size;
    if (nslots == 0 || dst->num_pages == 0) return AK_OK;
    if (ak_is_mha(src->layout)) {
        for (int is_v = 0; is_v < 2; is_v++) {
            ak_mha_pool s = ak_mha_pool_of(src, is_v), d = ak_mha_pool_of(dst, is_v);
            const int kind = ak_mha_page_convert_kind(src, dst, s, d);
            if (kind >= 0) {
                AK_TRY(ak_mha_page_convert(ctx, src, dst, kind, s, d, pg, pstride, npages));
                continue;
            }
            int w = ak_mha_width(src, is_v);
            int64_t items =
                nslots * 256 / ak_tok_per_block(src->h_kv * ((s.dim + w - 1) / w)) / AK_MHA_U;
            const int grid = ak_grid_for(ctx, items, 256);
            if (w == 8)
                ak_mha_convert_kernel<8><<<grid, 256, 0, st>>>(s, d, pg, pstride, nslots);
            else
                ak_mha_convert_kernel<1><<<grid, 256, 0, st>>>(s, d, pg, pstride, nslots);
            AK_CUDA_CHECK_LAUNCH("ak_mha_convert_kernel");
        }
        return ak_zero_padding(ctx, src, dst, pg, pstride, npages);
    }
    if (ak_is_indexer(src->layout)) {
        ak_idx_geo s = ak_idx_geo_of(src), d = ak_idx_geo_of(dst);
        int pieces = (s.fp4 ? 64 : 128) / 16 + 1;
        ak_idx_copy_kernel<<<ak_grid_for(ctx, nslots * pieces, 256), 256, 0, st>>>(
            s, d, pg, pstride, nslots, (uint32_t)src->num_pages);
        AK_CUDA_CHECK_LAUNCH("ak_idx_copy_kernel");
        return ak_zero_padding(ctx, src, dst, pg, pstride, npages);
    }
    ak_mla_job j = {};
    j.mode = AK_MLA_CONVERT;
    j.dst = ak_mla_geo_of(dst);
    j.src = ak_mla_geo_of(src);
    j.pages = pg;
    j.page_stride = pstride;
    j.n = nslots;
    j.rule = (int32_t)rule;
    j.split = j.src.rec_bytes;
    j.vec = j.src.vec;
    AK_TRY(ak_mla_launch(ctx, &j, ak_mla_staged_bytes(src->layout)));
    return ak_zero_padding(ctx, src, dst, pg, pstride, npages);
}
