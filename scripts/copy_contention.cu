// copy_contention.cu -- does a warpgroup reading shared memory slow the bulk-copy issue of the warps
// beside it, and is it the shared-memory bytes or the wgmma (async proxy) reads? (not part of the
// library). docs/perf.md session 51: in ak_sdx_main the producers' copy call of eight records took
// ~1040 cycles a unit, ~818 when consumer warpgroup 1 issued only 4 of S's 36 k16 steps (proxy P1),
// and 601 in copy_rate.cu's isolated probe. One CTA per SM: four copy warps as copy_rate's V 0
// (KPW 8, a ring of two stages, 656-byte records at random slots of a 2 GiB pool) and one
// background warpgroup that, until the copy warps are done, runs
//   BG 0  nothing
//   BG 1  16-byte shared loads (LDS.128) over a 64 KB region, 8 in flight per thread
//   BG 3  the same loads over 108 KB, each address made by a 64-bit multiply and modulo (mostly
//         integer instructions, few bytes)
//   BG 4  register FMAs only, eight independent chains (issue slots, no shared memory)
//   BG 2  S's chain: 36 m64n32k16 wgmma with both operands in shared memory (72 KB of "Q" and
//         36 KB of "K", 128-byte swizzle, as ak_sdx_qk), committed and awaited in a loop
// Prints, per BG, the copy warps' copy call per step, records per 1000 cycles per SM and the
// background's own rate (bytes of shared memory read per cycle).
// build: nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Isrc scripts/copy_contention.cu -o /tmp/copy_contention
#include <cstdio>
#include <cstdint>
#include "cuda/ptx.cuh"
#include "probe.cuh"

enum { REC = 656, KPW = 8, NST = 2, STEPS = 512, CW = 4,
       STAGES = CW * NST * KPW * REC,              /* 41984 bytes */
       BGOFF = (STAGES + 1023) & ~1023,           /* the background's operands, 1024-aligned */
       QB = 9 * 8192, KBY = 9 * 4096,             /* "Q" [9][64 rows][128 B], "K" [9][32 rows][128 B] */
       BARS = BGOFF + QB + KBY, SMEM = BARS + 64 + 1024 };

template <int BG>
__global__ void __launch_bounds__(256, 1) contend(const uint8_t *pool, uint32_t nslots, unsigned long long *out) {
    extern __shared__ uint8_t sm_raw[];
    uint8_t *sm = sm_raw + ((1024u - (ak_smem_addr(sm_raw) & 1023u)) & 1023u);
    uint64_t *bars = reinterpret_cast<uint64_t *>(sm + BARS);
    volatile int *done = reinterpret_cast<volatile int *>(sm + BARS + 8 * CW * NST);
    const int w = __shfl_sync(0xffffffffu, (int)threadIdx.x >> 5, 0), lane = threadIdx.x & 31;
    if (threadIdx.x == 0) {
        for (int k = 0; k < CW * NST; k++) ak_mbar_init(ak_smem_addr(&bars[k]), 1);
        *done = 0;
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    __syncthreads();
    if (w < CW) {
        uint8_t *stage = sm + (size_t)w * NST * KPW * REC;
        unsigned long long ic = 0;
        const unsigned long long t0 = clock64();
        for (int j = 0; j < STEPS; j++) {
            const int s = j % NST;
            const uint32_t bar = ak_smem_addr(&bars[w * NST + s]);
            const uint32_t dst = ak_smem_addr(stage + s * KPW * REC);
            const unsigned long long a = clock64();
            const uint32_t slot = probe_hash((blockIdx.x * CW + w) * 65536u + j * KPW + lane) % nslots;
            if (lane == 0) ak_mbar_arrive_tx(bar, KPW * REC);
            if (lane < KPW) probe_bulk_g2s(dst + lane * REC, pool + (size_t)slot * REC, REC, bar);
            ic += clock64() - a;
            if (j > 0) ak_mbar_wait(ak_smem_addr(&bars[w * NST + (j - 1) % NST]), ((j - 1) / NST) & 1);
            __syncwarp();
        }
        ak_mbar_wait(ak_smem_addr(&bars[w * NST + (STEPS - 1) % NST]), ((STEPS - 1) / NST) & 1);
        const unsigned long long t1 = clock64();
        if (lane == 0) {
            atomicAdd((int *)done, 1);
            out[(blockIdx.x * 8 + w) * 2] = t1 - t0;
            out[(blockIdx.x * 8 + w) * 2 + 1] = ic;
        }
        return;
    }
    /* background warpgroup: operands filled once (finite bf16), then its loop until every copy warp
       is done (capped, so a fault cannot hang the probe) */
    const int bt = threadIdx.x - 32 * CW;
    uint32_t *ops = reinterpret_cast<uint32_t *>(sm + BGOFF);
    for (int k = bt; k < (QB + KBY) / 4; k += 128) ops[k] = fill(k, true);
    ak_fence_proxy_async();
    asm volatile("bar.sync 1, 128;" ::: "memory");
    unsigned long long iters = 0, acc = 0;
    const unsigned long long t0 = clock64();
    if (BG == 1 || BG == 3) {
        const uint8_t *base = sm + BGOFF;
        while (*done < CW && iters < (1u << 22)) {
#pragma unroll
            for (int u = 0; u < 8; u++) {
                /* BG 3: the address by a 64-bit multiply and modulo, ~20 integer instructions per load */
                const uint32_t off = BG == 1 ? bt * 16 + (((uint32_t)iters * 8 + u) & 31) * 2048
                                             : (uint32_t)((((iters * 8 + u) * 128 + bt) * 16) % (QB + KBY));
                uint32_t x, y, z, t;
                asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
                             : "=r"(x), "=r"(y), "=r"(z), "=r"(t)
                             : "r"(ak_smem_addr(base + off)));
                acc ^= x ^ t;
            }
            iters++;
        }
    } else if (BG == 4) {
        iters = probe_fma_until(done, CW, bt, acc);
    } else if (BG == 2) {
        float s[16];
        const uint64_t dq0 = ak_wgmma_desc_sw128(ak_smem_addr(sm + BGOFF), 16, 1024);
        const uint64_t dk0 = ak_wgmma_desc_sw128(ak_smem_addr(sm + BGOFF + QB), 16, 1024);
        while (!probe_wg_stop(done, CW, iters, bt)) {
            ak_wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < 36; kk++) {
                const uint32_t qo = (kk >> 2) * 8192 + (kk & 3) * 32, ko = (kk >> 2) * 4096 + (kk & 3) * 32;
                ak_wgmma_m64n32k16_ss<0>(s, ak_wgmma_desc_add(dq0, qo >> 4), ak_wgmma_desc_add(dk0, ko >> 4), kk > 0);
            }
            ak_wgmma_commit();
            ak_wgmma_wait0();
            acc += __float_as_uint(s[0]) ^ __float_as_uint(s[15]);
            iters++;
        }
    }
    const unsigned long long t1 = clock64();
    if (bt == 0) {
        out[(blockIdx.x * 8 + 4) * 2] = t1 - t0;
        out[(blockIdx.x * 8 + 4) * 2 + 1] = iters;
    }
    if (acc == 0x123456789ull) out[0] = acc; /* keeps the loads */
}

template <int BG>
static void run(const uint8_t *pool, uint32_t nslots, int sms, unsigned long long *d) {
    CK(cudaFuncSetAttribute(contend<BG>, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM));
    for (int rep = 0; rep < 2; rep++) {
        contend<BG><<<sms, 256, SMEM>>>(pool, nslots, d);
        CK(cudaGetLastError());
        CK(cudaDeviceSynchronize());
    }
    static unsigned long long h[132 * 16];
    CK(cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost));
    double c = 0, ci = 0, bc = 0, bi = 0;
    for (int b = 0; b < sms; b++) {
        for (int w = 0; w < CW; w++) c += (double)h[(b * 8 + w) * 2], ci += (double)h[(b * 8 + w) * 2 + 1];
        bc += (double)h[(b * 8 + 4) * 2], bi += (double)h[(b * 8 + 4) * 2 + 1];
    }
    c /= sms * CW, ci /= sms * CW, bc /= sms, bi /= sms;
    const double bytes = BG == 1 || BG == 3 ? bi * 8 * 128 * 16 : BG == 2 ? bi * 36 * (2048 + 1024) : 0.0;
    printf("BG %d (%s): copy call %6.1f clk per step of %d records, %5.1f records / 1000 clk / SM; background %5.1f B/clk "
           "of shared memory over %.0f clk\n",
           BG, BG == 0 ? "none" : BG == 1 ? "LDS.128" : BG == 2 ? "wgmma S chain" : BG == 3 ? "LDS.128, integer addresses" : "FMA only", ci / STEPS, KPW, 1000.0 * CW * KPW * STEPS / c,
           bc > 0 ? bytes / bc : 0.0, bc);
}

int main() {
    const int sms = probe_sms("copy_contention (2 GiB pool)");
    const size_t big = (size_t)2 << 30;
    uint8_t *pool;
    CK(cudaMalloc(&pool, big));
    CK(cudaMemset(pool, 0x5a, big));
    unsigned long long *d;
    CK(cudaMalloc(&d, sizeof(unsigned long long) * 132 * 16));
    for (int round = 0; round < 2; round++) {
        run<0>(pool, (uint32_t)(big / REC), sms, d);
        run<1>(pool, (uint32_t)(big / REC), sms, d);
        run<2>(pool, (uint32_t)(big / REC), sms, d);
        run<3>(pool, (uint32_t)(big / REC), sms, d);
        run<4>(pool, (uint32_t)(big / REC), sms, d);
    }
    return 0;
}
