// write_burst.cu -- how fast can every SM at once put a CTA's rows into L2? The question behind
// docs/perf.md session 83: at b 8 h_q 128 each 64-head CTA ends by writing 64 KB of fp16 partial
// rows, all 128 CTAs at once, and that epilogue took ~6.8k cycles in the traces (sessions 43, 51),
// read then as the bytes' own time. This probe times the bytes alone: one CTA of 384 threads per SM
// (its shared memory keeps SMs apart), each writing (or, as a control, reading) B contiguous bytes
// of its own region with 16-byte accesses, then a device-scope fence (which waits for its stores
// to be performed), timed by clock64 around the two. Prints the median and the slowest CTA's
// cycles and the bytes a clock an SM for 16 to 128 KB a CTA and 16 to 132 CTAs. Random data.
// build: nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a scripts/write_burst.cu -o /tmp/write_burst
#include <cstdio>
#include <cstdint>
#include <algorithm>
#include <vector>
#include "probe.cuh"

enum { THREADS = 384, SMEM = 120 * 1024 };

/* WRITE 1: stores; WRITE 0: loads summed into one word per thread (kept live through out). */
template <int WRITE>
__global__ void __launch_bounds__(THREADS, 1) burst(uint4 *buf, int vecs, unsigned long long *cyc, uint32_t *sink) {
    extern __shared__ uint8_t sm[];
    uint4 *mine = buf + (size_t)blockIdx.x * vecs;
    const uint32_t seed = probe_hash(blockIdx.x * THREADS + threadIdx.x + 1u);
    uint4 v = make_uint4(seed, seed ^ 0x9e3779b9u, seed * 3u, seed + 0x5a5a5a5au);
    if (threadIdx.x == 0) sm[0] = 1;
    __syncthreads();
    const unsigned long long t0 = clock64();
    uint32_t acc = 0;
    for (int k = threadIdx.x; k < vecs; k += THREADS) {
        if (WRITE) {
            mine[k] = v;
            v.x += 0x01000193u;
        } else {
            const uint4 x = mine[k];
            acc += x.x ^ x.y ^ x.z ^ x.w;
        }
    }
    __threadfence();
    __syncthreads();
    const unsigned long long t1 = clock64();
    if (!WRITE) sink[blockIdx.x * THREADS + threadIdx.x] = acc;
    if (threadIdx.x == 0) cyc[blockIdx.x] = t1 - t0;
}

template <int WRITE>
static void run(uint4 *buf, unsigned long long *cyc, uint32_t *sink, int ctas, int kb) {
    const int vecs = kb * 1024 / 16;
    std::vector<unsigned long long> med, mx;
    for (int rep = 0; rep < 21; rep++) {
        burst<WRITE><<<ctas, THREADS, SMEM>>>(buf, vecs, cyc, sink);
        CK(cudaGetLastError());
        CK(cudaDeviceSynchronize());
        if (rep == 0) continue; /* warm-up */
        std::vector<unsigned long long> h(ctas);
        CK(cudaMemcpy(h.data(), cyc, ctas * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
        std::sort(h.begin(), h.end());
        med.push_back(h[ctas / 2]);
        mx.push_back(h[ctas - 1]);
    }
    std::sort(med.begin(), med.end());
    std::sort(mx.begin(), mx.end());
    const double m = (double)med[med.size() / 2], x = (double)mx[mx.size() / 2];
    printf("%-5s %4d CTAs %4d KB a CTA: median CTA %7.0f cycles (%5.1f B/clk), slowest %7.0f (%5.1f B/clk)\n",
           WRITE ? "write" : "read", ctas, kb, m, kb * 1024.0 / m, x, kb * 1024.0 / x);
}

int main() {
    const int sms = probe_sms("write_burst");
    CK(cudaFuncSetAttribute(burst<1>, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM));
    CK(cudaFuncSetAttribute(burst<0>, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM));
    uint4 *buf;
    unsigned long long *cyc;
    uint32_t *sink;
    CK(cudaMalloc(&buf, (size_t)132 * 128 * 1024));
    CK(cudaMalloc(&cyc, 132 * sizeof(unsigned long long)));
    CK(cudaMalloc(&sink, 132 * THREADS * sizeof(uint32_t)));
    const int ctas[] = {16, 64, 128, sms};
    const int kbs[] = {16, 64, 128};
    for (int c : ctas)
        for (int kb : kbs) {
            run<1>(buf, cyc, sink, c, kb);
            run<0>(buf, cyc, sink, c, kb);
        }
    CK(cudaFree(buf));
    CK(cudaFree(cyc));
    CK(cudaFree(sink));
    return 0;
}
