// write_burst.cu -- how fast can every SM at once put a CTA's rows into L2? The question behind
// docs/perf.md session 83: at b 8 h_q 128 each 64-head CTA ends by writing 64 KB of fp16 partial
// rows, all 128 CTAs at once, and that epilogue took ~6.8k cycles in the traces (sessions 43, 51),
// read then as the bytes' own time. This probe times the bytes alone: one CTA of 384 threads per SM
// (its shared memory keeps SMs apart), each writing (or, as a control, reading) B contiguous bytes
// of its own region with 16-byte accesses, eight in flight a thread, then a device-scope fence
// (which waits for its stores to be performed), timed by clock64 around the two. Prints the median
// and the slowest CTA's cycles and the bytes a clock an SM for 16 to 128 KB a CTA and 16 to 132
// CTAs. Other forms: the stores without the fence (their issue only), the bytes from shared memory
// by one bulk copy per 4 KB (cp.async.bulk.global.shared::cta, waited for by its bulk group), and
// each form's whole kernel by graph replay (20 launches a graph, median of 50), which counts the
// stores' drain before the grid ends: what the kernel after a split call waits for. Random data.
// build: nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a scripts/write_burst.cu -o /tmp/write_burst
#include <cstdio>
#include <cstdint>
#include <algorithm>
#include <vector>
#include "probe.cuh"

enum { THREADS = 384, SMEM = 120 * 1024 };

enum { READ = 0, STORE = 1, STORE_NOFENCE = 2, BULK = 3 };
static const char *const form_name[] = {"read", "write", "write, no fence", "bulk write"};

/* READ: loads summed into one word per thread (kept live through sink); STORE: 16-byte stores and
   a fence; STORE_NOFENCE: the stores alone; BULK: the bytes staged in shared memory first
   (untimed), then 4 KB bulk copies to global memory from warp 0's lanes, waited for by their
   bulk group. */
template <int FORM>
__global__ void __launch_bounds__(THREADS, 1) burst(uint4 *buf, int vecs, unsigned long long *cyc, uint32_t *sink) {
    extern __shared__ __align__(128) uint8_t sm[];
    uint4 *mine = buf + (size_t)blockIdx.x * vecs;
    const uint32_t seed = probe_hash(blockIdx.x * THREADS + threadIdx.x + 1u);
    uint4 v = make_uint4(seed, seed ^ 0x9e3779b9u, seed * 3u, seed + 0x5a5a5a5au);
    if (FORM == BULK) {
        for (int k = threadIdx.x; k < vecs && k < SMEM / 16; k += THREADS) {
            reinterpret_cast<uint4 *>(sm)[k] = v;
            v.x += 0x01000193u;
        }
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    } else if (threadIdx.x == 0) {
        sm[0] = 1;
    }
    __syncthreads();
    const unsigned long long t0 = clock64();
    uint32_t acc = 0;
    if (FORM == BULK) {
        /* the staged bytes (at most SMEM) sent as many times as the region needs */
        const int chunks = vecs * 16 / 4096, staged = SMEM / 4096;
        if (threadIdx.x < 32) {
            for (int c = threadIdx.x; c < chunks; c += 32)
                asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], 4096;" ::"l"(mine + c * 256),
                             "r"((uint32_t)__cvta_generic_to_shared(sm + (c % staged) * 4096))
                             : "memory");
            asm volatile("cp.async.bulk.commit_group;\n\tcp.async.bulk.wait_group 0;" ::: "memory");
        }
    } else {
        /* eight accesses a thread in flight: the loads are all issued before their first use */
        for (int k0 = threadIdx.x; k0 < vecs; k0 += 8 * THREADS) {
            if (FORM != READ) {
#pragma unroll
                for (int u = 0; u < 8; u++)
                    if (k0 + u * THREADS < vecs) {
                        mine[k0 + u * THREADS] = v;
                        v.x += 0x01000193u;
                    }
            } else {
                uint4 x[8];
#pragma unroll
                for (int u = 0; u < 8; u++)
                    x[u] = k0 + u * THREADS < vecs ? mine[k0 + u * THREADS] : make_uint4(0, 0, 0, 0);
#pragma unroll
                for (int u = 0; u < 8; u++) acc += x[u].x ^ x[u].y ^ x[u].z ^ x[u].w;
            }
        }
        if (FORM != STORE_NOFENCE) __threadfence();
    }
    __syncthreads();
    const unsigned long long t1 = clock64();
    if (FORM == READ) sink[blockIdx.x * THREADS + threadIdx.x] = acc;
    if (threadIdx.x == 0) cyc[blockIdx.x] = t1 - t0;
}

/* Microseconds a launch of form FORM by graph replay (20 launches a graph). */
template <int FORM>
static float replay_us(cudaStream_t s, uint4 *buf, unsigned long long *cyc, uint32_t *sink, int ctas, int vecs) {
    cudaGraph_t g;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    for (int k = 0; k < 20; k++) burst<FORM><<<ctas, THREADS, SMEM, s>>>(buf, vecs, cyc, sink);
    CK(cudaGetLastError());
    CK(cudaStreamEndCapture(s, &g));
    return probe_graph_median(s, g, 20);
}

template <int FORM>
static void run(cudaStream_t st, uint4 *buf, unsigned long long *cyc, uint32_t *sink, int ctas, int kb) {
    const int vecs = kb * 1024 / 16;
    std::vector<unsigned long long> med, mx;
    for (int rep = 0; rep < 21; rep++) {
        burst<FORM><<<ctas, THREADS, SMEM>>>(buf, vecs, cyc, sink);
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
    const float us = replay_us<FORM>(st, buf, cyc, sink, ctas, vecs);
    printf("%-15s %4d CTAs %4d KB a CTA: median CTA %7.0f cycles (%5.1f B/clk), slowest %7.0f (%5.1f B/clk); "
           "a launch %6.2f us\n",
           form_name[FORM], ctas, kb, m, kb * 1024.0 / m, x, kb * 1024.0 / x, us);
}

int main() {
    const int sms = probe_sms("write_burst");
    CK(cudaFuncSetAttribute(burst<READ>, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM));
    CK(cudaFuncSetAttribute(burst<STORE>, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM));
    CK(cudaFuncSetAttribute(burst<STORE_NOFENCE>, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM));
    CK(cudaFuncSetAttribute(burst<BULK>, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM));
    cudaStream_t st;
    CK(cudaStreamCreate(&st));
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
            run<STORE>(st, buf, cyc, sink, c, kb);
            run<STORE_NOFENCE>(st, buf, cyc, sink, c, kb);
            run<BULK>(st, buf, cyc, sink, c, kb);
            run<READ>(st, buf, cyc, sink, c, kb);
        }
    run<STORE_NOFENCE>(st, buf, cyc, sink, sms, 0); /* no bytes: the launch column's floor */
    CK(cudaStreamDestroy(st));
    CK(cudaFree(buf));
    CK(cudaFree(cyc));
    CK(cudaFree(sink));
    return 0;
}
