/*
 * numeric.h -- bit-exact number-format conversions shared by the C host code and the CUDA kernels.
 *
 * Every conversion rounds to nearest-even and saturates to the largest finite value (rule F1), so
 * the CPU and GPU backends produce identical bytes. Integer arithmetic on the float bits keeps the
 * results independent of the FPU rounding mode and of fast-math flags.
 */
#ifndef AK_NUMERIC_H
#define AK_NUMERIC_H

#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define AK_HD __host__ __device__ __forceinline__
#else
#define AK_HD static inline
#endif

AK_HD uint32_t ak_f32_bits(float x) {
#ifdef __CUDA_ARCH__
    return __float_as_uint(x);
#else
    uint32_t u;
    memcpy(&u, &x, 4);
    return u;
#endif
}

AK_HD float ak_f32_from_bits(uint32_t u) {
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float x;
    memcpy(&x, &u, 4);
    return x;
#endif
}

AK_HD int ak_isfinite_f32(float x) { return (ak_f32_bits(x) & 0x7f800000u) != 0x7f800000u; }
AK_HD int ak_isnan_f32(float x) { return (ak_f32_bits(x) & 0x7fffffffu) > 0x7f800000u; }

/* ---- bf16 -------------------------------------------------------------------------------- */

AK_HD float ak_bf16_to_f32(uint16_t h) { return ak_f32_from_bits((uint32_t)h << 16); }

AK_HD uint16_t ak_f32_to_bf16(float x) {
    uint32_t u = ak_f32_bits(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* ak_bf16_to_f32(ak_f32_to_bf16(x)) without a branch (NaN stays a quiet NaN), so decode loops
   vectorize. */
AK_HD float ak_bf16_round_f32(float x) {
    uint32_t u = ak_f32_bits(x);
    uint32_t nan = (u & 0x7fffffffu) > 0x7f800000u;
    uint32_t r = nan ? (u | 0x00400000u) : u + 0x7fffu + ((u >> 16) & 1u);
    return ak_f32_from_bits(r & 0xffff0000u);
}

/* ---- f16 --------------------------------------------------------------------------------- */

AK_HD float ak_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    if (exp == 0x1fu) return ak_f32_from_bits(sign | 0x7f800000u | (man << 13));
    if (exp == 0) {
        if (man == 0) return ak_f32_from_bits(sign);
        /* subnormal: man * 2^-24, exact in fp32 */
        float v = (float)man * (1.0f / 16777216.0f);
        return sign ? -v : v;
    }
    return ak_f32_from_bits(sign | ((exp + 112u) << 23) | (man << 13));
}

AK_HD uint16_t ak_f32_to_f16(float x) {
    uint32_t u = ak_f32_bits(x);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds to >= 65520: inf (IEEE) */
    if (a < 0x38800000u) {                                  /* below 2^-14: subnormal or zero */
        if (a < 0x33000000u) return sign;                    /* below 2^-25: rounds to zero */
        uint32_t e = a >> 23;
        uint32_t m = (a & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126u - e; /* value = m * 2^(e-150); f16 step is 2^-24 */
        uint32_t q = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1u);
        uint32_t half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (q & 1u))) q++;
        return (uint16_t)(sign | q);
    }
    uint32_t r = a + 0xfffu + ((a >> 13) & 1u); /* RNE on the 13 dropped bits */
    return (uint16_t)(sign | ((r - 0x38000000u) >> 13));
}

/* ---- e4m3 (OCP float8_e4m3fn): bias 7, max 448, NaN 0x7f/0xff, no infinity -------------------- */

AK_HD float ak_e4m3_to_f32(uint8_t b) {
    uint32_t sign = (uint32_t)(b & 0x80u) << 24;
    uint32_t exp = (b >> 3) & 0xfu;
    uint32_t man = b & 0x7u;
    if (exp == 0xfu && man == 0x7u) return ak_f32_from_bits(sign | 0x7fc00000u);
    if (exp == 0) {
        float v = (float)man * (1.0f / 512.0f); /* man * 2^-9 */
        return sign ? -v : v;
    }
    return ak_f32_from_bits(sign | ((exp + 120u) << 23) | (man << 20));
}

/* Round to nearest-even, saturate to +-448; NaN in gives NaN (0x7f with the sign). */
AK_HD uint8_t ak_f32_to_e4m3(float x) {
    uint32_t u = ak_f32_bits(x);
    uint8_t sign = (uint8_t)((u >> 24) & 0x80u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint8_t)(sign | 0x7fu);
    if (a > 0x43e00000u) return (uint8_t)(sign | 0x7eu); /* above 448 (inf included): saturate */
    if (a < 0x3c800000u) {                               /* below 2^-6: subnormal grid 2^-9 */
        if (a < 0x3a000000u) return sign;                /* below 2^-11 (a quarter step): 0 */
        uint32_t e = a >> 23;
        uint32_t m = (a & 0x7fffffu) | 0x800000u;
        uint32_t shift = 141u - e; /* value = m * 2^(e-150); step 2^-9 -> shift = 150-9-e */
        uint32_t q = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1u);
        uint32_t half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (q & 1u))) q++;
        return (uint8_t)(sign | q); /* q == 8 encodes 2^-6, the smallest normal */
    }
    uint32_t r = a + 0x7ffffu + ((a >> 20) & 1u); /* RNE on the 20 dropped bits */
    uint32_t e = (r >> 23) - 120u;
    uint32_t m = (r >> 20) & 0x7u;
    return (uint8_t)(sign | (e << 3) | m); /* a <= 448 keeps e <= 15, m <= 6 at e == 15 */
}

/* ---- UE8M0 scale byte: 2^(e-127) ------------------------------------------------------------ */

AK_HD float ak_ue8m0_to_f32(uint8_t e) {
    /* No branch: in the GPU kernels a branch here put a convergence barrier between each key's
       scale byte and its use, so no load could be hoisted past it (docs/perf.md, x66). Bytes 0 and
       0xff, the two whose e + 1 has no bit above bit 0 in its low byte, add the mantissa's top
       bit: 0 -> 2^-127 (subnormal), 0xff -> inf with it, a quiet NaN. One test where two compares
       and two selects were (x298s). */
    const uint32_t x = e;
    const uint32_t b = (x << 23) | ((((x + 1u) & 0xfeu) == 0u) ? 0x00400000u : 0u);
    return ak_f32_from_bits(b);
}

/* ceil(log2(t)) for a positive normal fp32 t: the exponent, plus one if any mantissa bit is set. */
AK_HD int32_t ak_ceil_log2_f32(float t) {
    uint32_t u = ak_f32_bits(t);
    return (int32_t)((u >> 23) & 0xffu) - 127 + ((u & 0x7fffffu) != 0 ? 1 : 0);
}

AK_HD float ak_pow2_f32(int32_t k) { /* 2^k for -126 <= k <= 127 */
    return ak_f32_from_bits((uint32_t)(k + 127) << 23);
}

/* ---- e2m1 (FP4): magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6 --------------------------------------- */

AK_HD float ak_e2m1_to_f32(uint8_t nib) {
    const float mag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    float v = mag[nib & 7u];
    return (nib & 8u) ? -v : v;
}

/* Round to nearest-even on the e2m1 grid, saturate to +-6. */
AK_HD uint8_t ak_f32_to_e2m1(float x) {
    uint32_t u = ak_f32_bits(x);
    uint8_t sign = (uint8_t)((u >> 28) & 0x8u);
    float a = ak_f32_from_bits(u & 0x7fffffffu);
    uint8_t code;
    /* midpoints between neighbours; ties go to the even code (even mantissa bit) */
    if (!(a == a)) code = 7; /* NaN: no NaN code exists, saturate */
    else if (a < 0.25f) code = 0;
    else if (a == 0.25f) code = 0;
    else if (a < 0.75f) code = 1;
    else if (a == 0.75f) code = 2;
    else if (a < 1.25f) code = 2;
    else if (a == 1.25f) code = 2;
    else if (a < 1.75f) code = 3;
    else if (a == 1.75f) code = 4;
    else if (a < 2.5f) code = 4;
    else if (a == 2.5f) code = 4;
    else if (a < 3.5f) code = 5;
    else if (a == 3.5f) code = 6;
    else if (a < 5.0f) code = 6;
    else if (a == 5.0f) code = 6;
    else code = 7;
    return (uint8_t)(sign | code);
}

/* ---- quantization scales (layouts.md section 3) ------------------------------------------- */

/* 656 / 584 power-of-two rule: exponent k of 2^ceil(log2(max(amax/448, 1e-4))). */
AK_HD int32_t ak_scale_pow2_exp(float amax) {
    float t = amax / 448.0f;
    if (!(t >= 1e-4f)) t = 1e-4f; /* floor; also catches NaN */
    return ak_ceil_log2_f32(t);
}

/* SGLang store.cuh variant for 584: round_up_pow2(max(amax, 1e-4) / 448). */
AK_HD int32_t ak_scale_pow2_amax_floor_exp(float amax) {
    float a = amax;
    if (!(a >= 1e-4f)) a = 1e-4f;
    return ak_ceil_log2_f32(a / 448.0f);
}

/* ---- quotients by a fixed scale ------------------------------------------------------------ */

/* Whether e4m3(x * rs), rs = RN(1 / s), is the byte e4m3(x / s) for every finite bf16 x whose
   significand is 1 + m / 128 (m < 128), whatever its exponent and sign; s in [2^-89, 2^125].
   Why it can be decided per significand: rounding to fp32 commutes with powers of two while the
   results stay normal, so for x = (1 + m / 128) 2^E the pair (x / s, x * rs) is this function's
   pair (a, b) scaled by 2^E. The two are a few ulps apart at most, so the bytes differ only where
   an e4m3 rounding boundary lies between them. The e4m3 normal binades [2^-6, 2^9) share one grid
   (448 and above all saturate, a subset of its boundaries), the subnormal binades [2^-10, 2^-6)
   each have their own, below 2^-10 everything encodes to a signed zero and from 2^9 up to 448.
   So the pair, moved into [1, 2) by one exact power of two, is compared in a normal binade and
   in each of the four subnormal ones. The CUDA quantizers use it to replace the corrected
   quotient (three instructions per value) by the product when their values are bf16. */
AK_HD int ak_e4m3_recip_exact(float s, float rs, uint32_t m) {
    const float x = ak_f32_from_bits(0x3f800000u | (m & 0x7fu) << 16);
    float a = x / s, b = x * rs;
    const float f = ak_pow2_f32(127 - (int32_t)((ak_f32_bits(a) >> 23) & 0xffu)); /* a f in [1, 2) */
    a *= f;
    b *= f;
    for (int32_t t = -10; t <= -6; t++) { /* t = -6 is the normal binade [2^-6, 2^-5) */
        const float g = ak_pow2_f32(t);
#ifdef __CUDA_ARCH__
        /* the pair in one conversion: the same bytes as ak_f32_to_e4m3 for finite inputs, and a
           fraction of its instructions (every block of a quantizer runs this check) */
        uint16_t r;
        asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(a * g), "f"(b * g));
        if ((r & 0xffu) != (uint32_t)(r >> 8)) return 0;
#else
        if (ak_f32_to_e4m3(a * g) != ak_f32_to_e4m3(b * g)) return 0;
#endif
    }
    return 1;
}

/* ---- division by an invariant divisor ------------------------------------------------------ */

/* n / d for a divisor d in [1, 2^31] fixed ahead of time and any n below 2^31, by a high multiply,
   an add and a shift (Granlund and Montgomery, "Division by invariant integers using
   multiplication", 1994, section 4): with l = ceil(log2 d) and m = floor(2^32 (2^l - d) / d) + 1,
   n / d = (hi32(m n) + n) >> l, and for n below 2^31 the add stays inside 32 bits. The sparse decode
   kernels take their CTA's work from blockIdx this way: the compiler's division by a runtime
   divisor is a ~15-instruction dependent sequence with a branch to a 64-bit routine. d must not be
   0 (made from 0, the divisor divides by 1). */
typedef struct {
    uint32_t m, l;
} ak_divu;

AK_HD ak_divu ak_divu_make(uint32_t d) {
    ak_divu v;
    uint32_t l = 0;
    while (l < 31 && ((uint32_t)1 << l) < d) l++;
    v.l = l;
    v.m = (uint32_t)(((((uint64_t)1 << l) - d) << 32) / (d ? d : 1) + 1);
    return v;
}

AK_HD uint32_t ak_divu_q(uint32_t n, ak_divu v) {
#ifdef __CUDA_ARCH__
    const uint32_t t = __umulhi(n, v.m);
#else
    const uint32_t t = (uint32_t)(((uint64_t)n * v.m) >> 32);
#endif
    return (t + n) >> v.l;
}

#endif /* AK_NUMERIC_H */
