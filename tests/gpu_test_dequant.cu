/*
 * gpu_test_dequant.cu -- ak_sd_dequant16, the fp8 -> bf16 dequantization of the sparse decode
 * kernels (src/cuda/sparse_decode.cuh), against a host reference bf16_rn(e4m3(q) * s) on every
 * e4m3 byte and on scales of every kind a cache holds: powers of two from fp32 subnormals to 2^12
 * (656's default rule, V4's UE8M0), non-powers of two (656's FP32 rule, checkpoint k_scales), zero,
 * inf and NaN. Bits must match exactly; a NaN must stay a NaN.
 * Exit 77 without a GPU.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "cuda/sparse_decode.cuh"

__global__ void t_dequant(const uint8_t *bytes, const float *scales, uint16_t *out, int chunks) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= chunks) return;
    uint4 lo, hi;
    ak_sd_dequant16(*(const uint4 *)(bytes + 16 * i), scales[i / 16], lo, hi);
    *(uint4 *)(out + 16 * i) = lo;
    *(uint4 *)(out + 16 * i + 8) = hi;
}

static float t_e4m3(uint8_t b) { /* OCP e4m3: bias 7, no inf, 0x7f / 0xff NaN */
    const int sg = b >> 7, e = (b >> 3) & 15, m = b & 7;
    if (e == 15 && m == 7) return NAN;
    const double v = e == 0 ? ldexp(m, -9) : ldexp(8 + m, e - 10);
    return (float)(sg ? -v : v);
}

static uint16_t t_bf16_rn(float x) { /* round to nearest even; NaN stays NaN */
    uint32_t u;
    memcpy(&u, &x, 4);
    if (isnan(x)) return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static float t_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

int main(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        printf("gpu_test_dequant: no CUDA device, skipped\n");
        return 77;
    }
    float sc[200];
    int ns = 0;
    for (int k = -130; k <= 12; k++) sc[ns++] = ldexpf(1.0f, k);
    const float other[] = {0.0179f, 3.0f, 1e-30f, 1e30f, 448.0f / 3.0f, 0.375f, 1.0f + 0x1p-23f,
                           t_bits(0x00400000u) /* UE8M0 0: 2^-127 */, t_bits(0x00000001u), 0.0f,
                           INFINITY, NAN, -1.0f};
    for (size_t i = 0; i < sizeof other / sizeof other[0]; i++) sc[ns++] = other[i];
    const int chunks = ns * 16;
    uint8_t *b = (uint8_t *)malloc((size_t)chunks * 16);
    uint16_t *o = (uint16_t *)malloc((size_t)chunks * 16 * 2);
    for (int i = 0; i < chunks * 16; i++) b[i] = (uint8_t)(i & 255);
    uint8_t *db;
    float *ds;
    uint16_t *dout;
    if (cudaMalloc((void **)&db, (size_t)chunks * 16) != cudaSuccess ||
        cudaMalloc((void **)&ds, sizeof sc) != cudaSuccess ||
        cudaMalloc((void **)&dout, (size_t)chunks * 32) != cudaSuccess) {
        printf("gpu_test_dequant: FAIL: cudaMalloc\n");
        return 1;
    }
    cudaMemcpy(db, b, (size_t)chunks * 16, cudaMemcpyHostToDevice);
    cudaMemcpy(ds, sc, sizeof sc, cudaMemcpyHostToDevice);
    cudaMemset(dout, 0xff, (size_t)chunks * 32); /* poison: 0xffff is a NaN */
    t_dequant<<<(chunks + 127) / 128, 128>>>(db, ds, dout, chunks);
    cudaError_t err = cudaDeviceSynchronize();
    if (err != cudaSuccess) {
        printf("gpu_test_dequant: FAIL: kernel: %s\n", cudaGetErrorString(err));
        return 1;
    }
    cudaMemcpy(o, dout, (size_t)chunks * 32, cudaMemcpyDeviceToHost);
    int bad = 0;
    for (int i = 0; i < chunks * 16; i++) {
        const float s = sc[i / 256];
        const uint16_t want = t_bf16_rn(t_e4m3(b[i]) * s), got = o[i];
        const int want_nan = (want & 0x7fffu) > 0x7f80u, got_nan = (got & 0x7fffu) > 0x7f80u;
        if (want_nan ? got_nan : got == want) continue;
        if (bad++ < 10)
            printf("gpu_test_dequant: byte 0x%02x scale %a: got 0x%04x, want 0x%04x\n", b[i], (double)s, got, want);
    }
    printf("gpu_test_dequant: %d scales x 256 bytes, %d mismatches\n", ns, bad);
    printf("%s\n", bad ? "FAIL" : "1 passed, 0 failed");
    cudaFree(db);
    cudaFree(ds);
    cudaFree(dout);
    free(b);
    free(o);
    return bad ? 1 : 0;
}
