// access_floor.cu -- the bandwidth a pure byte move reaches with the access pattern of the
// indexer-cache (IDX132) gather and write cases of `attnkit bench` (262144 random distinct slots of
// a 1M-token pool, 64-token pages of 64 x 128 key bytes then 64 x 4 scale bytes), next to the copy
// bandwidth of the same run. No conversion: each 8-lane group moves one token's 16-byte pieces and
// lane 0 its scale, U tokens per thread in flight, as many warps as fit. What the codec kernels
// cannot beat with this layout (docs/perf.md, session 12).
// build: nvcc -O3 -gencode=arch=compute_90a,code=sm_90a scripts/access_floor.cu -o /tmp/access_floor
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <vector>
#include <algorithm>
#include <random>
#include "probe.cuh"

static const int64_t POOL = 1 << 20, N = 262144, PAGE = 64 * 132;

// gather: key bytes (and scale) of random slots -> contiguous rows (and scales)
template <int U, bool SCALE>
__global__ void __launch_bounds__(256) gather(const uint8_t *pool, const int32_t *slots, uint8_t *out, float *osc, int64_t n) {
    const int sub = threadIdx.x & 7;
    const int64_t g = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 3, ng = ((int64_t)gridDim.x * blockDim.x) >> 3;
    for (int64_t b = g; b < n; b += ng * U) {
        uint4 v[U];
        float s[U];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int64_t i = b + u * ng;
            if (i >= n) continue;
            const int32_t slot = slots[i];
            const uint8_t *pg = pool + (int64_t)(slot >> 6) * PAGE;
            v[u] = *(const uint4 *)(pg + (slot & 63) * 128 + sub * 16);
            if (SCALE && sub == 0) s[u] = *(const float *)(pg + 8192 + (slot & 63) * 4);
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int64_t i = b + u * ng;
            if (i >= n) continue;
            *(uint4 *)(out + i * 128 + sub * 16) = v[u];
            if (SCALE && sub == 0) osc[i] = s[u];
        }
    }
}

// write: 256-byte input rows -> 128 key bytes and a 4-byte scale at random slots
template <int U, bool SCALE>
__global__ void __launch_bounds__(256) scatter(uint8_t *pool, const int32_t *slots, const uint8_t *in, int64_t n) {
    const int sub = threadIdx.x & 7;
    const int64_t g = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 3, ng = ((int64_t)gridDim.x * blockDim.x) >> 3;
    for (int64_t b = g; b < n; b += ng * U) {
        uint4 v[U], w[U];
        int32_t sl[U];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int64_t i = b + u * ng;
            sl[u] = i < n ? slots[i] : -1;
            if (i >= n) continue;
            v[u] = *(const uint4 *)(in + i * 256 + sub * 32);
            w[u] = *(const uint4 *)(in + i * 256 + sub * 32 + 16);
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            if (sl[u] < 0) continue;
            uint8_t *pg = pool + (int64_t)(sl[u] >> 6) * PAGE;
            *(uint4 *)(pg + (sl[u] & 63) * 128 + sub * 16) = make_uint4(v[u].x ^ w[u].x, v[u].y ^ w[u].y, v[u].z ^ w[u].z, v[u].w ^ w[u].w);
            if (SCALE && sub == 0) *(float *)(pg + 8192 + (sl[u] & 63) * 4) = __uint_as_float(v[u].x);
        }
    }
}


// Plain contiguous copy, 16 bytes per thread and step: the same-size reference for the cases above
// (a 100 MB move spends a larger share of its time filling and draining the GPU than a 2 GiB one).
__global__ void __launch_bounds__(256) copy16(uint4 *dst, const uint4 *src, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        dst[i] = src[i];
}

// MLA records: per token A bytes at page + t * A (a 656 record, or a V4 576-byte data row) and,
// for V4, 8 scale bytes at page + P * A + t * 8; the other side S contiguous bytes per token
// (bf16 rows). A warp moves U tokens per step, lanes over 16-byte pieces, every load first.
template <int U, int A, int B, int S, bool GATHER>
__global__ void __launch_bounds__(256) mla_move(uint8_t *pool, const int32_t *slots, uint8_t *rows, int64_t n, int P, int64_t pstride) {
    const int lane = threadIdx.x & 31;
    const int64_t w = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5, nw = ((int64_t)gridDim.x * blockDim.x) >> 5;
    constexpr int PA = A / 16, PS = S / 16, NR = ((GATHER ? PA : PS) + 31) / 32, NW = ((GATHER ? PS : PA) + 31) / 32;
    for (int64_t b = w * U; b < n; b += nw * U) {
        uint4 v[U][NR];
        uint2 sc[U];
        uint8_t *rec[U];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int64_t i = b + u;
            rec[u] = nullptr;
            if (i >= n) continue;
            const int32_t slot = slots[i];
            uint8_t *pg = pool + (int64_t)(slot / P) * pstride;
            rec[u] = pg + (int64_t)(slot % P) * A;
#pragma unroll
            for (int r = 0; r < NR; r++) {
                const int p = r * 32 + lane;
                if (GATHER) { if (p < PA) v[u][r] = *(const uint4 *)(rec[u] + p * 16); }
                else if (p < PS) v[u][r] = *(const uint4 *)(rows + i * S + p * 16);
            }
            if (B && lane == 0) {
                uint2 *sp = (uint2 *)(pg + (int64_t)P * A + (int64_t)(slot % P) * 8);
                if (GATHER) sc[u] = *sp;
                else rec[u] = rec[u]; // scale written below
                (void)sp;
            }
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int64_t i = b + u;
            if (i >= n) continue;
#pragma unroll
            for (int r = 0; r < NW; r++) {
                const int p = r * 32 + lane;
                const uint4 x = v[u][r % NR];
                const uint4 y = make_uint4(x.x ^ p, x.y, x.z, x.w);
                if (GATHER) { if (p < PS) *(uint4 *)(rows + i * S + p * 16) = B && lane == 0 ? make_uint4(y.x ^ sc[u].x, y.y, y.z, y.w) : y; }
                else if (p < PA) *(uint4 *)(rec[u] + p * 16) = y;
            }
            if (!GATHER && B && lane == 0) {
                const int32_t slot = slots[i];
                uint8_t *pg = pool + (int64_t)(slot / P) * pstride;
                *(uint2 *)(pg + (int64_t)P * A + (int64_t)(slot % P) * 8) = make_uint2(v[u][0].x, v[u][0].y);
            }
        }
    }
}

template <typename F>
static float med_us(F f) {
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    for (int i = 0; i < 3; i++) f();
    std::vector<float> t;
    for (int i = 0; i < 25; i++) {
        CK(cudaEventRecord(a));
        f();
        CK(cudaEventRecord(b));
        CK(cudaEventSynchronize(b));
        float ms;
        CK(cudaEventElapsedTime(&ms, a, b));
        t.push_back(ms * 1000.0f);
    }
    CK(cudaGetLastError());
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

int main() {
    const size_t cb = (size_t)2 << 30;
    void *c0, *c1;
    CK(cudaMalloc(&c0, cb));
    CK(cudaMalloc(&c1, cb));
    CK(cudaMemset(c0, 1, cb));
    const float tc = med_us([&] { CK(cudaMemcpyAsync(c1, c0, cb, cudaMemcpyDeviceToDevice)); });
    const double copy = 2.0 * cb / tc / 1e3; // GB/s
    printf("copy %.1f GB/s (2 GiB, read + write)\n", copy);
    {
        int sms0;
        CK(cudaDeviceGetAttribute(&sms0, cudaDevAttrMultiProcessorCount, 0));
        /* each size moves `mb` MiB in all (half read, half written): 2 GiB each way, then the bytes of
           262144 tokens of C2 / C3 (1808 per token), C9 / C6 (1608), the indexer write (388) and C10 (264) */
        const double mibs[] = {2048.0 * 2, 1808.0 * 0.25, 1608.0 * 0.25, 388.0 * 0.25, 264.0 * 0.25};
        for (double mb : mibs) {
            const int64_t n16 = (int64_t)(mb * 1048576.0 / 2 / 16), rot = (int64_t)(cb / 16) / n16;
            int64_t k = 0; /* successive calls move other bytes of the 2 GiB buffers: no L2 reuse */
            for (int cap : {4, 32}) {
                const int grid = (int)std::min<int64_t>((n16 + 255) / 256, (int64_t)sms0 * cap);
                const float t = med_us([&] {
                    const int64_t o = (k++ % rot) * n16;
                    copy16<<<grid, 256>>>((uint4 *)c1 + o, (const uint4 *)c0 + o, n16);
                });
                const double by = 2.0 * n16 * 16;
                printf("copy kernel %7.1f MiB moved, %2d blocks/SM: %8.1f us %7.1f GB/s %5.1f%% of copy\n", by / 1048576.0,
                       cap, t, by / t / 1e3, 100.0 * by / t / 1e3 / copy);
            }
            const float t2 = med_us([&] {
                const int64_t o = (k++ % rot) * n16 * 16;
                CK(cudaMemcpyAsync((uint8_t *)c1 + o, (const uint8_t *)c0 + o, (size_t)n16 * 16, cudaMemcpyDeviceToDevice));
            });
            printf("cudaMemcpy  %7.1f MiB moved:                %8.1f us %7.1f GB/s %5.1f%% of copy\n",
                   2.0 * n16 * 16 / 1048576.0, t2, 2.0 * n16 * 16 / t2 / 1e3, 100.0 * 2.0 * n16 * 16 / t2 / 1e3 / copy);
        }
    }
    uint8_t *pool, *out, *in;
    float *osc;
    int32_t *ds, *dp;
    CK(cudaMalloc(&pool, (POOL / 64) * PAGE));
    CK(cudaMemset(pool, 3, (POOL / 64) * PAGE));
    CK(cudaMalloc(&out, N * 128));
    CK(cudaMalloc(&osc, N * 4));
    CK(cudaMalloc(&in, N * 256));
    CK(cudaMemset(in, 5, N * 256));
    std::vector<int32_t> perm(POOL), pages(POOL / 64);
    std::mt19937 rng(7);
    for (int64_t i = 0; i < POOL; i++) perm[i] = (int32_t)i;
    std::shuffle(perm.begin(), perm.end(), rng);
    for (int64_t i = 0; i < POOL / 64; i++) pages[i] = (int32_t)i;
    std::shuffle(pages.begin(), pages.end(), rng);
    std::vector<int32_t> runs(N);
    for (int64_t i = 0; i < N; i++) runs[i] = pages[i / 64] * 64 + (int32_t)(i % 64);
    CK(cudaMalloc(&ds, N * 4));
    CK(cudaMalloc(&dp, N * 4));
    CK(cudaMemcpy(ds, perm.data(), N * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dp, runs.data(), N * 4, cudaMemcpyHostToDevice));
    int sms;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
#define G(U, S, cap)                                                                                             \
    {                                                                                                            \
        int grid = (int)std::min<int64_t>((N * 8 / U + 255) / 256, (int64_t)sms * cap);                         \
        float t = med_us([&] { gather<U, S><<<grid, 256>>>(pool, ds, out, osc, N); });                          \
        double by = N * (S ? 264.0 : 256.0);                                                                     \
        printf("gather U %d scale %d grid %5d: %7.1f us %7.1f GB/s %5.1f%% of copy\n", U, S, grid, t, by / t / 1e3, \
               100.0 * by / t / 1e3 / copy);                                                                     \
    }
#define W(U, S, cap, sl, name)                                                                                   \
    {                                                                                                            \
        int grid = (int)std::min<int64_t>((N * 8 / U + 255) / 256, (int64_t)sms * cap);                         \
        float t = med_us([&] { scatter<U, S><<<grid, 256>>>(pool, sl, in, N); });                               \
        double by = N * (S ? 388.0 : 384.0);                                                                     \
        printf("write %s U %d scale %d grid %5d: %7.1f us %7.1f GB/s %5.1f%% of copy\n", name, U, S, grid, t,    \
               by / t / 1e3, 100.0 * by / t / 1e3 / copy);                                                       \
    }
    G(1, true, 1000) G(2, true, 1000) G(4, true, 1000) G(8, true, 1000) G(4, true, 8) G(8, true, 8)
    G(1, false, 1000) G(4, false, 1000) G(8, false, 8)
    W(1, true, 1000, ds, "random") W(2, true, 1000, ds, "random") W(4, true, 1000, ds, "random") W(4, true, 8, ds, "random")
    W(1, false, 1000, ds, "random") W(4, false, 1000, ds, "random")
    W(1, true, 1000, dp, "pages ") W(2, true, 1000, dp, "pages ") W(4, true, 1000, dp, "pages ") W(4, true, 8, dp, "pages ")

    // MLA record pools of 1M tokens: 656 (P 64, AoS) and V4 (P 64 for writes, 256 for gathers)
    uint8_t *mpool, *mrows;
    CK(cudaMalloc(&mpool, (size_t)POOL * 656));
    CK(cudaMemset(mpool, 7, (size_t)POOL * 656));
    CK(cudaMalloc(&mrows, (size_t)N * 1152));
    CK(cudaMemset(mrows, 9, (size_t)N * 1152));
#define M(U, A, B, S, GA, P, sl, name, cap)                                                                         \
    {                                                                                                            \
        int grid = (int)std::min<int64_t>((N * 32 / U + 255) / 256, (int64_t)sms * cap);                        \
        const int64_t ps = (int64_t)P * (A + B);                                                                 \
        float t = med_us([&] { mla_move<U, A, B, S, GA><<<grid, 256>>>(mpool, sl, mrows, N, P, ps); });           \
        double by = N * (double)(A + B + S);                                                                     \
        printf("%-26s U %d grid %5d: %7.1f us %7.1f GB/s %5.1f%% of copy\n", name, U, grid, t, by / t / 1e3,     \
               100.0 * by / t / 1e3 / copy);                                                                     \
    }
    M(2, 656, 0, 1152, true, 64, ds, "gather 656 (C3)", 1000) M(4, 656, 0, 1152, true, 64, ds, "gather 656 (C3)", 1000)
    M(2, 576, 8, 1024, true, 256, ds, "gather V4 P256 (C6)", 1000) M(4, 576, 8, 1024, true, 256, ds, "gather V4 P256 (C6)", 1000)
    M(2, 576, 0, 1024, true, 256, ds, "gather V4 rows only", 1000)
    M(2, 656, 0, 1152, false, 64, ds, "write 656 random (C2)", 1000) M(4, 656, 0, 1152, false, 64, ds, "write 656 random (C2)", 1000)
    M(2, 656, 0, 1152, false, 64, dp, "write 656 pages (C2)", 1000)
    M(2, 576, 8, 1024, false, 64, ds, "write V4 random (C9)", 1000) M(4, 576, 8, 1024, false, 64, ds, "write V4 random (C9)", 1000)
    M(2, 576, 8, 1024, false, 64, dp, "write V4 pages (C9)", 1000) M(4, 576, 8, 1024, false, 64, dp, "write V4 pages (C9)", 1000)
    return 0;
}
