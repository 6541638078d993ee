/* probe.cuh -- what the standalone device probes in scripts/ share (not part of the library): a
   checked CUDA call that ends the probe, the global nanosecond timer, operand fill, a pool of
   random 656-byte records and two background-warp helpers (an FMA spin, a warpgroup's stop test). */
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cuda_runtime.h>

#define CK(x)                                                                                      \
    do {                                                                                           \
        cudaError_t e_ = (x);                                                                      \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));     \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

__device__ __forceinline__ unsigned long long gt() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)::"memory");
    return t;
}

/* Word k of an operand buffer: random bf16 pairs (|v| in [2^-7, 2), random signs and mantissas), or
   a constant. */
__device__ __forceinline__ uint32_t fill(int k, bool rnd) {
    if (!rnd) return 0x3c003c00u;
    uint32_t h = 2654435761u * (uint32_t)(k + 1);
    h ^= h >> 15, h *= 2246822519u, h ^= h >> 13;
    const uint32_t lo = ((h & 1u) << 15) | ((0x78u + ((h >> 1) & 7u)) << 7) | ((h >> 4) & 0x7fu);
    const uint32_t hi = ((h >> 11 & 1u) << 15) | ((0x78u + ((h >> 12) & 7u)) << 7) | ((h >> 15) & 0x7fu);
    return lo | (hi << 16);
}

/* Register FMAs in eight independent chains until *done reaches n (at most 2^22 rounds of 32): a
   background that takes issue slots and nothing else from the warps beside it. Returns the rounds;
   acc keeps the chains live. */
__device__ __forceinline__ unsigned long long probe_fma_until(const volatile int *done, int n, int seed,
                                                              unsigned long long &acc) {
    float f[8];
#pragma unroll
    for (int u = 0; u < 8; u++) f[u] = (float)(seed + u);
    unsigned long long rounds = 0;
    while (*done < n && rounds < (1u << 22)) {
#pragma unroll
        for (int r = 0; r < 4; r++)
#pragma unroll
            for (int u = 0; u < 8; u++) f[u] = fmaf(f[u], 0.999f, 0.5f);
        rounds++;
    }
#pragma unroll
    for (int u = 0; u < 8; u++) acc += __float_as_uint(f[u]);
    return rounds;
}

/* A background warpgroup's loop test (named barrier 1, 128 threads): whether *done has reached n or
   the warpgroup has run 2^20 rounds, decided by its thread 0 and read by all through done[1], since
   the warpgroup's wgmma are collective and must all stop together. */
__device__ __forceinline__ bool probe_wg_stop(volatile int *done, int n, unsigned long long rounds, int wt) {
    if (wt == 0) done[1] = done[0] >= n || rounds >= (1u << 20);
    asm volatile("bar.sync 1, 128;" ::: "memory");
    const bool st = done[1] != 0;
    asm volatile("bar.sync 1, 128;" ::: "memory");
    return st;
}

/* A 32-bit mix for random record slots. */
__host__ __device__ __forceinline__ uint32_t probe_hash(uint32_t x) {
    x ^= x >> 16; x *= 0x7feb352du; x ^= x >> 15; x *= 0x846ca68bu; x ^= x >> 16;
    return x;
}

/* The plain bulk copy global -> shared completing on mbarrier `bar` (no L2 policy), as the sparse
   decode producers issued it before x123 added one (the same issue loop). */
__device__ __forceinline__ void probe_bulk_g2s(uint32_t dst, const void *src, uint32_t bytes, uint32_t bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
                 "l"(src), "r"(bytes), "r"(bar)
                 : "memory");
}

/* A launch configuration on stream s, grid x block threads with no dynamic shared memory, as a
   programmatic dependent launch where pdl (the attribute kept in *at). */
static inline cudaLaunchConfig_t probe_launch_cfg(cudaStream_t s, unsigned grid, unsigned block, cudaLaunchAttribute *at,
                                                  bool pdl) {
    at->id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at->val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(grid);
    cfg.blockDim = dim3(block);
    cfg.stream = s;
    cfg.attrs = at;
    cfg.numAttrs = pdl ? 1 : 0;
    return cfg;
}

/* The median microseconds per call of graph g, `calls` calls captured: instantiated, replayed 3
   times to warm up, then 50 times, each replay timed by events (targets.md 5.0); g is destroyed. */
static inline float probe_graph_median(cudaStream_t s, cudaGraph_t g, int calls) {
    cudaGraphExec_t ge;
    CK(cudaGraphInstantiate(&ge, g, 0));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    for (int w = 0; w < 3; w++) CK(cudaGraphLaunch(ge, s));
    std::vector<float> t;
    for (int r = 0; r < 50; r++) {
        CK(cudaEventRecord(e0, s));
        CK(cudaGraphLaunch(ge, s));
        CK(cudaEventRecord(e1, s));
        CK(cudaEventSynchronize(e1));
        float ms;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        t.push_back(ms * 1000.0f / (float)calls);
    }
    std::sort(t.begin(), t.end());
    CK(cudaGraphExecDestroy(ge));
    CK(cudaGraphDestroy(g));
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    return t[t.size() / 2];
}

/* A non-blocking stream for a probe's graphs, and n ints of zeroed device memory in *o. */
static inline cudaStream_t probe_stream_zeros(int **o, size_t n) {
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CK(cudaMalloc(o, n * sizeof(int)));
    CK(cudaMemset(*o, 0, n * sizeof(int)));
    return s;
}

/* Device 0's SM count, at most 132 (the probes' per-SM arrays), with its name printed after `what`. */
static inline int probe_sms(const char *what) {
    int sms = 0;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    if (sms > 132) sms = 132;
    cudaDeviceProp pr;
    CK(cudaGetDeviceProperties(&pr, 0));
    printf("%s on %s, %d SMs\n", what, pr.name, sms);
    return sms;
}

/* Word k of a pool of 656-byte DSA_FP8_BLOCKSCALE records (word k % 164 of its record): e4m3 bytes
   without NaN, four block scales in [2^-7, 2^-6), bf16 RoPE. */
__device__ __forceinline__ uint32_t probe_rec656_word(uint32_t k, uint32_t salt) {
    const uint32_t h = probe_hash(k * 2654435761u + salt);
    const uint32_t off = (k % (656 / 4)) * 4;
    if (off >= 512 && off < 528) return 0x3c000000u | (h & 0x007fffffu);
    if (off >= 528) return fill((int)h, true);
    return h & 0xf6f6f6f6u; /* exponent field below 15: no NaN */
}

__global__ void probe_fill_rec656(uint32_t *pool, int64_t words) {
    for (int64_t k = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; k < words; k += (int64_t)gridDim.x * blockDim.x)
        pool[k] = probe_rec656_word((uint32_t)k, 7u);
}

/* A device pool of nrec such records. */
static inline uint8_t *probe_pool656(int64_t nrec) {
    uint8_t *pool;
    CK(cudaMalloc(&pool, (size_t)nrec * 656));
    probe_fill_rec656<<<1024, 256>>>(reinterpret_cast<uint32_t *>(pool), nrec * 656 / 4);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    return pool;
}
