/* param_cost.cu -- what a kernel's parameters cost a call in a replayed CUDA graph (not part of
 * the library). A small sparse decode call is two programmatic dependent launches (the main
 * kernel, then the combine), each taking the whole parameter block (ak_sd_params, 432 bytes);
 * x294's two 64-byte aligned tensor maps in it cost the small calls ~1%. Here each call is two
 * 128-CTA kernels of N parameter bytes, both PDL: wait for the previous grid, release the next,
 * spin SPIN_NS, then read N / 64 parameter words in a dependent chain; 432 bytes at alignments 4
 * to 128; and one word at each of several offsets of a 1024-byte block, read after the wait or
 * before it too. A graph of 20 calls is replayed 50 times after 3 warm-ups; the median per call
 * is printed.
 * build: nvcc -gencode=arch=compute_90a,code=sm_90a -O3 -std=c++17 scripts/param_cost.cu -o param_cost */
#include <cstdint>
#include <cstdio>
#include <cuda_runtime.h>

#include "probe.cuh"

template <int N, int A> struct alignas(A) blob {
    uint32_t w[N / 4];
};

/* after the wait, thread 0 reads N / 64 words of the block, each index taken from the sum so far
   (a dependent chain, as a kernel's prologue reads its parameters; the words it touches spread
   over the block) */
template <int N, int A>
__global__ void __launch_bounds__(128) k_pdl(const __grid_constant__ blob<N, A> b, int *o, unsigned long long ns) {
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    const unsigned long long t0 = gt();
    while (gt() - t0 < ns) {
    }
    if (threadIdx.x == 0) {
        int acc = 0;
#pragma unroll
        for (int k = 0; k < N / 4; k += 16) acc = acc * 3 + (int)b.w[(k + acc) % (N / 4)];
        o[blockIdx.x] += acc;
    }
}

/* 1024 parameter bytes; after the wait thread 0 reads the word at byte x (and, where warm, the
   same word before the wait too): which lines of the block come with the launch. */
__global__ void __launch_bounds__(128) k_at(const __grid_constant__ blob<1024, 4> b, int *o, int x, int warm) {
    int pre = 0;
    if (warm && threadIdx.x == 0) pre = (int)b.w[x / 4];
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    if (threadIdx.x == 0) o[blockIdx.x] += (int)b.w[x / 4] + pre;
}

static float replay_at(cudaStream_t s, int *o, int x, int warm) {
    blob<1024, 4> b;
    for (int k = 0; k < 256; k++) b.w[k] = (uint32_t)k;
    cudaGraph_t g;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    cudaLaunchAttribute at;
    const cudaLaunchConfig_t cfg = probe_launch_cfg(s, 128, 128, &at, true);
    for (int i = 0; i < 40; i++) CK(cudaLaunchKernelEx(&cfg, k_at, b, o, x, warm));
    CK(cudaStreamEndCapture(s, &g));
    return probe_graph_median(s, g, 20);
}

template <int N, int A = 4> static float replay(cudaStream_t s, int *o, unsigned long long ns) {
    blob<N, A> b;
    for (int k = 0; k < N / 4; k++) b.w[k] = (uint32_t)k;
    cudaGraph_t g;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    cudaLaunchAttribute at;
    const cudaLaunchConfig_t cfg = probe_launch_cfg(s, 128, 128, &at, true);
    for (int i = 0; i < 40; i++) CK(cudaLaunchKernelEx(&cfg, k_pdl<N, A>, b, o, ns));
    CK(cudaStreamEndCapture(s, &g));
    return probe_graph_median(s, g, 20);
}

int main() {
    int *o;
    const cudaStream_t s = probe_stream_zeros(&o, 1024);
    for (unsigned long long ns : {0ull, 3000ull}) {
        printf("spin %llu ns, us per call of two kernels by parameter bytes:", ns);
        printf(" 16 %.3f", replay<16>(s, o, ns));
        printf(" | 128 %.3f", replay<128>(s, o, ns));
        printf(" | 256 %.3f", replay<256>(s, o, ns));
        printf(" | 432 %.3f", replay<432>(s, o, ns));
        printf(" | 688 %.3f", replay<688>(s, o, ns));
        printf(" | 1024 %.3f", replay<1024>(s, o, ns));
        printf(" | 2048 %.3f", replay<2048>(s, o, ns));
        printf(" | 4000 %.3f\n", replay<4000>(s, o, ns));
        printf("  432 bytes aligned to 4 / 16 / 64 / 128: %.3f / %.3f / %.3f / %.3f\n", replay<432, 4>(s, o, ns),
               replay<432, 16>(s, o, ns), replay<448, 64>(s, o, ns), replay<512, 128>(s, o, ns));
    }
    for (int warm = 0; warm < 2; warm++) {
        printf("1024 bytes, one word read after the wait%s, us per call by its byte offset:",
               warm ? " (and before it)" : "");
        for (int x : {0, 64, 128, 192, 240, 256, 320, 384, 512, 768, 1020}) printf(" %d %.3f", x, replay_at(s, o, x, warm));
        printf("\n");
    }
    CK(cudaDeviceSynchronize());
    return 0;
}
