/* wgmma_reuse.cu -- why chains of wgmma that read the same operands every time ran twice as fast
 * in scripts/wgmma_rate.cu before session 33 (docs/perf.md, session 33). Not part of the library.
 * One CTA per SM, one warpgroup, the 64-head kernel's S: 36 x m64nNk16 per chain, A = Q [64 heads x
 * 576] bf16 (72 KB), B = a K buffer [N keys x 576] bf16, both 128-byte swizzled in 64-dim column
 * blocks as in ak_sdx_main, wait_group 0 after each chain.
 *
 * DEAD: each chain overwrites its accumulators (scale-d 0 on its first step), so when the loop is
 * unrolled the earlier chain's results are dead and ptxas deletes that chain: its SASS keeps 36 of
 * 72 HGMMAs per pair of chains, with a placeholder `HGMMA.64x8x16.F16 RZ, gdesc[URZ]` in its place.
 * The loop only unrolls when the descriptors do not depend on the chain's index, which is why "the
 * same operands every chain" looked twice as fast as "two K buffers in turn". Live chains (the
 * accumulators carried from chain to chain, as the kernels' products are) all run at one rate.
 * The other variants: NB K buffers in turn; the K buffer rewritten (same bytes, 16-byte st.shared,
 * as the producers' conversion writes) with or without fence.proxy.async before each chain; QR > 0:
 * the last QR steps take Q's A fragments from registers (loaded once by ldmatrix) and read only the
 * K buffer, as run x197 (session 38) did in ak_sdx_main, where 10 such steps moved nothing: is a
 * register-A step as fast as its bytes say (1 KB instead of 3 KB per m64n32k16)?
 * build: nvcc -gencode=arch=compute_90a,code=sm_90a -O3 -std=c++17 -Isrc scripts/wgmma_reuse.cu -o wgmma_reuse */
#include "cuda/ptx.cuh"
#include "probe.cuh"
#include <cstdint>

enum { REPS = 2000, QB = 73728 };

/* MODE 0: plain; 1: the K buffer rewritten, fence, barrier; 2: rewritten, barrier, no fence. */
template <int N, int NB, int MODE, bool DEAD, int QR = 0>
__global__ void __launch_bounds__(128, 1) reuse(long long *out, int reps) {
    static_assert(QR == 0 || N == 32, "register-A steps: m64n32k16 only");
    enum { KBYTES = N * 1152, SMEM = QB + NB * KBYTES };
    extern __shared__ __align__(1024) uint8_t sm[];
    for (int k = threadIdx.x; k < SMEM / 4; k += 128) reinterpret_cast<uint32_t *>(sm)[k] = fill(k, true);
    __syncthreads();
    const uint32_t base = ak_smem_addr(sm);
    /* Q's A fragments of steps 36 - QR ..: lane l addresses row 16 w + (l & 7) + 8 ((l >> 3) & 1),
       dims 16 kk + 8 (l >> 4), in the swizzled tile */
    uint32_t qa[4 * (QR > 0 ? QR : 1)];
    const int lane = threadIdx.x & 31, row = 16 * (threadIdx.x >> 5) + (lane & 7) + 8 * ((lane >> 3) & 1);
#pragma unroll
    for (int q = 0; q < QR; q++) {
        const int d = 16 * (36 - QR + q) + 8 * (lane >> 4);
        ak_ldmatrix_x4(base + (d >> 6) * 8192 + row * 128 + ((((d >> 3) & 7) ^ (row & 7)) << 4), qa[4 * q],
                       qa[4 * q + 1], qa[4 * q + 2], qa[4 * q + 3]);
    }
    float s[N / 2];
    for (int k = 0; k < N / 2; k++) s[k] = 0.0f;
    const long long t0 = clock64();
    for (int r = 0; r < reps; r++) {
        const int b = r % NB;
        if (MODE > 0) {
            uint4 *dst = reinterpret_cast<uint4 *>(sm + QB + b * KBYTES);
            for (int c = threadIdx.x; c < KBYTES / 16; c += 128) {
                const uint4 v = dst[c];
                dst[c] = v;
            }
            if (MODE == 1) ak_fence_proxy_async();
            ak_bar_sync(1, 128);
        }
        const uint64_t dq = ak_wgmma_desc_sw128(base, 16, 1024), dk = ak_wgmma_desc_sw128(base + QB + b * KBYTES, 16, 1024);
        ak_wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < 36; kk++) {
            const uint32_t oq = (kk >> 2) * 8192 + (kk & 3) * 32, ok = (kk >> 2) * (N * 128) + (kk & 3) * 32;
            const int acc = DEAD ? kk > 0 : kk > 0 || r > 0;
            if (kk >= 36 - QR) ak_wgmma_m64n32k16_rs(s, qa + 4 * (kk - (36 - QR)), dk + (ok >> 4), acc);
            else if (N == 32) ak_wgmma_m64n32k16_ss<0>(s, dq + (oq >> 4), dk + (ok >> 4), acc);
            else ak_wgmma_m64n64k16_ss(s, dq + (oq >> 4), dk + (ok >> 4), acc);
        }
        ak_wgmma_commit();
        ak_wgmma_wait0();
    }
    const long long t1 = clock64();
    float acc = 0.0f;
    for (int k = 0; k < N / 2; k++) acc += s[k];
    if (threadIdx.x == 0) out[blockIdx.x] = t1 - t0;
    if (acc == 12345.0f) out[1023] = 0;
}

template <int N, int NB, int MODE, bool DEAD, int QR = 0> void run(int sms) {
    enum { SMEM = QB + NB * N * 1152 };
    static const char *what[] = {"plain", "buffer rewritten, fence, barrier", "buffer rewritten, barrier"};
    long long *d, h[256];
    CK(cudaMalloc(&d, 1024 * sizeof(long long)));
    CK(cudaFuncSetAttribute(reuse<N, NB, MODE, DEAD, QR>, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM));
    reuse<N, NB, MODE, DEAD, QR><<<sms, 128, SMEM>>>(d, REPS);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost));
    CK(cudaFree(d));
    double m = 0;
    const int n = sms < 256 ? sms : 256;
    for (int i = 0; i < n; i++) m += (double)h[i];
    const double chain = m / n / REPS;
    printf("m64n%dk16 x36 (%2d register-A), %d K buffer(s), %-33s %s: %6.1f clk per chain, %5.1f B/clk of operands\n",
           N, QR, NB, what[MODE], DEAD ? "chains overwrite (dead)" : "chains accumulate (live)", chain,
           ((36.0 - QR) * (2048 + 32 * N) + QR * 32.0 * N) / chain);
}

int main() {
    int sms = 0;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    run<32, 1, 0, true>(sms);
    run<32, 2, 0, true>(sms);
    run<32, 1, 0, false>(sms);
    run<32, 2, 0, false>(sms);
    run<32, 3, 0, false>(sms);
    run<32, 1, 1, false>(sms);
    run<32, 1, 2, false>(sms);
    run<32, 2, 1, false>(sms);
    run<64, 1, 0, true>(sms);
    run<64, 1, 0, false>(sms);
    run<64, 2, 0, false>(sms);
    run<32, 2, 0, false, 4>(sms);
    run<32, 2, 0, false, 10>(sms);
    run<32, 2, 0, false, 36>(sms);
    return 0;
}
