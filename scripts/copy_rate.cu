// copy_rate.cu -- how many 656-byte records at random slots can one SM move into shared memory per
// cycle, by bulk copy (the sparse decode producers' way: each of a warp's KPW lanes issues one
// cp.async.bulk of its record, completing on the stage's mbarrier) or by 16-byte cp.async chunks
// spread over the warp's lanes (each instruction one record's 512 contiguous bytes)? And what does
// a warp's copy call cost? The question behind docs/perf.md session 18: the producers' copy call
// takes ~110-150 cycles per record; is that the warp's issue loop or the SM's copy engine?
// One CTA of W warps per SM; each warp runs STEPS steps of KPW records into a ring of two stages
// (step j issues its copies, then waits for step j - 1's), as a producer does. The pool is either
// L2-resident (8 MB) or DRAM-sized (2 GiB). Prints records per 1000 cycles per SM and the cycles a
// warp spends in its copy call per step. V 3 (session 38) asks whether a tensor-map copy
// (cp.async.bulk.tensor, one 656-byte row of a 2D map over the pool per lane) issues faster than
// the plain bulk copy, whose issue the producers' copy call is made of.
// build: nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Isrc scripts/copy_rate.cu -o /tmp/copy_rate
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <cuda.h>
#include <cudaTypedefs.h>
#include "cuda/ptx.cuh"
#include "probe.cuh"

enum { REC = 656, RECT = 768 /* a stage row of V 3: tensor copies land on 128-byte boundaries */,
       STEPS = 512, NST = 2, MAXW = 16, MAXK = 8 };

/* Row `row` of the 2D tensor map (164 u32 x slots, one 656-byte record per row) into dst. */
__device__ __forceinline__ void tma_row(uint32_t dst, const CUtensorMap *map, int row, uint32_t bar) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
                 ::"r"(dst), "l"((uint64_t)map), "r"(0), "r"(row), "r"(bar)
                 : "memory");
}

/* V 0: bulk copy per lane (lanes < KPW); V 1: 16-byte cp.async chunks, lane l chunks l and 32 + l
   (l < 9) of each record, then one noinc arrival per lane on the stage mbarrier; V 2: the lanes'
   record addresses gathered by shuffles and all KPW bulk copies issued by lane 0 in straight-line
   code (no per-lane issue loop); V 3: lane k < KPW copies its record with a tensor-map copy */
template <int V, int KPW>
__global__ void rate(const uint8_t *pool, uint32_t nslots, unsigned long long *cyc, unsigned long long *icyc,
                     const __grid_constant__ CUtensorMap map) {
    enum { RS = V == 3 ? RECT : REC };
    extern __shared__ __align__(128) uint8_t sm[];
    /* the warp index by shuffle: warp-uniform to the compiler, so the stage and mbarrier addresses
       stay in uniform registers (V 2 then issues its copies with no per-lane loop) */
    const int w = __shfl_sync(0xffffffffu, (int)threadIdx.x >> 5, 0), lane = threadIdx.x & 31, W = blockDim.x >> 5;
    uint8_t *stage = sm + (size_t)w * NST * MAXK * RS;
    uint64_t *bars = reinterpret_cast<uint64_t *>(sm + (size_t)W * NST * MAXK * RS) + w * NST;
    if (lane == 0)
        for (int s = 0; s < NST; s++) ak_mbar_init(ak_smem_addr(&bars[s]), V == 1 ? 32 : 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    __syncthreads();
    unsigned long long ic = 0;
    const unsigned long long t0 = clock64();
    for (int j = 0; j < STEPS; j++) {
        const int s = j % NST;
        const uint32_t bar = ak_smem_addr(&bars[s]);
        const uint32_t dst = ak_smem_addr(stage + s * MAXK * RS);
        const unsigned long long a = clock64();
        if (V == 0) {
            const uint32_t slot = probe_hash((blockIdx.x * MAXW + w) * 65536u + j * MAXK + lane) % nslots;
            if (lane == 0) ak_mbar_arrive_tx(bar, KPW * REC);
            if (lane < KPW) probe_bulk_g2s(dst + lane * REC, pool + (size_t)slot * REC, REC, bar);
        } else if (V == 3) {
            const uint32_t slot = probe_hash((blockIdx.x * MAXW + w) * 65536u + j * MAXK + lane) % nslots;
            if (lane == 0) ak_mbar_arrive_tx(bar, KPW * REC);
            if (lane < KPW) tma_row(dst + lane * RECT, &map, (int)slot, bar);
        } else if (V == 2) {
            const uint32_t slot = probe_hash((blockIdx.x * MAXW + w) * 65536u + j * MAXK + lane) % nslots;
            const uint64_t src = (uint64_t)(pool + (size_t)slot * REC);
            uint64_t sk[KPW];
#pragma unroll
            for (int k = 0; k < KPW; k++) sk[k] = __shfl_sync(0xffffffffu, src, k);
            if (lane == 0) {
                ak_mbar_arrive_tx(bar, KPW * REC);
#pragma unroll
                for (int k = 0; k < KPW; k++) probe_bulk_g2s(dst + k * REC, (const void *)sk[k], REC, bar);
            }
        } else {
#pragma unroll
            for (int k = 0; k < KPW; k++) {
                const uint32_t slot = probe_hash((blockIdx.x * MAXW + w) * 65536u + j * MAXK + k) % nslots;
                const uint8_t *src = pool + (size_t)slot * REC;
                ak_cp_async16(dst + k * REC + 16 * lane, src + 16 * lane, 16);
                if (lane < 9) ak_cp_async16(dst + k * REC + 512 + 16 * lane, src + 512 + 16 * lane, 16);
            }
            ak_cp_async_mbar_arrive(bar);
        }
        ic += clock64() - a;
        if (j > 0) ak_mbar_wait(ak_smem_addr(&bars[(j - 1) % NST]), ((j - 1) / NST) & 1);
        __syncwarp();
    }
    ak_mbar_wait(ak_smem_addr(&bars[(STEPS - 1) % NST]), ((STEPS - 1) / NST) & 1);
    const unsigned long long t1 = clock64();
    if (lane == 0) {
        cyc[blockIdx.x * MAXW + w] = t1 - t0;
        icyc[blockIdx.x * MAXW + w] = ic;
    }
}

template <int V, int KPW>
static void run(const char *pool_name, const uint8_t *pool, uint32_t nslots, int sms, int W, unsigned long long *cyc,
                unsigned long long *icyc, const CUtensorMap &map) {
    const size_t smem = (size_t)W * NST * MAXK * (V == 3 ? RECT : REC) + W * NST * 8;
    CK(cudaFuncSetAttribute(rate<V, KPW>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    for (int rep = 0; rep < 2; rep++) {
        rate<V, KPW><<<sms, 32 * W, smem>>>(pool, nslots, cyc, icyc, map);
        CK(cudaGetLastError());
        CK(cudaDeviceSynchronize());
    }
    static unsigned long long h[132 * MAXW], hi[132 * MAXW];
    CK(cudaMemcpy(h, cyc, sizeof(h), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(hi, icyc, sizeof(hi), cudaMemcpyDeviceToHost));
    double c = 0, ci = 0;
    for (int b = 0; b < sms; b++)
        for (int w = 0; w < W; w++) c += (double)h[b * MAXW + w], ci += (double)hi[b * MAXW + w];
    c /= sms * W, ci /= sms * W;
    printf("%-6s %-9s W %2d KPW %d: %6.1f records / 1000 clk / SM, %5.1f clk per record per warp, copy call %6.1f clk "
           "per step\n", pool_name, V == 0 ? "bulk" : V == 2 ? "bulk lane0" : V == 3 ? "tensor" : "cp.async", W, KPW, 1000.0 * W * KPW * STEPS / c,
           c / (KPW * STEPS), ci / STEPS);
}

int main() {
    const int sms = probe_sms("copy_rate");
    const size_t big = (size_t)2 << 30, small = (size_t)8 << 20;
    uint8_t *pool;
    CK(cudaMalloc(&pool, big));
    CK(cudaMemset(pool, 0x5a, big));
    unsigned long long *cyc, *icyc;
    CK(cudaMalloc(&cyc, sizeof(unsigned long long) * 132 * MAXW));
    CK(cudaMalloc(&icyc, sizeof(unsigned long long) * 132 * MAXW));
    /* the driver's tensor-map encoder through the runtime (no libcuda link) */
    PFN_cuTensorMapEncodeTiled_v12000 encode = nullptr;
    cudaDriverEntryPointQueryResult q;
    CK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", (void **)&encode, 12000, cudaEnableDefault, &q));
    if (q != cudaDriverEntryPointSuccess || encode == nullptr) {
        fprintf(stderr, "cuTensorMapEncodeTiled not found\n");
        return 1;
    }
    const struct { const char *n; size_t bytes; } pools[] = {{"L2", small}, {"DRAM", big}};
    for (auto &pp : pools) {
        const uint32_t ns = (uint32_t)(pp.bytes / REC);
        CUtensorMap map;
        const cuuint64_t dim[2] = {REC / 4, ns}, stride[1] = {REC};
        const cuuint32_t box[2] = {REC / 4, 1}, estr[2] = {1, 1};
        if (encode(&map, CU_TENSOR_MAP_DATA_TYPE_UINT32, 2, pool, dim, stride, box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE,
                   CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) !=
            CUDA_SUCCESS) {
            fprintf(stderr, "cuTensorMapEncodeTiled failed\n");
            return 1;
        }
        for (int W : {4, 8, 16}) {
            run<0, 4>(pp.n, pool, ns, sms, W, cyc, icyc, map);
            run<0, 8>(pp.n, pool, ns, sms, W, cyc, icyc, map);
            run<1, 4>(pp.n, pool, ns, sms, W, cyc, icyc, map);
            run<1, 8>(pp.n, pool, ns, sms, W, cyc, icyc, map);
            run<2, 4>(pp.n, pool, ns, sms, W, cyc, icyc, map);
            run<2, 8>(pp.n, pool, ns, sms, W, cyc, icyc, map);
            run<3, 4>(pp.n, pool, ns, sms, W, cyc, icyc, map);
            run<3, 8>(pp.n, pool, ns, sms, W, cyc, icyc, map);
        }
    }
    return 0;
}
