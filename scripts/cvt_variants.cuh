/* cvt_variants.cuh -- the e4m3 -> bf16 conversion variants that scripts/cvt_rate.cu and
   scripts/cvt_contention.cu time (not part of the library). conv<V> turns 16 e4m3 bytes into 16
   bf16 values: 0 the kernels' path (ak_sd_dequant16), 1 the cvt e4m3x2 -> f16x2 alone, 2 the F2FP
   pack alone, 3 bit unpack, FMUL and F2FP (exact), 4 bit unpack, FMUL and an integer pack (exact,
   no F2FP), 5 the widening alone, 6 loop overhead only. s2 = s 2^120 for the bit paths. */
#pragma once
#include <cstdint>
#include "cuda/sparse_decode.cuh" /* ak_sd_dequant16, ak_sd_pack_bf16 and the cuda_fp8/bf16 types */

/* q 2^-120 as f32 bits for byte k of w: the byte on top, shifted arithmetically so the sign fills
   bits 27..31, then the sign and the 7 magnitude bits kept (exponent field = e4m3 exponent, mantissa
   bits 22..20 = e4m3 mantissa; an e4m3 subnormal becomes the f32 subnormal of the same ratio). */
__device__ __forceinline__ float bits_q(uint32_t w, int k) {
    const uint32_t x = __byte_perm(w, 0u, 0x0444u | ((uint32_t)k << 12));
    return __int_as_float((int32_t)(((int32_t)x >> 4) & (int32_t)0x87f00000u));
}
__device__ __forceinline__ uint32_t int_rn2(float lo, float hi) {
    const uint32_t a = __float_as_uint(lo), b = __float_as_uint(hi);
    const uint32_t ra = a + 0x7fffu + ((a >> 16) & 1u), rb = b + 0x7fffu + ((b >> 16) & 1u);
    return __byte_perm(ra, rb, 0x7632u);
}

template <int V> __device__ __forceinline__ void conv(uint4 raw, float s, float s2, uint4 &lo, uint4 &hi) {
    if (V == 0) { /* the kernels' own function */
        ak_sd_dequant16(raw, s, lo, hi);
        return;
    }
    const uint32_t wv[4] = {raw.x, raw.y, raw.z, raw.w};
    uint32_t o[8];
#pragma unroll
    for (int q = 0; q < 8; q++) { /* value pair q: bytes 2 (q % 2) .. of word q / 2 */
        const uint32_t wk = wv[q >> 1];
        const int h = q & 1;
        if (V == 1) {
            __half2_raw hr = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)((wk >> (16 * h)) & 0xffffu), __NV_E4M3);
            o[q] = (uint32_t)hr.x | ((uint32_t)hr.y << 16);
        } else if (V == 2) {
            o[q] = ak_sd_pack_bf16(__uint_as_float(wk + h), __uint_as_float(wk ^ h));
        } else if (V == 3) {
            o[q] = ak_sd_pack_bf16(bits_q(wk, 2 * h) * s2, bits_q(wk, 2 * h + 1) * s2);
        } else if (V == 4) {
            o[q] = int_rn2(bits_q(wk, 2 * h) * s2, bits_q(wk, 2 * h + 1) * s2);
        } else if (V == 5) {
            float2 f = __half22float2(*reinterpret_cast<const __half2 *>(&wk));
            o[q] = __float_as_uint(f.x) ^ __float_as_uint(f.y + (float)h);
        } else {
            o[q] = wk + h;
        }
    }
    lo = make_uint4(o[0], o[1], o[2], o[3]);
    hi = make_uint4(o[4], o[5], o[6], o[7]);
}
