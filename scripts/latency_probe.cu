/* latency_probe.cu -- what one dependent global load costs at the start of a small kernel inside a
 * replayed CUDA graph (not part of the library). The small-batch sparse decode calls spend ~1.7 us
 * on their first round trip (slot ids, Q) and ~1.3 us on the records' (session 24's timelines),
 * several times an L2 hit. Each case: a graph of 20 calls of a 128-CTA, 256-thread kernel
 * launched as a programmatic dependent launch (as the library launches), replayed after warm-up;
 * thread 0 of each CTA stamps %globaltimer after the dependency wait and after each of 8
 * dependent loads from an 8 MB buffer that every call reads (L2-resident); the medians over the
 * CTAs of the last call are printed.
 *   mode 0  thread 0 alone loads (ld.global)
 *   mode 1  every thread loads 16 bytes of a different line each step (ld.global.nc.v4), thread
 *           0's value chains the next addresses (a Q- or slot-id-like burst per step)
 *   mode 2  mode 0 with ld.global.cg (L2 only)
 * build: nvcc -gencode=arch=compute_90a,code=sm_90a -O3 -std=c++17 scripts/latency_probe.cu -o latency_probe */
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <vector>
#include <cuda_runtime.h>

#include "probe.cuh"

#define STEPS 8
#define WORDS (2u << 20) /* 8 MB of uint32 */


__global__ void __launch_bounds__(256, 1) k_chain(const unsigned *buf, unsigned long long *st, int mode, unsigned *sink) {
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    __shared__ unsigned bx;
    unsigned long long t[STEPS + 1];
    t[0] = gt();
    unsigned x = blockIdx.x * 7919u, acc = 0;
    for (int k = 0; k < STEPS; k++) {
        if (mode == 1) {
            const unsigned w = (x * 2654435761u + threadIdx.x * 40503u) % (WORDS / 4) * 4;
            uint4 v;
            asm volatile("ld.global.nc.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(buf + w));
            acc += v.y;
            if (threadIdx.x == 0) bx = v.x; /* thread 0's value decides the next addresses */
            __syncthreads();                /* every load of the step has landed */
            x = bx;
            __syncthreads();
        } else if (threadIdx.x == 0) {
            const unsigned *a = buf + (x * 2654435761u) % WORDS;
            if (mode == 2) asm volatile("ld.global.cg.u32 %0, [%1];" : "=r"(x) : "l"(a));
            else asm volatile("ld.global.u32 %0, [%1];" : "=r"(x) : "l"(a));
        }
        t[k + 1] = gt();
    }
    if (threadIdx.x == 0) {
        for (int k = 0; k <= STEPS; k++) st[blockIdx.x * (STEPS + 1) + k] = t[k];
        sink[blockIdx.x] = x + acc;
    }
}

int main() {
    unsigned *buf, *sink;
    unsigned long long *st;
    CK(cudaMalloc(&buf, WORDS * 4ull));
    CK(cudaMalloc(&sink, 4096));
    CK(cudaMalloc(&st, 128 * (STEPS + 1) * 8));
    std::vector<unsigned> h(WORDS);
    srand(1);
    for (auto &v : h) v = (unsigned)rand();
    CK(cudaMemcpy(buf, h.data(), WORDS * 4ull, cudaMemcpyHostToDevice));
    cudaStream_t s;
    CK(cudaStreamCreate(&s));
    for (int mode = 0; mode < 3; mode++) {
        cudaLaunchAttribute at[1];
        at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        at[0].val.programmaticStreamSerializationAllowed = 1;
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = 128;
        cfg.blockDim = 256;
        cfg.stream = s;
        cfg.attrs = at;
        cfg.numAttrs = 1;
        cudaGraph_t g;
        cudaGraphExec_t ge;
        CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
        for (int c = 0; c < 20; c++) CK(cudaLaunchKernelEx(&cfg, k_chain, (const unsigned *)buf, st, mode, sink));
        CK(cudaStreamEndCapture(s, &g));
        CK(cudaGraphInstantiate(&ge, g, 0));
        for (int r = 0; r < 5; r++) CK(cudaGraphLaunch(ge, s));
        cudaEvent_t a, b;
        CK(cudaEventCreate(&a));
        CK(cudaEventCreate(&b));
        CK(cudaEventRecord(a, s));
        for (int r = 0; r < 20; r++) CK(cudaGraphLaunch(ge, s));
        CK(cudaEventRecord(b, s));
        CK(cudaStreamSynchronize(s));
        float ms;
        CK(cudaEventElapsedTime(&ms, a, b));
        std::vector<unsigned long long> t(128 * (STEPS + 1));
        CK(cudaMemcpy(t.data(), st, t.size() * 8, cudaMemcpyDeviceToHost));
        printf("mode %d: %.2f us per call; per step (median over CTAs, ns):", mode, ms * 1e3 / 400);
        for (int k = 0; k < STEPS; k++) {
            std::vector<double> d;
            for (int c = 0; c < 128; c++) d.push_back((double)(t[c * (STEPS + 1) + k + 1] - t[c * (STEPS + 1) + k]));
            std::sort(d.begin(), d.end());
            printf(" %.0f", d[64]);
        }
        printf("\n");
        CK(cudaGraphExecDestroy(ge));
        CK(cudaGraphDestroy(g));
    }
    return 0;
}
