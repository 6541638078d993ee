/*
 * gpu_test_wgmma.cu -- the wgmma wrappers of src/cuda/ptx.cuh and the shared-memory layouts the
 * sparse decode wgmma kernel relies on, checked against a host product (exit 77 without a GPU):
 *   S[64 x 64]  = Q[64 x 576] K[64 x 576]^T   (m64n64k16, A and B K-major, 128-byte swizzle;
 *                                              both warpgroups compute all of S)
 *   O[64 x 512] = P[64 x 64] V[64 x 512]      (m64n256k16, A = P in registers (the wgmma A
 *                                              fragment), B = the same K tile read MN-major, one
 *                                              warpgroup per 256 dims)
 * Inputs are small multiples of 1/8 and 1/4 so every product and sum is exact in fp32: any
 * difference is a layout or descriptor error, and the first one is printed with its position.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "cuda/ptx.cuh"

#define T_D 576
#define T_TILE 8192

/* Swizzled K-major offset of dims d..d+7 of row n (re-derived here from the PTX ISA text). */
__device__ static uint32_t t_off(int n, int d) {
    return (uint32_t)((d / 64) * T_TILE + n * 128 + ((((d / 8) % 8) ^ (n % 8)) * 16));
}

__global__ void __launch_bounds__(256, 1) t_kernel(const uint16_t *q, const uint16_t *k, const uint16_t *pm,
                                                   float *s_out, float *o_out) {
    extern __shared__ __align__(16) uint8_t sm_raw[];
    uint8_t *sm = (uint8_t *)(((uintptr_t)sm_raw + 1023) & ~(uintptr_t)1023);
    uint8_t *qs = sm, *ks = sm + 9 * T_TILE;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wg = warp >> 2, wr = warp & 3;
    const int g = lane >> 2, c4 = lane & 3;
    for (int it = tid; it < 64 * 72; it += 256) {
        const int row = it / 72, c = it % 72;
        *(uint4 *)(qs + t_off(row, c * 8)) = *(const uint4 *)(q + row * T_D + c * 8);
        *(uint4 *)(ks + t_off(row, c * 8)) = *(const uint4 *)(k + row * T_D + c * 8);
    }
    ak_fence_proxy_async();
    __syncthreads();
    float s[32];
    const uint32_t qa = ak_smem_addr(qs), ka = ak_smem_addr(ks);
    ak_wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 36; kk++) {
        const uint32_t off = (kk >> 2) * T_TILE + (kk & 3) * 32;
        ak_wgmma_m64n64k16_ss(s, ak_wgmma_desc_sw128(qa + off, 16, 1024), ak_wgmma_desc_sw128(ka + off, 16, 1024),
                              kk > 0);
    }
    ak_wgmma_commit();
    ak_wgmma_wait0();
#pragma unroll
    for (int j = 0; j < 32; j++) ak_reg_fence(s[j]);
    const int r0 = 16 * wr + g;
#pragma unroll
    for (int j = 0; j < 8; j++)
        for (int e = 0; e < 4; e++)
            s_out[wg * 64 * 64 + (r0 + (e >> 1) * 8) * 64 + 8 * j + 2 * c4 + (e & 1)] = s[4 * j + e];
    /* P's A fragments from global memory: rows r0 / r0 + 8, columns 16 kk + 2 c4 (+ 8) */
    uint32_t pa[16];
#pragma unroll
    for (int kk = 0; kk < 4; kk++)
        for (int f = 0; f < 4; f++) {
            const int row = r0 + (f & 1) * 8, col = 16 * kk + 2 * c4 + (f >> 1) * 8;
            pa[4 * kk + f] = (uint32_t)pm[row * 64 + col] | ((uint32_t)pm[row * 64 + col + 1] << 16);
        }
    float o[128];
#pragma unroll
    for (int j = 0; j < 128; j++) o[j] = 0.0f;
#pragma unroll
    for (int j = 0; j < 128; j++) ak_reg_fence(o[j]);
    ak_wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 4; kk++)
        ak_wgmma_m64n256k16_rs_tb(o, pa + 4 * kk, ak_wgmma_desc_sw128(ka + wg * 4 * T_TILE + kk * 2048, T_TILE, 1024));
    ak_wgmma_commit();
    ak_wgmma_wait0();
#pragma unroll
    for (int j = 0; j < 128; j++) ak_reg_fence(o[j]);
#pragma unroll
    for (int j = 0; j < 32; j++)
        for (int e = 0; e < 4; e++)
            o_out[(r0 + (e >> 1) * 8) * 512 + wg * 256 + 8 * j + 2 * c4 + (e & 1)] = o[4 * j + e];
}

static uint16_t t_bf16(float x) { /* x is a small multiple of 1/8: exact in bf16 */
    uint32_t u;
    memcpy(&u, &x, 4);
    return (uint16_t)(u >> 16);
}

int main(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        printf("gpu_test_wgmma: no CUDA device, skipped\n");
        return 77;
    }
    uint16_t *q = (uint16_t *)malloc(64 * T_D * 2), *k = (uint16_t *)malloc(64 * T_D * 2);
    uint16_t *pm = (uint16_t *)malloc(64 * 64 * 2);
    float *qf = (float *)malloc(64 * T_D * 4), *kf = (float *)malloc(64 * T_D * 4), *pf = (float *)malloc(64 * 64 * 4);
    float *s = (float *)malloc(2 * 64 * 64 * 4), *o = (float *)malloc(64 * 512 * 4);
    uint32_t st = 12345u;
    for (int e = 0; e < 64 * T_D; e++) {
        st = st * 1664525u + 1013904223u;
        qf[e] = (float)((int)(st >> 28) - 8) / 8.0f;
        st = st * 1664525u + 1013904223u;
        kf[e] = (float)((int)(st >> 28) - 8) / 8.0f;
        q[e] = t_bf16(qf[e]);
        k[e] = t_bf16(kf[e]);
    }
    for (int e = 0; e < 64 * 64; e++) {
        st = st * 1664525u + 1013904223u;
        pf[e] = (float)((int)(st >> 29) - 4) / 4.0f;
        pm[e] = t_bf16(pf[e]);
    }
    uint16_t *dq, *dk, *dp;
    float *ds, *dout;
    cudaMalloc((void **)&dq, 64 * T_D * 2);
    cudaMalloc((void **)&dk, 64 * T_D * 2);
    cudaMalloc((void **)&dp, 64 * 64 * 2);
    cudaMalloc((void **)&ds, 2 * 64 * 64 * 4);
    cudaMalloc((void **)&dout, 64 * 512 * 4);
    cudaMemcpy(dq, q, 64 * T_D * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(dk, k, 64 * T_D * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(dp, pm, 64 * 64 * 2, cudaMemcpyHostToDevice);
    const int smem = 18 * T_TILE + 1024;
    cudaFuncSetAttribute(t_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    t_kernel<<<1, 256, smem>>>(dq, dk, dp, ds, dout);
    cudaError_t err = cudaDeviceSynchronize();
    if (err != cudaSuccess) {
        printf("gpu_test_wgmma: FAIL: kernel: %s\n", cudaGetErrorString(err));
        return 1;
    }
    cudaMemcpy(s, ds, 2 * 64 * 64 * 4, cudaMemcpyDeviceToHost);
    cudaMemcpy(o, dout, 64 * 512 * 4, cudaMemcpyDeviceToHost);
    int bad_s = 0, bad_o = 0;
    for (int w = 0; w < 2; w++)
        for (int m = 0; m < 64; m++)
            for (int j = 0; j < 64; j++) {
                double ref = 0.0;
                for (int d = 0; d < T_D; d++) ref += (double)qf[m * T_D + d] * kf[j * T_D + d];
                const float got = s[w * 4096 + m * 64 + j];
                if (got != (float)ref && bad_s++ == 0)
                    printf("gpu_test_wgmma: S[%d][%d] (warpgroup %d) = %g, expected %g\n", m, j, w, got, ref);
            }
    for (int m = 0; m < 64; m++)
        for (int d = 0; d < 512; d++) {
            double ref = 0.0;
            for (int j = 0; j < 64; j++) ref += (double)pf[m * 64 + j] * kf[j * T_D + d];
            if (o[m * 512 + d] != (float)ref && bad_o++ == 0)
                printf("gpu_test_wgmma: O[%d][%d] = %g, expected %g\n", m, d, o[m * 512 + d], ref);
        }
    printf("gpu_test_wgmma: QK^T (m64n64 ss, K-major) %d/%d wrong, PV (m64n256 rs, MN-major B) %d/%d wrong: %s\n", bad_s,
           2 * 64 * 64, bad_o, 64 * 512, bad_s + bad_o == 0 ? "PASS" : "FAIL");
    cudaFree(dq);
    cudaFree(dk);
    cudaFree(dp);
    cudaFree(ds);
    cudaFree(dout);
    free(q);
    free(k);
    free(pm);
    free(qf);
    free(kf);
    free(pf);
    free(s);
    free(o);
    return bad_s + bad_o == 0 ? 0 : 1;
}
