/* launch_gap.cu -- what a kernel boundary costs inside a replayed CUDA graph (not part of the
 * library): the small-batch sparse decode shapes are two kernels per call (main + combine), so
 * their fixed cost is partly the boundary. Each case is a graph of 20 calls, replayed 50 times
 * after 3 warm-ups; the median per call is printed.
 *   empty      one 1-CTA empty kernel per call
 *   big        a 128-CTA kernel with 200 KB of dynamic shared memory that spins SPIN_NS
 *   big+small  big, then a 128-CTA, 128-thread kernel (no dynamic shared memory) that spins 1 us
 *   +carveout  the same with the small kernel's preferred carveout at 100% shared memory
 *   +pdl       the same with the small kernel launched as a programmatic dependent launch
 * build: nvcc -gencode=arch=compute_90a,code=sm_90a -O3 -std=c++17 scripts/launch_gap.cu -o launch_gap */
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#include "probe.cuh"


__device__ __forceinline__ void spin(unsigned long long ns) {
    const unsigned long long t0 = gt();
    while (gt() - t0 < ns) {
    }
}

__global__ void k_empty(int *o) {
    if (o != nullptr && threadIdx.x == 0) o[blockIdx.x] = 1;
}

__global__ void __launch_bounds__(384, 1) k_big(int *o, unsigned long long ns, int pdl) {
    extern __shared__ int sm[];
    if (pdl) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    sm[threadIdx.x] = threadIdx.x;
    __syncthreads();
    spin(ns);
    if (threadIdx.x == 0) o[blockIdx.x] = sm[5];
}

__global__ void k_small(int *o, unsigned long long ns, int pdl) {
    if (pdl) asm volatile("griddepcontrol.wait;" ::: "memory");
    spin(ns);
    if (threadIdx.x == 0) o[blockIdx.x + 1024] += 1;
}

static float replay(cudaStream_t s, int mode, unsigned long long spin_ns, int *o) {
    cudaGraph_t g;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < 20; i++) {
        if (mode == 0) {
            k_empty<<<1, 32, 0, s>>>(o);
            CK(cudaGetLastError());
            continue;
        }
        k_big<<<128, 384, 200 * 1024, s>>>(o, spin_ns, mode == 4);
        CK(cudaGetLastError());
        if (mode == 1) continue;
        cudaLaunchAttribute at;
        const cudaLaunchConfig_t cfg = probe_launch_cfg(s, 128, 128, &at, mode == 4);
        CK(cudaLaunchKernelEx(&cfg, k_small, o, 1000ull, (int)(mode == 4)));
    }
    CK(cudaStreamEndCapture(s, &g));
    return probe_graph_median(s, g, 20);
}

int main() {
    int *o;
    const cudaStream_t s = probe_stream_zeros(&o, 8192);
    CK(cudaFuncSetAttribute(k_big, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024));
    printf("empty kernel: %.2f us per call\n", replay(s, 0, 0, o));
    for (unsigned long long ns : {0ull, 3000ull}) {
        CK(cudaFuncSetAttribute(k_small, cudaFuncAttributePreferredSharedMemoryCarveout, -1));
        const float big = replay(s, 1, ns, o), both = replay(s, 2, ns, o), pdl = replay(s, 4, ns, o);
        CK(cudaFuncSetAttribute(k_small, cudaFuncAttributePreferredSharedMemoryCarveout, 100));
        const float carve = replay(s, 2, ns, o), carve_pdl = replay(s, 4, ns, o);
        printf("spin %llu ns: big %.2f | big+small(1 us) %.2f | +carveout %.2f | +pdl %.2f | +carveout+pdl %.2f us per call\n",
               ns, big, both, carve, pdl, carve_pdl);
    }
    CK(cudaDeviceSynchronize());
    return 0;
}
