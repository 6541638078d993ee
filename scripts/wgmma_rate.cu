/* wgmma_rate.cu -- issue rate of the wgmma shapes the sparse decode kernels use (not part of the
 * library): one CTA per SM, W warpgroups each issuing chains of 36 k16 steps (S = Q K^T of one
 * unit: A and B from shared memory, 128-byte swizzle) or 2 steps of m64n256k16 (P V), timed with
 * clock64 over many chains. Prints clk per instruction and per chain, and the operand bytes the
 * chain reads from shared memory per clk. Then one warpgroup's S chains beside NW "producer" warps,
 * as the kernels' consumers run theirs beside the producers, in two kinds: shared-memory traffic
 * (a 16-byte load and store per lane and step, GAP dependent FMAs between steps) and FMAs alone (CH
 * independent chains per warp; OLD puts these warps before the warpgroup): how much the chains slow
 * (docs/perf.md, session 30).
 * build: nvcc -gencode=arch=compute_90a,code=sm_90a -O3 -std=c++17 -Isrc scripts/wgmma_rate.cu -o wgmma_rate */
#include "cuda/ptx.cuh"
#include <cstdio>
#include <cstdint>

template <int N>
__device__ __forceinline__ void chain(float *d, uint64_t da, uint64_t db) {
    ak_wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 36; kk++) {
        const uint32_t off = (kk >> 2) * 8192 + (kk & 3) * 32;
        if (N == 16) ak_wgmma_m64n16k16_ss<0>(d, da + (off >> 4), db + (off >> 4), kk > 0);
        if (N == 32) ak_wgmma_m64n32k16_ss<0>(d, da + (off >> 4), db + (off >> 4), kk > 0);
        if (N == 64) ak_wgmma_m64n64k16_ss(d, da + (off >> 4), db + (off >> 4), kk > 0);
    }
    ak_wgmma_commit();
}

template <int N, int W>
__global__ void __launch_bounds__(128 * W, 1) rate(long long *out, int reps) {
    extern __shared__ __align__(1024) uint8_t sm[];
    for (int k = threadIdx.x; k < 200 * 1024 / 4; k += blockDim.x) reinterpret_cast<uint32_t *>(sm)[k] = 0x3c003c00u;
    __syncthreads();
    const uint32_t base = ak_smem_addr(sm);
    const uint64_t da = ak_wgmma_desc_sw128(base, 16, 1024), db = ak_wgmma_desc_sw128(base + 81920, 16, 1024);
    float d[128];
    for (int k = 0; k < 128; k++) d[k] = 0.0f;
    const long long t0 = clock64();
    for (int r = 0; r < reps; r++) {
        if (N <= 64) {
            chain<N>(d, da, db);
        } else {
            ak_wgmma_fence();
            ak_wgmma_m64n256k16_ss_tb(d, da, db);
            ak_wgmma_m64n256k16_ss_tb(d, da + 2, db + 128);
            ak_wgmma_commit();
        }
        ak_wgmma_wait0();
    }
    const long long t1 = clock64();
    float acc = 0.0f;
    for (int k = 0; k < 128; k++) acc += d[k];
    if (threadIdx.x == 0) out[blockIdx.x] = t1 - t0;
    if (acc == 12345.0f) out[0] = 0;
}

/* One consumer warpgroup (threads 0..127) issuing chains of m64nNk16 as above, beside NW warps of
   shared-memory traffic (a 16-byte load and a 16-byte store per lane and step, conflict-free, GAP
   dependent FMAs after each) that stop when the chains are done. */
template <int N, int NW, int GAP, int CH = 8, bool OLD = false>
__global__ void __launch_bounds__(128 + 32 * NW, 1) rate_noise(long long *out, int reps) {
    extern __shared__ __align__(1024) uint8_t sm[];
    for (int k = threadIdx.x; k < 200 * 1024 / 4; k += blockDim.x) reinterpret_cast<uint32_t *>(sm)[k] = 0x3c003c00u;
    volatile int *stop = reinterpret_cast<volatile int *>(sm + 200 * 1024 - 16);
    if (threadIdx.x == 0) *stop = 0;
    __syncthreads();
    const uint32_t base = ak_smem_addr(sm);
    /* OLD: the noise warps come first (warps 0 .. NW - 1), the warpgroup last */
    const bool noise = OLD ? threadIdx.x < 32 * NW : threadIdx.x >= 128;
    if (noise) {
        const int w = (OLD ? threadIdx.x : threadIdx.x - 128) >> 5, lane = threadIdx.x & 31;
        uint8_t *rg = sm + 163840 + (w % 8) * 4096 + lane * 16;
        uint4 x = make_uint4(threadIdx.x, 1, 2, 3);
        float f = (float)threadIdx.x;
        long long it = 0;
        const long long t0 = clock64();
        while (*stop == 0) {
            if (GAP >= 0) {
#pragma unroll
                for (int u = 0; u < 8; u++) {
                    const uint4 y = *reinterpret_cast<const uint4 *>(rg + (u & 3) * 512);
                    *reinterpret_cast<uint4 *>(rg + 2048 + (u & 3) * 512) = x;
                    x.x ^= y.x, x.y ^= y.y, x.z += y.z, x.w += y.w;
#pragma unroll
                    for (int g = 0; g < GAP; g++) f = fmaf(f, 1.0001f, 0.5f);
                }
                it += 8;
            } else { /* no shared memory: CH independent FMA chains, -GAP steps each */
                float e[CH];
#pragma unroll
                for (int c = 0; c < CH; c++) e[c] = f + c;
#pragma unroll
                for (int g = 0; g < -GAP; g++)
#pragma unroll
                    for (int c = 0; c < CH; c++) e[c] = fmaf(e[c], 1.0001f, 0.5f);
#pragma unroll
                for (int c = 0; c < CH; c++) f += e[c];
                it += CH * -GAP;
            }
        }
        const long long t1 = clock64();
        if (lane == 0) out[256 + w] = it, out[512 + w] = t1 - t0;
        if (x.x == 12345u && f == 1.0f) out[0] = 0;
        return;
    }
    const uint64_t da = ak_wgmma_desc_sw128(base, 16, 1024), db = ak_wgmma_desc_sw128(base + 81920, 16, 1024);
    float d[32];
    for (int k = 0; k < 32; k++) d[k] = 0.0f;
    const long long t0 = clock64();
    for (int r = 0; r < reps; r++) {
        chain<N>(d, da, db);
        ak_wgmma_wait0();
    }
    const long long t1 = clock64();
    const bool first = threadIdx.x == (OLD ? 32 * NW : 0);
    if (first) *stop = 1;
    float acc = 0.0f;
    for (int k = 0; k < N / 2; k++) acc += d[k];
    if (first) out[blockIdx.x] = t1 - t0;
    if (acc == 12345.0f) out[0] = 0;
}

template <int N, int NW, int GAP, int CH = 8, bool OLD = false> void run_noise(int sms) {
    long long *dout, h[1024];
    cudaMalloc(&dout, 1024 * sizeof(long long));
    cudaMemset(dout, 0, 1024 * sizeof(long long));
    cudaFuncSetAttribute(rate_noise<N, NW, GAP, CH, OLD>, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024);
    const int reps = 2000;
    rate_noise<N, NW, GAP, CH, OLD><<<sms, 128 + 32 * NW, 200 * 1024>>>(dout, reps);
    cudaError_t e = cudaDeviceSynchronize();
    cudaMemcpy(h, dout, 1024 * sizeof(long long), cudaMemcpyDeviceToHost);
    double nb = 0.0, nc = 0.0;
    for (int w = 0; w < NW; w++) nb += (double)h[256 + w] * 32 * 32, nc += (double)h[512 + w];
    const double clk = (double)h[0] / reps / 36;
    if (GAP >= 0)
        printf("m64n%dk16 beside %d warps of lds+sts (%2d dependent FMAs per step): %.1f clk per instruction (%.0f B/clk "
               "of operands), the warps' shared traffic %.1f B/clk (%s)\n",
               N, NW, GAP, clk, (2048.0 + 32.0 * N) / clk, NW ? nb / (nc / NW) : 0.0, cudaGetErrorString(e));
    else
        printf("m64n%dk16 beside %d warps of FMAs only (%d independent chains, warps %s than the warpgroup): %.1f clk per "
               "instruction (%.0f B/clk of operands), the warps' %.2f FMA instructions per clk (%s)\n",
               N, NW, CH, OLD ? "older" : "younger", clk, (2048.0 + 32.0 * N) / clk, nb / 1024.0 / (nc / (NW > 0 ? NW : 1)),
               cudaGetErrorString(e));
    cudaFree(dout);
}

template <int N, int W> void run(int sms) {
    long long *dout, h[256];
    cudaMalloc(&dout, 256 * sizeof(long long));
    cudaFuncSetAttribute(rate<N, W>, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024);
    const int reps = 2000;
    rate<N, W><<<sms, 128 * W, 200 * 1024>>>(dout, reps);
    cudaError_t e = cudaDeviceSynchronize();
    cudaMemcpy(h, dout, sms * sizeof(long long), cudaMemcpyDeviceToHost);
    const int per = N <= 64 ? 36 : 2;
    printf("m64n%dk16 x %d per chain, %d warpgroup(s): %.1f clk per chain, %.1f clk per instruction, %.0f B/clk of "
           "operands (%s)\n", N, per, W, (double)h[0] / reps, (double)h[0] / reps / per,
           W * (2048.0 + 32.0 * N) / ((double)h[0] / reps / per), cudaGetErrorString(e));
    cudaFree(dout);
}

int main() {
    int sms = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    run<16, 1>(sms); run<32, 1>(sms); run<64, 1>(sms); run<256, 1>(sms);
    run<16, 2>(sms); run<32, 2>(sms); run<64, 2>(sms); run<256, 2>(sms);
    run_noise<32, 0, 0>(sms); run_noise<32, 4, 0>(sms); run_noise<32, 8, 0>(sms);
    run_noise<32, 4, 16>(sms); run_noise<32, 8, 16>(sms); run_noise<32, 8, 64>(sms);
    run_noise<32, 8, -32>(sms); run_noise<32, 4, -32>(sms); run_noise<64, 4, -32>(sms);
    run_noise<32, 8, -32, 8, true>(sms); run_noise<32, 4, -32, 8, true>(sms);
    run_noise<32, 8, -32, 2>(sms); run_noise<32, 8, -32, 2, true>(sms);
    run_noise<32, 4, -32, 2>(sms); run_noise<32, 4, -32, 2, true>(sms);
    run_noise<32, 8, -32, 1>(sms); run_noise<32, 8, -32, 1, true>(sms);
    run_noise<16, 8, 0>(sms); run_noise<16, 8, 16>(sms); run_noise<64, 4, 0>(sms); run_noise<64, 4, 16>(sms);
    return 0;
}
