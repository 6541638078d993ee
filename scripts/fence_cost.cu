// fence_cost.cu -- does a thread's proxy fence or mbarrier arrival wait for its own global loads in
// flight? The question behind a register-loading producer that loads tile j + 1 while it writes
// tile j to shared memory for wgmma (docs/perf.md x23, x40, session 15). Each thread issues NL
// 16-byte loads that miss L2 (each warp instruction a random 512-byte block of a 2 GiB buffer), then
// stamps clock64 around X, then uses the loaded values; X is one 16-byte shared store followed by
// one of: nothing; the bidirectional proxy fence; the one-way release proxy fence restricted to
// shared memory; an mbarrier arrival (release, CTA scope); fence.acq_rel.cta; a named barrier; the
// proxy fence and an arrival (a producer's hand-off). The same with the loads consumed before the
// stamps is the control. Prints the median cycles of X per variant.
// build: nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a scripts/fence_cost.cu -o /tmp/fence_cost
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <vector>
#include <algorithm>
#include "probe.cuh"

enum { NL = 8, THREADS = 128 };

__device__ __forceinline__ uint4 ldg_nc(const void *p) {
    uint4 v;
    asm volatile("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}
__device__ __forceinline__ uint64_t clk() {
    uint64_t c;
    asm volatile("mov.u64 %0, %%clock64;" : "=l"(c)::"memory");
    return c;
}

template <int X, bool CONSUME_FIRST>
__global__ void __launch_bounds__(THREADS) probe(const uint8_t *buf, uint32_t blocks512, uint32_t seed, uint32_t *sink,
                                                 uint32_t *cyc) {
    __shared__ __align__(16) uint8_t sm[THREADS * 16];
    __shared__ __align__(8) uint64_t bar;
    if (threadIdx.x == 0) asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"((uint32_t)__cvta_generic_to_shared(&bar)), "r"(THREADS));
    __syncthreads();
    /* each warp load instruction reads one random 512-byte block (4 lines, as a producer warp
       reads a record): few enough misses in flight that the load queue never backs up */
    uint32_t h = seed ^ (blockIdx.x * 0x9e3779b9u) ^ ((threadIdx.x >> 5) * 0x85ebca6bu);
    uint4 v[NL];
#pragma unroll
    for (int k = 0; k < NL; k++) {
        h = h * 1664525u + 1013904223u;
        v[k] = ldg_nc(buf + (uint64_t)(h & (blocks512 - 1)) * 512 + 16 * (threadIdx.x & 31));
    }
    uint32_t acc = 0;
    if (CONSUME_FIRST) {
#pragma unroll
        for (int k = 0; k < NL; k++) acc += v[k].x ^ v[k].y ^ v[k].z ^ v[k].w;
        asm volatile("" ::"r"(acc) : "memory"); /* the sum (and so every load) completes before t0 */
    }
    const uint32_t sa = (uint32_t)__cvta_generic_to_shared(sm + threadIdx.x * 16);
    const uint64_t t0 = clk();
    asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" ::"r"(sa), "r"(1u), "r"(2u), "r"(3u), "r"(acc) : "memory");
    if (X == 1) asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    if (X == 2) asm volatile("fence.proxy.async::generic.release.sync_restrict::shared::cta.cluster;" ::: "memory");
    if (X == 3) {
        uint64_t st;
        asm volatile("mbarrier.arrive.shared::cta.b64 %0, [%1];" : "=l"(st) : "r"((uint32_t)__cvta_generic_to_shared(&bar)) : "memory");
    }
    if (X == 4) asm volatile("fence.acq_rel.cta;" ::: "memory");
    if (X == 5) asm volatile("bar.sync 1, %0;" ::"r"(THREADS) : "memory");
    if (X == 6) {
        uint64_t st;
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        asm volatile("mbarrier.arrive.shared::cta.b64 %0, [%1];" : "=l"(st) : "r"((uint32_t)__cvta_generic_to_shared(&bar)) : "memory");
    }
    const uint64_t t1 = clk();
    if (!CONSUME_FIRST) {
#pragma unroll
        for (int k = 0; k < NL; k++) acc += v[k].x ^ v[k].y ^ v[k].z ^ v[k].w;
    }
    sink[blockIdx.x * THREADS + threadIdx.x] = acc + sm[(threadIdx.x * 16 + 5) % (THREADS * 16)];
    cyc[blockIdx.x * THREADS + threadIdx.x] = (uint32_t)(t1 - t0);
}

int main() {
    const size_t bytes = (size_t)2 << 30;
    uint8_t *buf;
    uint32_t *sink, *cyc;
    int sms;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    CK(cudaMalloc(&buf, bytes));
    CK(cudaMemset(buf, 1, bytes));
    const int blocks = sms; /* one block per SM: each thread's loads are its own */
    CK(cudaMalloc(&sink, blocks * THREADS * 4));
    CK(cudaMalloc(&cyc, blocks * THREADS * 4));
    std::vector<uint32_t> h(blocks * THREADS);
    const char *names[] = {"st.shared only", "st.shared + fence.proxy.async.shared::cta",
                           "st.shared + fence.proxy.async::generic.release (shared)",
                           "st.shared + mbarrier.arrive (release.cta)", "st.shared + fence.acq_rel.cta",
                           "st.shared + bar.sync", "st.shared + fence.proxy.async + mbarrier.arrive"};
#define RUN(X, CF)                                                                                           \
    {                                                                                                        \
        std::vector<uint32_t> med;                                                                           \
        for (int rep = 0; rep < 15; rep++) { /* new random lines each time: cold in L2 */                  \
            probe<X, CF><<<blocks, THREADS>>>(buf, (uint32_t)(bytes / 512), 1234u + rep * 77u, sink, cyc);             \
            CK(cudaGetLastError());                                                                          \
            CK(cudaMemcpy(h.data(), cyc, h.size() * 4, cudaMemcpyDeviceToHost));                            \
            std::sort(h.begin(), h.end());                                                                   \
            med.push_back(h[h.size() / 2]);                                                                  \
        }                                                                                                    \
        std::sort(med.begin(), med.end());                                                                   \
        printf("%-58s loads %-13s: median %6u cycles\n", names[X], CF ? "consumed" : "in flight", med[med.size() / 2]); \
    }
    RUN(0, false) RUN(1, false) RUN(2, false) RUN(3, false) RUN(4, false) RUN(5, false) RUN(6, false)
    RUN(0, true) RUN(1, true) RUN(2, true) RUN(3, true) RUN(4, true) RUN(5, true) RUN(6, true)
    return 0;
}
