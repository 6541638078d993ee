/* st_async_check.cu -- does a wgmma read shared memory written by st.async (async-proxy stores that
 * complete as transaction bytes on an mbarrier) in the CTA's own shared memory, without a
 * generic-proxy fence? (Not part of the library: a fact for a producer that
 * loads records into registers and must not wait for its loads in flight at a proxy fence.) The
 * kernel runs as clusters of two CTAs, each writing its own shared memory: without a cluster launch
 * st.async faults (illegal instruction, H200, CUDA 13.0), and with clusters of one it runs but
 * memcheck reports every st.async ("Cluster needs to have at least 2 blocks").
 * Warpgroup 1 writes a 64 x 64 bf16 K tile (128-byte swizzle) with st.async and each thread arrives
 * with expect_tx of its bytes; warpgroup 0 waits on the mbarrier and computes D = A K^T over the
 * first 16 dims with wgmma m64n64k16 (A: ones written by generic stores + fence), so D[m][n] =
 * sum_k K[n][k] (K[n][k] = n % 8 + k / 16). A second launch times rounds of 64 such tiles (512 KB)
 * waited for together: the stores' throughput. Prints PASS / FAIL.
 * build: nvcc -gencode=arch=compute_90a,code=sm_90a -O3 -std=c++17 -Isrc scripts/st_async_check.cu -o st_async_check */
#include "cuda/ptx.cuh"
#include <cstdio>
#include <cstdint>

/* The shared::cluster address of a in this CTA's own shared memory. */
__device__ __forceinline__ uint32_t own_cluster_addr(uint32_t a) {
    uint32_t r, rank;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(a), "r"(rank));
    return r;
}
__device__ __forceinline__ void st_async16(uint32_t dst, uint4 v, uint32_t mbar) {
    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [%0], {%1, %2, %3, %4}, [%5];\n" ::"r"(dst),
                 "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w), "r"(mbar)
                 : "memory");
}

__device__ __forceinline__ uint16_t bf16_of(float f) { return (uint16_t)(__float_as_uint(f) >> 16); }

__global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(256, 1) check(float *out, long long *clk, int rounds, int generic) {
    __shared__ __align__(1024) uint8_t sm[8192 * 2 + 64];
    uint8_t *qa = sm, *kt = sm + 8192;
    const uint32_t bar = ak_smem_addr(sm + 16384);
    const int tid = threadIdx.x, wg = tid >> 7, t = tid & 127;
    if (blockIdx.x > 0) out += 64 * 64, clk += 1;
    if (tid == 0) ak_mbar_init(bar, 128);
    __syncthreads();
    if (wg == 1) {
        /* K[n][d] = n % 8 + d / 16 (exact in bf16), 16-byte chunk c of row n at the swizzled offset */
        uint4 v[4];
        uint32_t dst[4];
        uint4 *gdst[4];
        for (int q = 0; q < 4; q++) {
            const int ch = 4 * t + q, n = ch >> 3, c = ch & 7;
            uint32_t w[4];
            for (int e = 0; e < 4; e++)
                w[e] = (uint32_t)bf16_of((float)(n % 8) + (float)(8 * c + 2 * e) / 16.0f) |
                       (uint32_t)bf16_of((float)(n % 8) + (float)(8 * c + 2 * e + 1) / 16.0f) << 16;
            v[q] = make_uint4(w[0], w[1], w[2], w[3]);
            dst[q] = own_cluster_addr(ak_smem_addr(kt + n * 128 + ((c ^ (n & 7)) << 4)));
            gdst[q] = reinterpret_cast<uint4 *>(kt + n * 128 + ((c ^ (n & 7)) << 4));
        }
        const uint32_t cbar = own_cluster_addr(bar);
        const long long t0 = clock64();
        for (int rd = 0; rd < rounds; rd++) {
            /* a round: 64 x 8 KB (512 KB, within the tx count) before one wait, so its time is the
               stores' throughput; the check (rounds 1) writes the tile once */
            const int reps = rounds > 1 ? 64 : 1;
            if (rd > 0) ak_mbar_wait(bar, (rd - 1) & 1); /* the previous round completed */
            if (generic) { /* the same bytes by st.shared, for comparison */
                for (int rep = 0; rep < reps; rep++)
#pragma unroll
                    for (int q = 0; q < 4; q++)
                        asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(ak_smem_addr(gdst[q])), "r"(v[q].x),
                                     "r"(v[q].y), "r"(v[q].z), "r"(v[q].w)
                                     : "memory");
                ak_mbar_arrive(bar);
                continue;
            }
            ak_mbar_arrive_tx(bar, reps * 4 * 16);
            for (int rep = 0; rep < reps; rep++)
#pragma unroll
                for (int q = 0; q < 4; q++) st_async16(dst[q], v[q], cbar);
        }
        ak_mbar_wait(bar, (rounds - 1) & 1); /* no st.async in flight when the CTA exits */
        if (t == 0) clk[0] = clock64() - t0;
        return;
    }
    if (rounds > 1) return; /* timing run: only the writer */
    for (int k = t; k < 8192 / 4; k += 128) reinterpret_cast<uint32_t *>(qa)[k] = 0x3f803f80u; /* ones */
    ak_fence_proxy_async();
    ak_bar_sync(1, 128);
    ak_mbar_wait(bar, 0);
    float d[32];
    for (int k = 0; k < 32; k++) d[k] = 0.0f;
    const uint64_t da = ak_wgmma_desc_sw128(ak_smem_addr(qa), 16, 1024), db = ak_wgmma_desc_sw128(ak_smem_addr(kt), 16, 1024);
    ak_wgmma_fence();
    ak_wgmma_m64n64k16_ss(d, da, db, 0);
    ak_wgmma_commit();
    ak_wgmma_wait0();
    /* D fragment: d[4 j + 2 h + e] = row 16 warp + lane / 4 + 8 h, column 8 j + 2 (lane % 4) + e */
    const int w = t >> 5, l = t & 31;
    for (int j = 0; j < 8; j++)
        for (int h = 0; h < 2; h++)
            for (int e = 0; e < 2; e++)
                out[(16 * w + l / 4 + 8 * h) * 64 + 8 * j + 2 * (l % 4) + e] = d[4 * j + 2 * h + e];
}

int main() {
    float *dout, h[2 * 64 * 64];
    long long *dclk, hclk = 0;
    cudaMalloc(&dout, sizeof h);
    cudaMalloc(&dclk, 2 * sizeof(long long));
    const int rounds = 100;
    check<<<2, 256>>>(dout, dclk, 1, 0);
    cudaError_t e = cudaDeviceSynchronize();
    cudaMemcpy(h, dout, sizeof h, cudaMemcpyDeviceToHost);
    check<<<2, 256>>>(dout, dclk, rounds, 1);
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
    long long gclk = 0;
    cudaMemcpy(&gclk, dclk, sizeof gclk, cudaMemcpyDeviceToHost);
    check<<<2, 256>>>(dout, dclk, rounds, 0);
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
    cudaMemcpy(&hclk, dclk, sizeof hclk, cudaMemcpyDeviceToHost);
    printf("st.shared (generic): %.1f bytes per clk\n", 524288.0 * rounds / (double)gclk);
    int bad = 0;
    for (int c = 0; c < 2; c++)
        for (int m = 0; m < 64; m++)
            for (int n = 0; n < 64; n++) {
                double ref = 0;
                for (int k = 0; k < 16; k++) ref += (double)(n % 8) + k / 16.0;
                if (h[c * 4096 + m * 64 + n] != (float)ref) bad++;
            }
    printf("st.async -> wgmma: %s (%d of 8192 wrong; %s); %d rounds of 512 KB by 128 threads: %.1f clk per round, "
           "%.1f bytes per clk\n",
           bad ? "FAIL" : "PASS", bad, cudaGetErrorString(e), rounds, (double)hclk / rounds,
           524288.0 * rounds / (double)hclk);
    return bad != 0;
}
