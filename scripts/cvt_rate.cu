// cvt_rate.cu -- how fast can an SM turn e4m3 bytes into bf16_rn(float(q) s)? The question behind
// the sparse decode producers (docs/perf.md session 18): their conversion takes ~1240 cycles per
// 8-key warp step, and 8 keys are 128 warp-level conversion instructions (F2FP) per lane group, so
// if F2FP issues at a quarter of the ALU rate the step is the conversion pipe itself.
// Each thread converts 8 independent 16-byte chunks per iteration (a producer warp's 8 keys) from
// registers, for ITERS iterations; W warps per SM (one block of W warps per SM). Variants:
//   0 the kernels' path (ak_sd_dequant16: cvt e4m3x2 -> f16x2, widen, two FMUL, cvt pack bf16x2)
//   1 cvt e4m3x2 -> f16x2 alone            2 cvt pack bf16x2.f32 alone
//   3 bit unpack (prmt, arithmetic shift, and: q 2^-120 as f32, exact), FMUL by s 2^120, cvt pack
//   4 as 3 with the bf16 rounding done by integer adds (no F2FP at all)
//   5 widen f16 -> f32 (HADD2.F32) alone   6 loop overhead only (the xors)
//   7 half the chunks by 0, half by 3 (the F2FP and integer pipes shared)   8 three of four by 0
// Prints values converted per clock per SM. Variants 3 and 4 are checked bit for bit against 0 on
// every non-NaN byte and several scales first.
// build: nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -DAK_HAVE_CUDA -Iinclude -Isrc scripts/cvt_rate.cu -o /tmp/cvt_rate
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include "cvt_variants.cuh"
#include "probe.cuh"

enum { ITERS = 2048, CH = 8 };

template <int V> __global__ void rate(uint32_t seed, float s, uint32_t *sink, unsigned long long *cyc) {
    uint4 base[CH];
#pragma unroll
    for (int c = 0; c < CH; c++) {
        uint32_t h = seed ^ (threadIdx.x * 0x9e3779b9u) ^ (c * 0x85ebca6bu);
        base[c] = make_uint4(h & 0x7e7e7e7eu, (h * 3u) & 0x7e7e7e7eu, (h * 5u) & 0x7e7e7e7eu, (h * 7u) & 0x7e7e7e7eu);
    }
    const float s2 = s * 0x1p120f;
    uint32_t acc = 0;
    __syncthreads();
    const unsigned long long t0 = clock64();
    for (int i = 0; i < ITERS; i++) {
        const uint32_t m = (uint32_t)i * 0x01010100u & 0x3c3c3c3cu;
#pragma unroll
        for (int c = 0; c < CH; c++) {
            uint4 raw = make_uint4(base[c].x ^ m, base[c].y ^ m, base[c].z ^ m, base[c].w ^ m), lo, hi;
            if (V == 7) {
                if (c & 1) conv<3>(raw, s, s2, lo, hi);
                else conv<0>(raw, s, s2, lo, hi);
            } else if (V == 8) {
                if ((c & 3) == 3) conv<3>(raw, s, s2, lo, hi);
                else conv<0>(raw, s, s2, lo, hi);
            } else {
                conv<V>(raw, s, s2, lo, hi);
            }
            acc ^= lo.x ^ lo.y ^ lo.z ^ lo.w ^ hi.x ^ hi.y ^ hi.z ^ hi.w;
        }
    }
    __syncthreads();
    const unsigned long long t1 = clock64();
    if (acc == 0x12345678u) sink[0] = acc;
    if (threadIdx.x == 0) cyc[blockIdx.x] = t1 - t0;
}

template <int V> __global__ void check(const float *scales, int ns, uint32_t *bad) {
    const int b = threadIdx.x; /* byte */
    if ((b & 0x7f) == 0x7f) return; /* NaN bytes: the bit paths do not claim them */
    for (int j = 0; j < ns; j++) {
        const float s = scales[j];
        uint4 lo0, hi0, lo1, hi1;
        const uint32_t w = (uint32_t)b * 0x01010101u;
        conv<0>(make_uint4(w, w, w, w), s, s * 0x1p120f, lo0, hi0);
        conv<V>(make_uint4(w, w, w, w), s, s * 0x1p120f, lo1, hi1);
        if (lo0.x != lo1.x || lo0.y != lo1.y || lo0.z != lo1.z || lo0.w != lo1.w || hi0.x != hi1.x || hi0.y != hi1.y ||
            hi0.z != hi1.z || hi0.w != hi1.w)
            atomicAdd(bad, 1u);
    }
}

template <int V> static void run(const char *name, int sms, int W, uint32_t *sink, unsigned long long *cyc) {
    rate<V><<<sms, 32 * W>>>(0x1234u, 0.0179f, sink, cyc);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    rate<V><<<sms, 32 * W>>>(0x4321u, 0.0179f, sink, cyc);
    CK(cudaDeviceSynchronize());
    unsigned long long h[1024];
    CK(cudaMemcpy(h, cyc, sizeof(unsigned long long) * sms, cudaMemcpyDeviceToHost));
    double sum = 0;
    for (int i = 0; i < sms; i++) sum += (double)h[i];
    const double c = sum / sms, vals = (double)W * 32 * CH * 16 * ITERS;
    printf("%-34s W %2d  %8.0f clk  %7.2f values/clk/SM\n", name, W, c, vals / c);
}

int main() {
    int sms = 0;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    cudaDeviceProp pr;
    CK(cudaGetDeviceProperties(&pr, 0));
    printf("cvt_rate on %s, %d SMs\n", pr.name, sms);
    uint32_t *sink, *bad;
    unsigned long long *cyc;
    float *sc;
    CK(cudaMalloc(&sink, 4));
    CK(cudaMalloc(&bad, 8));
    CK(cudaMalloc(&cyc, sizeof(unsigned long long) * 1024));
    const float hs[] = {0.0179f, 1.0f, 3.1f, 1e-30f, 1e-38f, 7.3e-3f, 100.0f, 0.5f, 2.75e-5f};
    const int ns = (int)(sizeof(hs) / sizeof(hs[0]));
    CK(cudaMalloc(&sc, sizeof(hs)));
    CK(cudaMemcpy(sc, hs, sizeof(hs), cudaMemcpyHostToDevice));
    CK(cudaMemset(bad, 0, 8));
    check<3><<<1, 256>>>(sc, ns, bad);
    check<4><<<1, 256>>>(sc, ns, bad + 1);
    CK(cudaGetLastError());
    uint32_t hb[2];
    CK(cudaMemcpy(hb, bad, 8, cudaMemcpyDeviceToHost));
    printf("bit paths against the kernels' path (non-NaN bytes, %d scales): variant 3 %u, variant 4 %u mismatches\n", ns, hb[0], hb[1]);
    const int ws[] = {4, 8, 16, 32};
    for (int W : ws) {
        run<0>("0 kernels' path", sms, W, sink, cyc);
        run<1>("1 cvt e4m3x2->f16x2 only", sms, W, sink, cyc);
        run<2>("2 cvt bf16x2.f32 pack only", sms, W, sink, cyc);
        run<3>("3 bit unpack, FMUL, cvt pack", sms, W, sink, cyc);
        run<4>("4 bit unpack, FMUL, integer pack", sms, W, sink, cyc);
        run<5>("5 widen f16x2->f32 only", sms, W, sink, cyc);
        run<6>("6 overhead only", sms, W, sink, cyc);
        run<7>("7 half by 0, half by 3", sms, W, sink, cyc);
        run<8>("8 three of four by 0, one by 3", sms, W, sink, cyc);
    }
    return 0;
}
