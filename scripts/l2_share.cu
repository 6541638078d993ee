// l2_share.cu -- is the rate at which an SM takes in random 656-byte records from L2 its own limit,
// or its share of L2's? And does a bulk copy multicast to both CTAs of a cluster pair deliver a
// record to two SMs at the cost of one L2 read? The question behind docs/perf.md session 81: the
// small calls (b 1 h_q 128: eight 16-head tiles of one token read the same records) take their
// records at ~24 bytes a clock per SM with every SM asking (session 60); if that is L2's limit
// shared out, pairs of head tiles fed by one multicast copy would take them in faster.
// One CTA of W warps per SM (its shared memory keeps SMs apart); each warp runs STEPS steps of
// KPW records into a ring of NST stages, as a producer does. Plain: lanes < KPW each bulk-copy one
// record. Pair: a cluster of two; lane k < KPW / 2 of rank c copies record c KPW / 2 + k of the
// step into both CTAs (.multicast::cluster, mask 3), so each CTA issues half and receives all; a
// stage is refilled only after both CTAs' warps w have seen it full (each tells the other by a
// remote arrival on its FREE barrier). Prints records landed per 1000 clocks per SM. The burst
// form times one small CTA's records asked for at once (8 warps x 4 steps of 4 records into
// distinct stages, no reuse, so pairs need no hand-back): cycles to each step's landing. The pool
// (8 MB) stays in L2.
// build: nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Isrc scripts/l2_share.cu -o /tmp/l2_share
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <cmath>
#include "cuda/ptx.cuh"
#include "probe.cuh"

enum { REC = 656, STEPS = 512, NST = 2, MAXW = 16, MAXK = 8 };

__device__ __forceinline__ void mc_g2s(uint32_t dst, const void *src, uint32_t bytes, uint32_t bar, uint16_t mask) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1], %2, [%3], %4;\n"
                 ::"r"(dst), "l"(src), "r"(bytes), "r"(bar), "h"(mask)
                 : "memory");
}
__device__ __forceinline__ uint32_t cta_rank() {
    uint32_t r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}
__device__ __forceinline__ void arrive_remote(uint32_t bar, uint32_t rank) {
    uint32_t ra;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(ra) : "r"(bar), "r"(rank));
    asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];" ::"r"(ra) : "memory");
}
__device__ __forceinline__ void wait_cluster(uint32_t bar, uint32_t parity) {
    asm volatile("{\n .reg .pred p;\n W: mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%0], %1;\n"
                 " @!p bra W;\n}\n" ::"r"(bar), "r"(parity)
                 : "memory");
}
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}

/* PAIR 0: plain; PAIR 1: multicast pairs */
template <int PAIR, int KPW>
__global__ void rate(const uint8_t *pool, uint32_t nslots, unsigned long long *cyc) {
    extern __shared__ __align__(128) uint8_t sm[];
    const int w = __shfl_sync(0xffffffffu, (int)threadIdx.x >> 5, 0), lane = threadIdx.x & 31, W = blockDim.x >> 5;
    uint8_t *stage = sm + (size_t)w * NST * MAXK * REC;
    uint64_t *bars = reinterpret_cast<uint64_t *>(sm + (size_t)W * NST * MAXK * REC) + w * 2 * NST; /* FULL[NST], FREE[NST] */
    const uint32_t rank = PAIR ? cta_rank() : 0u, peer = rank ^ 1u;
    const uint32_t grp = PAIR ? blockIdx.x >> 1 : blockIdx.x; /* the pair shares its records */
    if (lane == 0)
        for (int s = 0; s < NST; s++) {
            ak_mbar_init(ak_smem_addr(&bars[s]), 1);
            ak_mbar_init(ak_smem_addr(&bars[NST + s]), 1);
        }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    __syncthreads();
    if (PAIR) cluster_sync();
    const unsigned long long t0 = clock64();
    for (int j = 0; j < STEPS; j++) {
        const int s = j % NST;
        const uint32_t full = ak_smem_addr(&bars[s]), dst = ak_smem_addr(stage + s * MAXK * REC);
        /* the peer has seen this stage full in step j - NST */
        if (PAIR && j >= NST) wait_cluster(ak_smem_addr(&bars[NST + s]), ((j - NST) / NST) & 1);
        if (lane == 0) ak_mbar_arrive_tx(full, KPW * REC);
        const int k = PAIR ? (int)rank * (KPW / 2) + lane : lane;
        const uint32_t slot = probe_hash((grp * MAXW + w) * 65536u + j * MAXK + k) % nslots;
        if (PAIR) {
            if (lane < KPW / 2) mc_g2s(dst + k * REC, pool + (size_t)slot * REC, REC, full, (uint16_t)3);
        } else if (lane < KPW) {
            probe_bulk_g2s(dst + k * REC, pool + (size_t)slot * REC, REC, full);
        }
        if (j > 0) {
            const int sp = (j - 1) % NST;
            ak_mbar_wait(ak_smem_addr(&bars[sp]), ((j - 1) / NST) & 1);
            if (PAIR && lane == 0) arrive_remote(ak_smem_addr(&bars[NST + sp]), peer);
        }
        __syncwarp();
    }
    ak_mbar_wait(ak_smem_addr(&bars[(STEPS - 1) % NST]), ((STEPS - 1) / NST) & 1);
    const unsigned long long t1 = clock64();
    if (lane == 0) cyc[blockIdx.x * MAXW + w] = t1 - t0;
    /* no CTA leaves while its peer may still copy into it or arrive on it */
    if (PAIR) {
        if (lane == 0) arrive_remote(ak_smem_addr(&bars[NST + (STEPS - 1) % NST]), peer);
        __syncthreads();
        cluster_sync();
    }
}

/* A launch of ctas CTAs of W warps, one per SM (200 KB of shared memory each), in clusters of two
   where pair; `at` holds the cluster attribute the configuration points to. */
static cudaLaunchConfig_t launch_cfg(const void *fn, int ctas, int W, int pair, cudaLaunchAttribute *at) {
    const size_t smem = 200 * 1024;
    CK(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(ctas);
    cfg.blockDim = dim3(32 * W);
    cfg.dynamicSmemBytes = smem;
    at->id = cudaLaunchAttributeClusterDimension;
    at->val.clusterDim.x = pair ? 2 : 1;
    at->val.clusterDim.y = 1;
    at->val.clusterDim.z = 1;
    cfg.attrs = at;
    cfg.numAttrs = 1;
    return cfg;
}

/* One small CTA's records at once (the two-tile CTA of the small calls, x262's form): each of W
   warps issues STEPS_B steps of KPW records into distinct stages (no reuse, so a pair needs no
   hand-back), then waits for each step; cyc gets the cycles from the start to each step's landing
   (warp 0). PAIR: each CTA issues half of every step, multicast to both. */
enum { STEPS_B = 4 };
template <int PAIR, int KPW>
__global__ void burst(const uint8_t *pool, uint32_t nslots, uint32_t salt, unsigned long long *cyc) {
    extern __shared__ __align__(128) uint8_t sm[];
    const int w = __shfl_sync(0xffffffffu, (int)threadIdx.x >> 5, 0), lane = threadIdx.x & 31, W = blockDim.x >> 5;
    uint8_t *stage = sm + (size_t)w * STEPS_B * KPW * REC;
    uint64_t *bars = reinterpret_cast<uint64_t *>(sm + (size_t)W * STEPS_B * KPW * REC) + w * STEPS_B;
    const uint32_t rank = PAIR ? cta_rank() : 0u;
    const uint32_t grp = PAIR ? blockIdx.x >> 1 : blockIdx.x;
    if (lane == 0)
        for (int s = 0; s < STEPS_B; s++) ak_mbar_init(ak_smem_addr(&bars[s]), 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    __syncthreads();
    if (PAIR) cluster_sync();
    const unsigned long long t0 = clock64();
    for (int j = 0; j < STEPS_B; j++) {
        const uint32_t full = ak_smem_addr(&bars[j]), dst = ak_smem_addr(stage + j * KPW * REC);
        if (lane == 0) ak_mbar_arrive_tx(full, KPW * REC);
        const int k = PAIR ? (int)rank * (KPW / 2) + lane : lane;
        const uint32_t slot = probe_hash(salt + (grp * MAXW + w) * 65536u + j * MAXK + k) % nslots;
        if (PAIR) {
            if (lane < KPW / 2) mc_g2s(dst + k * REC, pool + (size_t)slot * REC, REC, full, (uint16_t)3);
        } else if (lane < KPW) {
            probe_bulk_g2s(dst + k * REC, pool + (size_t)slot * REC, REC, full);
        }
    }
    for (int j = 0; j < STEPS_B; j++) {
        ak_mbar_wait(ak_smem_addr(&bars[j]), 0);
        if (lane == 0) cyc[(blockIdx.x * MAXW + w) * STEPS_B + j] = clock64() - t0;
    }
    __syncthreads();
    if (PAIR) cluster_sync();
}

template <int PAIR, int KPW>
static void run_burst(const uint8_t *pool, uint32_t nslots, int ctas, int W, unsigned long long *cyc) {
    cudaLaunchAttribute at;
    const cudaLaunchConfig_t cfg = launch_cfg((const void *)burst<PAIR, KPW>, ctas, W, PAIR, &at);
    static unsigned long long h[132 * MAXW * STEPS_B];
    double acc[STEPS_B] = {0}, mx = 0;
    const int reps = 20;
    for (int rep = 0; rep < reps; rep++) {
        CK(cudaLaunchKernelEx(&cfg, burst<PAIR, KPW>, pool, nslots, (uint32_t)rep * 7919u, cyc));
        CK(cudaGetLastError());
        CK(cudaDeviceSynchronize());
        CK(cudaMemcpy(h, cyc, sizeof(h), cudaMemcpyDeviceToHost));
        double m = 0;
        for (int b = 0; b < ctas; b++)
            for (int w = 0; w < W; w++) {
                for (int j = 0; j < STEPS_B; j++) acc[j] += (double)h[(b * MAXW + w) * STEPS_B + j];
                m = fmax(m, (double)h[(b * MAXW + w) * STEPS_B + STEPS_B - 1]);
            }
        mx += m;
    }
    printf("burst %-5s %3d CTAs W %d KPW %d (%d records a CTA): steps landed at", PAIR ? "pair" : "plain", ctas, W, KPW,
           W * KPW * STEPS_B);
    for (int j = 0; j < STEPS_B; j++) printf(" %6.0f", acc[j] / (reps * ctas * W));
    printf(" clk (mean), last of all warps %6.0f\n", mx / reps);
}

template <int PAIR, int KPW>
static void run(const uint8_t *pool, uint32_t nslots, int ctas, int W, unsigned long long *cyc) {
    cudaLaunchAttribute at;
    const cudaLaunchConfig_t cfg = launch_cfg((const void *)rate<PAIR, KPW>, ctas, W, PAIR, &at);
    for (int rep = 0; rep < 3; rep++) {
        CK(cudaLaunchKernelEx(&cfg, rate<PAIR, KPW>, pool, nslots, cyc));
        CK(cudaGetLastError());
        CK(cudaDeviceSynchronize());
    }
    static unsigned long long h[132 * MAXW];
    CK(cudaMemcpy(h, cyc, sizeof(h), cudaMemcpyDeviceToHost));
    double c = 0;
    for (int b = 0; b < ctas; b++)
        for (int w = 0; w < W; w++) c += (double)h[b * MAXW + w];
    c /= ctas * W;
    const double rate_k = 1000.0 * W * KPW * STEPS / c;
    printf("%-5s %3d CTAs W %2d KPW %d: %6.1f records / 1000 clk / SM (%5.1f B/clk), L2 reads %5.1f B/clk/SM\n",
           PAIR ? "pair" : "plain", ctas, W, KPW, rate_k, rate_k * REC / 1000.0, rate_k * REC / 1000.0 / (PAIR ? 2 : 1));
}

int main() {
    const int sms = probe_sms("l2_share");
    const size_t bytes = (size_t)8 << 20;
    uint8_t *pool;
    CK(cudaMalloc(&pool, bytes));
    CK(cudaMemset(pool, 0x5a, bytes));
    const uint32_t ns = (uint32_t)(bytes / REC);
    unsigned long long *cyc;
    CK(cudaMalloc(&cyc, sizeof(unsigned long long) * 132 * MAXW * STEPS_B));
    const int full = sms & ~1;
    /* the small calls' CTA: 128 records, 8 warps of 4 keys a half-unit, 128 CTAs */
    for (int rep = 0; rep < 2; rep++) {
        run_burst<0, 4>(pool, ns, 128, 8, cyc);
        run_burst<1, 4>(pool, ns, 128, 8, cyc);
        run_burst<0, 4>(pool, ns, 64, 8, cyc);
        run_burst<1, 8>(pool, ns, 128, 8, cyc);
    }
    for (int W : {8, 16}) {
        for (int ctas : {full, full / 2, full / 4, 16}) {
            run<0, 4>(pool, ns, ctas, W, cyc);
            run<0, 8>(pool, ns, ctas, W, cyc);
        }
        for (int ctas : {full, full / 2}) {
            run<1, 4>(pool, ns, ctas & ~1, W, cyc);
            run<1, 8>(pool, ns, ctas & ~1, W, cyc);
        }
    }
    return 0;
}
