/* wgmma_rate.cu -- rates of the wgmma shapes the sparse decode kernels use (not part of the
 * library; docs/perf.md sessions 9, 30 and 33). One CTA per SM, timed with clock64 over many
 * chains, each adding to the last one's accumulators (before session 33 they overwrote them, and
 * ptxas deleted every other chain wherever the loop unrolled: scripts/wgmma_reuse.cu):
 * - W warpgroups each issuing chains of 36 k16 steps (S = Q K^T of one unit: A and B from shared
 *   memory, 128-byte swizzle) or 2 steps of m64n256k16 (P V), the same operands every chain: clk
 *   per instruction and operand bytes per clk;
 * - the swap-AB kernel's tile (S, then O^T += V^T P^T with A MN-major) and S with A from two K
 *   buffers in turn, as in the kernels (~117 B/clk);
 * - one warpgroup's S chains beside NW other warps of one kind of work each (shared-memory traffic,
 *   proxy fences, FMA chains, bulk copies of random records, mbarrier waits): how much the
 *   producers' work slows the consumers' products.
 * build: nvcc -gencode=arch=compute_90a,code=sm_90a -O3 -std=c++17 -Isrc scripts/wgmma_rate.cu -o wgmma_rate */
#include "cuda/ptx.cuh"
#include "probe.cuh"
#include <cstdio>
#include <cstdint>

/* KL: B's 64-column blocks N x 128 bytes apart, as the swap-AB kernel's Q (else 8192, as A). keep
   (a run-time value, nonzero after the first chain): the chain adds to d instead of overwriting it.
   A chain that overwrites d leaves the previous chain's results dead, and where the loop unrolls
   ptxas deletes that chain (session 33): such a probe times half its chains. */
template <int N, bool KL = false>
__device__ __forceinline__ void chain(float *d, uint64_t da, uint64_t db, int keep) {
    ak_wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 36; kk++) {
        const uint32_t off = (kk >> 2) * 8192 + (kk & 3) * 32, offb = KL ? (kk >> 2) * (N * 128) + (kk & 3) * 32 : off;
        if (N == 16) ak_wgmma_m64n16k16_ss<0>(d, da + (off >> 4), db + (offb >> 4), kk > 0 || keep);
        if (N == 32) ak_wgmma_m64n32k16_ss<0>(d, da + (off >> 4), db + (offb >> 4), kk > 0 || keep);
        if (N == 64) ak_wgmma_m64n64k16_ss(d, da + (off >> 4), db + (offb >> 4), kk > 0 || keep);
    }
    ak_wgmma_commit();
}

enum { REPS = 2000 };

/* One launch of probe kernel k over sms CTAs (threads each, smem bytes of dynamic shared memory) with
   REPS and the extra arguments a; its first nout output words into h (up to 1024, zeroed first). */
template <typename... P, typename... A>
static cudaError_t probe(void (*k)(long long *, int, P...), int sms, int threads, int smem, long long *h, int nout,
                         A... a) {
    long long *dout;
    cudaMalloc(&dout, 1024 * sizeof(long long));
    cudaMemset(dout, 0, 1024 * sizeof(long long));
    cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    k<<<sms, threads, smem>>>(dout, REPS, a...);
    const cudaError_t e = cudaDeviceSynchronize();
    cudaMemcpy(h, dout, nout * sizeof(long long), cudaMemcpyDeviceToHost);
    cudaFree(dout);
    return e;
}

template <int N, int W, bool RND = false, bool KL = false>
__global__ void __launch_bounds__(128 * W, 1) rate(long long *out, int reps) {
    extern __shared__ __align__(1024) uint8_t sm[];
    for (int k = threadIdx.x; k < 200 * 1024 / 4; k += blockDim.x) reinterpret_cast<uint32_t *>(sm)[k] = fill(k, RND);
    __syncthreads();
    const uint32_t base = ak_smem_addr(sm);
    /* KL: the swap-AB kernel's map, Q (B) at 0 and the K buffer (A) right after it */
    const uint64_t da = ak_wgmma_desc_sw128(base + (KL ? 9 * N * 128 : 0), 16, 1024),
                   db = ak_wgmma_desc_sw128(base + (KL ? 0 : 81920), 16, 1024);
    float d[128];
    for (int k = 0; k < 128; k++) d[k] = 0.0f;
    const long long t0 = clock64();
    for (int r = 0; r < reps; r++) {
        if (N <= 64) {
            chain<N, KL>(d, da, db, r > 0);
        } else {
            ak_wgmma_fence();
            ak_wgmma_m64n256k16_ss_tb(d, da, db);
            ak_wgmma_m64n256k16_ss_tb(d, da + 2, db + 128);
            ak_wgmma_commit();
        }
        ak_wgmma_wait0();
    }
    const long long t1 = clock64();
    float acc = 0.0f;
    for (int k = 0; k < 128; k++) acc += d[k];
    if (threadIdx.x == 0) out[blockIdx.x] = t1 - t0;
    if (acc == 12345.0f) out[0] = 0;
}

/* The swap-AB kernel's tile on one warpgroup: S^T (36 x m64nNk16, K-major, as `chain` on the
   kernel's map) then O^T += V^T P^T (8 m-tiles x 4 k16 steps of m64nNk16 with A MN-major from the
   K buffer, B = P^T), each followed by wait_group 0; clk of each part summed apart. */
template <int N>
__global__ void __launch_bounds__(128, 1) rate_tile(long long *out, int reps) {
    extern __shared__ __align__(1024) uint8_t sm[];
    for (int k = threadIdx.x; k < 200 * 1024 / 4; k += blockDim.x) reinterpret_cast<uint32_t *>(sm)[k] = fill(k, true);
    __syncthreads();
    const uint32_t base = ak_smem_addr(sm), ka = base + 9 * N * 128, pa = ka + 9 * 8192;
    const uint64_t dq0 = ak_wgmma_desc_sw128(base, 16, 1024), dk0 = ak_wgmma_desc_sw128(ka, 16, 1024);
    const uint64_t dv0 = ak_wgmma_desc_sw128(ka, 8192, 1024), dp0 = ak_wgmma_desc_sw128(pa, 16, 1024);
    float s[32], o[8][N / 2];
    for (int k = 0; k < 32; k++) s[k] = 0.0f;
    for (int mb = 0; mb < 8; mb++)
        for (int k = 0; k < N / 2; k++) o[mb][k] = 0.0f;
    long long ts = 0, tp = 0;
    for (int r = 0; r < reps; r++) {
        const long long t0 = clock64();
        chain<N, true>(s, dk0, dq0, r > 0);
        ak_wgmma_wait0();
        const long long t1 = clock64();
        ak_wgmma_fence();
#pragma unroll
        for (int mb = 0; mb < 8; mb++)
#pragma unroll
            for (int kk = 0; kk < 4; kk++) {
                const uint64_t da = dv0 + ((mb * 8192 + kk * 2048) >> 4), db = dp0 + (kk * 32 >> 4);
                if (N == 16) ak_wgmma_m64n16k16_ss<1>(o[mb], da, db, 1);
                else ak_wgmma_m64n32k16_ss<1>(o[mb], da, db, 1);
            }
        ak_wgmma_commit();
        ak_wgmma_wait0();
        const long long t2 = clock64();
        ts += t1 - t0, tp += t2 - t1;
    }
    float acc = 0.0f;
    for (int k = 0; k < N / 2; k++) acc += s[k];
    for (int mb = 0; mb < 8; mb++)
        for (int k = 0; k < N / 2; k++) acc += o[mb][k];
    if (threadIdx.x == 0) out[2 * blockIdx.x] = ts, out[2 * blockIdx.x + 1] = tp;
    if (acc == 12345.0f) out[0] = 0;
}

/* S chains alone (as `chain` on the swap-AB map), A taken in turn from NB K buffers 73728 bytes
   apart (the kernel alternates two) or, with SAMEB false, B from NB Q copies too (fits 224 KB for
   N <= 32); W warpgroups at once, each on another K buffer. */
template <int N, int NB, bool SAMEB, int W = 1>
__global__ void __launch_bounds__(128 * W, 1) rate_bufs(long long *out, int reps) {
    extern __shared__ __align__(1024) uint8_t sm[];
    for (int k = threadIdx.x; k < 224 * 1024 / 4; k += blockDim.x) reinterpret_cast<uint32_t *>(sm)[k] = fill(k, true);
    __syncthreads();
    const uint32_t base = ak_smem_addr(sm);
    float s[32];
    for (int k = 0; k < 32; k++) s[k] = 0.0f;
    const long long t0 = clock64();
    /* with W = 2 the warpgroups read different K buffers at a time; warp-uniform (a shuffle), so that
       the descriptors stay in uniform registers */
    const int g = __shfl_sync(0xffffffffu, (int)threadIdx.x >> 7, 0);
    for (int r = 0; r < reps; r++) {
        const uint32_t b = (uint32_t)((r + g) % NB);
        const uint64_t dq = ak_wgmma_desc_sw128(base + (SAMEB ? 0 : b * 9 * N * 128), 16, 1024);
        const uint64_t dk = ak_wgmma_desc_sw128(base + (SAMEB ? 1 : NB) * 9 * N * 128 + b * 73728, 16, 1024);
        chain<N, true>(s, dk, dq, r > 0);
        ak_wgmma_wait0();
    }
    const long long t1 = clock64();
    float acc = 0.0f;
    for (int k = 0; k < N / 2; k++) acc += s[k];
    if (threadIdx.x == 0) out[blockIdx.x] = t1 - t0;
    if (acc == 12345.0f) out[0] = 0;
}

template <int N, int NB, bool SAMEB, int W = 1> void run_bufs(int sms) {
    long long h[1];
    const cudaError_t e = probe(rate_bufs<N, NB, SAMEB, W>, sms, 128 * W, 224 * 1024, h, 1);
    printf("S at %d heads, %d warpgroup(s), A from %d K buffers in turn, B %s: %.1f clk per chain (%s)\n", N, W, NB,
           SAMEB ? "the same Q" : "from as many Q copies", (double)h[0] / REPS, cudaGetErrorString(e));
}

template <int N> void run_tile(int sms) {
    long long h[2];
    const cudaError_t e = probe(rate_tile<N>, sms, 128, 200 * 1024, h, 2);
    printf("swap-AB tile at %d heads, S then P V in turn: S %.1f clk per chain, P V %.1f clk per chain (%s)\n", N,
           (double)h[0] / REPS, (double)h[1] / REPS, cudaGetErrorString(e));
}

/* One warpgroup issuing chains of m64nNk16 as above, beside NW warps that stop when the chains are
   done, doing one of: shared-memory traffic (GAP >= 0: a 16-byte load and store per lane and step,
   conflict-free, GAP dependent FMAs after each; FENCE: a proxy fence per four steps), FMAs alone
   (GAP < 0: CH independent chains of -GAP distinct instructions), bulk copies of random 656-byte
   records (COPY), waits on an mbarrier that never completes (SPIN). OLD: those warps come first.
   FRESH: the chains take A from two K buffers in turn (operands read once, as in the kernels; not
   with COPY or SPIN). */
template <int N, int NW, int GAP, int CH = 8, bool OLD = false, bool COPY = false, bool FENCE = false,
          bool SPIN = false, bool FRESH = false>
__global__ void __launch_bounds__(128 + 32 * NW, 1) rate_noise(long long *out, int reps, const uint8_t *pool,
                                                               uint32_t nrec) {
    enum { SMEM = FRESH ? 224 * 1024 : 200 * 1024, NOISE = FRESH ? 188416 : 163840 };
    extern __shared__ __align__(1024) uint8_t sm[];
    for (int k = threadIdx.x; k < SMEM / 4; k += blockDim.x) reinterpret_cast<uint32_t *>(sm)[k] = fill(k, FRESH);
    volatile int *stop = reinterpret_cast<volatile int *>(sm + SMEM - 16);
    if (threadIdx.x == 0) *stop = 0;
    __syncthreads();
    const uint32_t base = ak_smem_addr(sm);
    /* OLD: the noise warps come first (warps 0 .. NW - 1), the warpgroup last */
    const bool noise = OLD ? threadIdx.x < 32 * NW : threadIdx.x >= 128;
    if (noise) {
        const int w = (OLD ? threadIdx.x : threadIdx.x - 128) >> 5, lane = threadIdx.x & 31;
        uint8_t *rg = sm + NOISE + (w % 8) * 4096 + lane * 16;
        uint4 x = make_uint4(threadIdx.x, 1, 2, 3);
        float f = (float)threadIdx.x;
        long long it = 0;
        const long long t0 = clock64();
        if (COPY) { /* the producers' copy call: lanes 0..3 each bulk-copy a random 656-byte record into
                       the warp's stage, two stages, each step waiting for the step before's records */
            const uint32_t st = base + 155648 + w * 2 * 2624, mb = base + 204288 + w * 16;
            if (lane == 0) ak_mbar_init(mb, 1), ak_mbar_init(mb + 8, 1);
            __syncwarp();
            uint32_t h = 2654435761u * (blockIdx.x * 64 + w * 32 + lane + 1);
            for (int j = 0; *stop == 0; j++) {
                const uint32_t b = j & 1;
                if (lane == 0) ak_mbar_arrive_tx(mb + 8 * b, 4 * 656);
                __syncwarp();
                h = h * 1664525u + 1013904223u;
                if (lane < 4)
                    ak_bulk_g2s_hint(st + b * 2624 + lane * 656, pool + (size_t)(h % nrec) * 656, 656, mb + 8 * b,
                                     ak_l2_policy(true));
                if (j > 0) ak_mbar_wait(mb + 8 * (b ^ 1), ((j - 1) >> 1) & 1);
                it += 4;
            }
        }
        if (SPIN) { /* a wait on an mbarrier phase that has not completed, as ak_mbar_wait spins */
            const uint32_t mb = base + 204288 + w * 16;
            if (lane == 0) ak_mbar_init(mb, 1);
            __syncwarp();
            while (*stop == 0) {
                uint32_t ok;
                asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0;\nselp.u32 %0, 1, 0, p;\n}\n"
                             : "=r"(ok) : "r"(mb) : "memory");
                it += 1 + ok;
            }
        }
        while (!COPY && !SPIN && *stop == 0) {
            if (GAP >= 0) {
#pragma unroll
                for (int u = 0; u < 8; u++) {
                    const uint4 y = *reinterpret_cast<const uint4 *>(rg + (u & 3) * 512);
                    *reinterpret_cast<uint4 *>(rg + 2048 + (u & 3) * 512) = x;
                    x.x ^= y.x, x.y ^= y.y, x.z += y.z, x.w += y.w;
#pragma unroll
                    for (int g = 0; g < GAP; g++) f = fmaf(f, 1.0001f, 0.5f);
                    if (FENCE && (u & 3) == 3) ak_fence_proxy_async(); /* as a producer releasing K rows */
                }
                it += 8;
            } else { /* no shared memory: CH independent FMA chains, -GAP steps each */
                float e[CH];
#pragma unroll
                for (int c = 0; c < CH; c++) e[c] = f + c;
#pragma unroll
                for (int g = 0; g < -GAP; g++)
#pragma unroll
                    for (int c = 0; c < CH; c++) /* distinct constants: -GAP x CH instructions of code */
                        e[c] = fmaf(e[c], 1.0001f + 1e-7f * (float)g, 0.5f + (float)(g * CH + c));
#pragma unroll
                for (int c = 0; c < CH; c++) f += e[c];
                it += CH * -GAP;
            }
        }
        const long long t1 = clock64();
        if (lane == 0) out[256 + w] = it, out[512 + w] = t1 - t0;
        if (x.x == 12345u && f == 1.0f) out[0] = 0;
        return;
    }
    const uint64_t da = ak_wgmma_desc_sw128(base, 16, 1024), db = ak_wgmma_desc_sw128(base + 81920, 16, 1024);
    const uint64_t dq = ak_wgmma_desc_sw128(base + 147456, 16, 1024);
    float d[32];
    for (int k = 0; k < 32; k++) d[k] = 0.0f;
    const long long t0 = clock64();
    for (int r = 0; r < reps; r++) {
        if (FRESH) chain<N, true>(d, ak_wgmma_desc_sw128(base + (uint32_t)(r & 1) * 73728, 16, 1024), dq, r > 0);
        else chain<N>(d, da, db, r > 0);
        ak_wgmma_wait0();
    }
    const long long t1 = clock64();
    const bool first = threadIdx.x == (OLD ? 32 * NW : 0);
    if (first) *stop = 1;
    float acc = 0.0f;
    for (int k = 0; k < N / 2; k++) acc += d[k];
    if (first) out[blockIdx.x] = t1 - t0;
    if (acc == 12345.0f) out[0] = 0;
}

template <int N, int NW, int GAP, int CH = 8, bool OLD = false, bool COPY = false, bool FENCE = false,
          bool SPIN = false, bool FRESH = false>
void run_noise(int sms) {
    long long h[1024];
    const uint32_t nrec = COPY ? 400000 : 1; /* 262 MB of records: past L2 */
    uint8_t *pool = NULL;
    cudaMalloc(&pool, (size_t)nrec * 656);
    cudaMemset(pool, 0x38, (size_t)nrec * 656);
    const cudaError_t e = probe(rate_noise<N, NW, GAP, CH, OLD, COPY, FENCE, SPIN, FRESH>, sms, 128 + 32 * NW,
                                FRESH ? 224 * 1024 : 200 * 1024, h, 1024, (const uint8_t *)pool, nrec);
    /* the other warps' iterations (summed) and cycles (their mean) */
    double its = 0.0, cyc = 0.0;
    for (int w = 0; w < NW; w++) its += (double)h[256 + w], cyc += (double)h[512 + w] / (NW > 0 ? NW : 1);
    const double clk = (double)h[0] / REPS / 36, ops = (2048.0 + 32.0 * N) / clk;
    const char *err = cudaGetErrorString(e);
    if (SPIN)
        printf("m64n%dk16 beside %d warps waiting on an mbarrier (try_wait loops): %.1f clk per instruction (%.0f B/clk "
               "of operands), the warps' %.1f clk per try_wait (%s)\n", N, NW, clk, ops, cyc * NW / its, err);
    else if (COPY)
        printf("m64n%dk16 beside %d warps of bulk copies (4 random 656-byte records per warp and step): %.1f clk per "
               "instruction (%.0f B/clk of operands), the warps' %.1f clk per copy (%s)\n", N, NW, clk, ops,
               cyc * NW / its, err);
    else if (GAP >= 0)
        printf("m64n%dk16%s beside %d warps of lds+sts (%2d dependent FMAs per step%s): %.1f clk per instruction (%.0f "
               "B/clk of operands), the warps' shared traffic %.1f B/clk (%s)\n", N, FRESH ? " (operands read once)" : "",
               NW, GAP, FENCE ? ", a proxy fence per 4" : "", clk, ops, NW ? its * 32 * 32 / cyc : 0.0, err);
    else
        printf("m64n%dk16 beside %d warps of FMAs only (%d independent chains, warps %s than the warpgroup): %.1f clk per "
               "instruction (%.0f B/clk of operands), the warps' %.2f FMA instructions per clk (%s)\n", N, NW, CH,
               OLD ? "older" : "younger", clk, ops, its / cyc, err);
    cudaFree(pool);
}

template <int N, int W, bool RND = false, bool KL = false> void run(int sms) {
    long long h[1];
    const cudaError_t e = probe(rate<N, W, RND, KL>, sms, 128 * W, 200 * 1024, h, 1);
    const int per = N <= 64 ? 36 : 2;
    const double chain = (double)h[0] / REPS;
    printf("m64n%dk16 x %d per chain, %d warpgroup(s), %s data%s, the same operands every chain: %.1f clk per chain, "
           "%.1f clk per instruction, %.0f B/clk of operands (%s)\n", N, per, W, RND ? "random" : "constant",
           KL ? ", the swap-AB kernel's map" : "", chain, chain / per, W * (2048.0 + 32.0 * N) / (chain / per),
           cudaGetErrorString(e));
}

int main() {
    int sms = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    run<16, 1>(sms); run<32, 1>(sms); run<64, 1>(sms); run<256, 1>(sms);
    run<16, 2>(sms); run<32, 2>(sms); run<64, 2>(sms); run<256, 2>(sms);
    run<16, 1, true>(sms); run<32, 1, true>(sms); run<64, 1, true>(sms); run<256, 1, true>(sms);
    run<32, 2, true>(sms); run<256, 2, true>(sms);
    run<16, 1, true, true>(sms); run<32, 1, true, true>(sms);
    run_tile<16>(sms); run_tile<32>(sms);
    run_bufs<32, 1, true>(sms); run_bufs<32, 2, true>(sms); run_bufs<32, 2, false>(sms);
    run_bufs<16, 2, true>(sms); run_bufs<16, 2, false>(sms); run_bufs<64, 1, true>(sms); run_bufs<64, 2, true>(sms);
    run_bufs<32, 2, true, 2>(sms); run_bufs<16, 2, true, 2>(sms); run_bufs<64, 2, true, 2>(sms);
    run_noise<32, 0, 0>(sms); run_noise<32, 4, 0>(sms); run_noise<32, 8, 0>(sms);
    run_noise<32, 4, 16>(sms); run_noise<32, 8, 16>(sms); run_noise<32, 8, 64>(sms);
    run_noise<32, 8, -32>(sms); run_noise<32, 4, -32>(sms); run_noise<64, 4, -32>(sms);
    run_noise<32, 8, -32, 8, true>(sms); run_noise<32, 4, -32, 8, true>(sms);
    run_noise<32, 8, -32, 2>(sms); run_noise<32, 8, -32, 2, true>(sms);
    run_noise<32, 4, -32, 2>(sms); run_noise<32, 4, -32, 2, true>(sms);
    run_noise<32, 8, -32, 1>(sms); run_noise<32, 8, -32, 1, true>(sms);
    run_noise<32, 8, -2048, 1>(sms); run_noise<32, 8, -2048, 2>(sms); run_noise<32, 4, -2048, 2>(sms);
    run_noise<16, 8, -2048, 1>(sms); run_noise<32, 8, -512, 1>(sms); run_noise<32, 8, -128, 1>(sms);
    run_noise<32, 8, 0, 8, false, true>(sms); run_noise<32, 4, 0, 8, false, true>(sms);
    run_noise<64, 4, 0, 8, false, true>(sms); run_noise<16, 8, 0, 8, false, true>(sms);
    run_noise<32, 0, 0, 8, false, false, false, false, true>(sms);
    run_noise<32, 4, 0, 8, false, false, false, false, true>(sms);
    run_noise<32, 8, 0, 8, false, false, false, false, true>(sms);
    run_noise<32, 8, 16, 8, false, false, false, false, true>(sms);
    run_noise<16, 8, 0, 8, false, false, false, false, true>(sms);
    run_noise<32, 8, 0, 8, false, false, true>(sms); run_noise<32, 8, 16, 8, false, false, true>(sms);
    run_noise<32, 4, 16, 8, false, false, true>(sms); run_noise<32, 8, 64, 8, false, false, true>(sms);
    run_noise<32, 8, 0, 8, false, false, false, true>(sms); run_noise<32, 4, 0, 8, false, false, false, true>(sms);
    run_noise<32, 1, 0, 8, false, false, false, true>(sms); run_noise<16, 8, 0, 8, false, false, false, true>(sms);
    run_noise<16, 8, 0>(sms); run_noise<16, 8, 16>(sms); run_noise<64, 4, 0>(sms); run_noise<64, 4, 16>(sms);
    return 0;
}
