// cvt_contention.cu -- which part of the producers' conversion do the consumers' products slow?
// (not part of the library; docs/perf.md session 73). Session 73's proxies put the 64-head unit at
// the producers' own chain (~2090 cycles) plus ~700 that the consumers' S and P V add, about half
// each. Its answer: every instruction of the converters slows, in proportion to the accumulators
// the products write per clock (docs/cuda.md). This probe runs
// cvt_rate.cu's conversion variants in W warps of a CTA per SM (4 as the 64-head producers, 8 as
// the swap-AB ones) beside one background warpgroup, and prints how long the converters take:
//   BG 0  nothing
//   BG 2  S's chain: 36 m64n32k16 wgmma, A and B from shared memory (72 KB "Q", 36 KB "K")
//   BG 5  P V's chain: m64n256k16 wgmma, A from registers, B MN-major from shared memory (8 KB
//         each), 128 accumulators per thread, eight per commit group
//   BG 4  register FMAs only (issue slots, no tensor pipe)
//   BG 6 / 7  as BG 2 with m64n16k16 / m64n64k16 (8 / 32 accumulators per thread)
//   BG 8  as BG 5 with A from shared memory too (m64n256k16, both operands by descriptor)
//   BG 9  as BG 2 with two wgmma per commit group instead of 36 (short accumulator chains)
//   BG 10 / 11  as BG 2 / 7 with every wgmma overwriting its accumulators (scale-d 0, chosen at
//         run time so that ptxas keeps them): the accumulators written but not read
// Converter variants (cvt_rate.cu's numbering): 0 the kernels' path (ak_sd_dequant16: cvt
// e4m3x2 -> f16x2, two widenings, two FMUL, F2FP pack), 1 the cvt alone, 2 the F2FP pack alone,
// 3 bit unpack, FMUL and F2FP, 4 bit unpack, FMUL and an integer pack (no F2FP), 5 the widening
// (HADD2.F32) alone, 6 loop overhead, 9 the kernels' path with its 16-byte stage loads and 32-byte
// K stores in shared memory (a producer's step without copies or waits), 7 none (the converters
// sleep ~100 us: the background's own rate).
// build: nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -DAK_HAVE_CUDA -Iinclude -Isrc
//        scripts/cvt_contention.cu -o /tmp/cvt_contention
#include <cstdio>
#include <cstdint>
#include "cvt_variants.cuh"
#include "probe.cuh"

enum { ITERS = 256, CH = 8,
       QB = 9 * 8192, KBY = 9 * 4096,           /* "Q" [9][64 rows][128 B], "K" [9][32 rows][128 B] */
       STG = QB + KBY, STGB = 8 * 32 * CH * 16, /* stage: [warp][lane][chunk] 16 B of e4m3 */
       OUT = STG + STGB, OUTB = 2 * STGB,       /* converted: [warp][lane][chunk] 32 B of bf16 */
       FLAGS = OUT + OUTB, SMEM = FLAGS + 64 + 1024 };

template <int BG, int V, int W>
__global__ void __launch_bounds__(32 * W + 128, 1) contend(unsigned long long *out) {
    extern __shared__ uint8_t sm_raw[];
    uint8_t *sm = sm_raw + ((1024u - (ak_smem_addr(sm_raw) & 1023u)) & 1023u);
    volatile int *done = reinterpret_cast<volatile int *>(sm + FLAGS);
    const int w = __shfl_sync(0xffffffffu, (int)threadIdx.x >> 5, 0), lane = threadIdx.x & 31;
    for (int k = threadIdx.x; k < (QB + KBY) / 4; k += blockDim.x) reinterpret_cast<uint32_t *>(sm)[k] = fill(k, true);
    for (int k = threadIdx.x; k < STGB / 4; k += blockDim.x)
        reinterpret_cast<uint32_t *>(sm + STG)[k] = probe_hash((uint32_t)k * 7u + blockIdx.x) & 0x7e7e7e7eu;
    if (threadIdx.x == 0) done[0] = 0, done[1] = 0;
    ak_fence_proxy_async();
    __syncthreads();
    if (w < W) { /* converters */
        uint4 base[CH];
#pragma unroll
        for (int c = 0; c < CH; c++) {
            uint32_t h = 0x1234u ^ (threadIdx.x * 0x9e3779b9u) ^ (c * 0x85ebca6bu);
            base[c] = make_uint4(h & 0x7e7e7e7eu, (h * 3u) & 0x7e7e7e7eu, (h * 5u) & 0x7e7e7e7eu, (h * 7u) & 0x7e7e7e7eu);
        }
        const float s = 0.0179f, s2 = s * 0x1p120f;
        const uint32_t stg = ak_smem_addr(sm + STG) + (uint32_t)((w * 32 + lane) * CH * 16);
        const uint32_t dst = ak_smem_addr(sm + OUT) + (uint32_t)((w * 32 + lane) * CH * 32);
        uint32_t acc = 0;
        const unsigned long long t0 = clock64();
        if (V == 7) /* no conversion: the background alone for ~100 us */
            for (int i = 0; i < 100; i++) __nanosleep(1000);
        for (int i = 0; i < (V == 7 ? 0 : ITERS); i++) {
            const uint32_t m = (uint32_t)i * 0x01010100u & 0x3c3c3c3cu;
#pragma unroll
            for (int c = 0; c < CH; c++) {
                uint4 raw = base[c], lo, hi;
                if (V == 9)
                    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
                                 : "=r"(raw.x), "=r"(raw.y), "=r"(raw.z), "=r"(raw.w)
                                 : "r"(stg + c * 16));
                raw = make_uint4(raw.x ^ m, raw.y ^ m, raw.z ^ m, raw.w ^ m);
                conv<V == 9 ? 0 : V>(raw, s, s2, lo, hi); /* 9: the kernels' path */
                if (V == 9) {
                    asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" ::"r"(dst + c * 32), "r"(lo.x), "r"(lo.y),
                                 "r"(lo.z), "r"(lo.w)
                                 : "memory");
                    asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" ::"r"(dst + c * 32 + 16), "r"(hi.x),
                                 "r"(hi.y), "r"(hi.z), "r"(hi.w)
                                 : "memory");
                } else {
                    acc ^= lo.x ^ lo.y ^ lo.z ^ lo.w ^ hi.x ^ hi.y ^ hi.z ^ hi.w;
                }
            }
        }
        const unsigned long long t1 = clock64();
        __syncwarp();
        if (lane == 0) {
            atomicAdd((int *)done, 1);
            out[(blockIdx.x * 16 + w) * 2] = t1 - t0;
        }
        if (acc == 0x12345678u) out[1] = acc;
        return;
    }
    /* background warpgroup, until every converter is done (capped, so a fault cannot hang it) */
    const int bt = threadIdx.x - 32 * W;
    unsigned long long iters = 0, acc = 0;
    const unsigned long long t0 = clock64();
    if (BG == 4) {
        iters = probe_fma_until(done, W, bt, acc);
    } else if (BG != 0) {
        enum { ND = BG == 6 ? 8 : BG == 2 || BG == 9 || BG == 10 ? 16 : BG == 7 || BG == 11 ? 32 : 128 };
        const int keep = BG == 10 || BG == 11 ? (int)(out == nullptr) : 1; /* 0 at run time */
        float d[ND];
#pragma unroll
        for (int k = 0; k < ND; k++) d[k] = 0.0f;
        uint32_t a[4];
#pragma unroll
        for (int k = 0; k < 4; k++) a[k] = fill(bt * 4 + k, true);
        const uint64_t dq0 = ak_wgmma_desc_sw128(ak_smem_addr(sm), 16, 1024);
        const uint64_t dk0 = ak_wgmma_desc_sw128(ak_smem_addr(sm + QB), 16, 1024);
        const uint64_t dv0 = ak_wgmma_desc_sw128(ak_smem_addr(sm + QB), 4096, 1024); /* 4 blocks of 64 dims */
        while (!probe_wg_stop(done, W, iters, bt)) {
#pragma unroll
            for (int k = 0; k < ND; k++) ak_reg_fence(d[k]);
            ak_wgmma_fence();
            if (BG == 5 || BG == 8) {
#pragma unroll
                for (int kk = 0; kk < 8; kk++) {
                    const uint64_t db = ak_wgmma_desc_add(dv0, ((kk & 1) * 2048) >> 4);
                    if (BG == 5) ak_wgmma_m64n256k16_rs_tb(d, a, db);
                    else ak_wgmma_m64n256k16_ss_tb(d, ak_wgmma_desc_add(dq0, ((kk & 3) * 32) >> 4), db);
                }
            } else {
#pragma unroll
                for (int kk = 0; kk < 36; kk++) {
                    const uint32_t qo = (kk >> 2) * 8192 + (kk & 3) * 32, ko = (kk >> 2) * 4096 + (kk & 3) * 32;
                    const uint64_t da = ak_wgmma_desc_add(dq0, qo >> 4), db = ak_wgmma_desc_add(dk0, ko >> 4);
                    if (BG == 6) ak_wgmma_m64n16k16_ss<0>(d, da, db, 1);
                    else if (BG == 7 || BG == 11) ak_wgmma_m64n64k16_ss(d, da, db, keep);
                    else ak_wgmma_m64n32k16_ss<0>(d, da, db, keep);
                    if (BG == 9 && (kk & 1)) {
                        ak_wgmma_commit();
                        ak_wgmma_wait0();
#pragma unroll
                        for (int k = 0; k < ND; k++) ak_reg_fence(d[k]);
                        ak_wgmma_fence();
                    }
                }
            }
            ak_wgmma_commit();
            ak_wgmma_wait0();
#pragma unroll
            for (int k = 0; k < ND; k++) ak_reg_fence(d[k]);
            iters++;
        }
        acc += __float_as_uint(d[0]) ^ __float_as_uint(d[ND - 1]);
    }
    const unsigned long long t1 = clock64();
    if (bt == 0) {
        out[(blockIdx.x * 16 + 15) * 2] = t1 - t0;
        out[(blockIdx.x * 16 + 15) * 2 + 1] = iters;
    }
    if (acc == 0x12345678ull) out[0] = acc; /* reachable, so the products stay live */
}

static const char *bg_name(int bg) {
    return bg == 0 ? "none" : bg == 2 ? "S chain (m64n32 ss)" : bg == 5 ? "P V chain (m64n256 rs)" : "FMA only";
}

/* Mean converter cycles over the CTAs; the background's clocks per wgmma (or FMA round). */
template <int BG, int V, int W> static double run(int sms, unsigned long long *d, double *bg_rate) {
    CK(cudaFuncSetAttribute(contend<BG, V, W>, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM));
    for (int rep = 0; rep < 2; rep++) {
        contend<BG, V, W><<<sms, 32 * W + 128, SMEM>>>(d);
        CK(cudaGetLastError());
        CK(cudaDeviceSynchronize());
    }
    static unsigned long long h[132 * 32];
    CK(cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost));
    double c = 0, bc = 0, bi = 0;
    for (int b = 0; b < sms; b++) {
        for (int w = 0; w < W; w++) c += (double)h[(b * 16 + w) * 2];
        bc += (double)h[(b * 16 + 15) * 2], bi += (double)h[(b * 16 + 15) * 2 + 1];
    }
    c /= (double)sms * W;
    const double per = BG == 5 || BG == 8 ? 8.0 : BG == 4 ? 1.0 : 36.0;
    *bg_rate = bi > 0 ? bc / (bi * per) : 0.0;
    return c;
}

template <int V, int W> static void row(int sms, unsigned long long *d, const char *name) {
    double r0, r2, r5, r4;
    const double c0 = run<0, V, W>(sms, d, &r0), c2 = run<2, V, W>(sms, d, &r2), c5 = run<5, V, W>(sms, d, &r5),
                 c4 = run<4, V, W>(sms, d, &r4);
    printf("W %d  %-36s %8.0f | %8.0f (%+5.1f%%, %5.1f clk/wgmma) | %8.0f (%+5.1f%%, %6.1f clk/wgmma) | %8.0f (%+5.1f%%)\n",
           W, name, c0, c2, 100.0 * (c2 / c0 - 1), r2, c5, 100.0 * (c5 / c0 - 1), r5, c4, 100.0 * (c4 / c0 - 1));
}

template <int W> static void table(int sms, unsigned long long *d) {
    printf("converter cycles (%d iterations x %d chunks of 16 values per lane), beside: %s | %s | %s | %s\n", ITERS, CH,
           bg_name(0), bg_name(2), bg_name(5), bg_name(4));
    row<0, W>(sms, d, "0 kernels' path");
    row<9, W>(sms, d, "9 kernels' path, stage LDS, K STS");
    row<1, W>(sms, d, "1 cvt e4m3x2->f16x2 only");
    row<5, W>(sms, d, "5 widen f16x2->f32 only");
    row<2, W>(sms, d, "2 F2FP bf16x2 pack only");
    row<3, W>(sms, d, "3 bit unpack, FMUL, F2FP");
    row<4, W>(sms, d, "4 bit unpack, FMUL, integer pack");
    row<6, W>(sms, d, "6 overhead only");
    row<7, W>(sms, d, "7 no converters (100 us asleep)");
}

/* W 4 converters beside the other wgmma shapes: what in the products slows them */
template <int V> static void shapes(int sms, unsigned long long *d, const char *name) {
    double r[6];
    const double c0 = run<0, V, 4>(sms, d, &r[0]), c6 = run<6, V, 4>(sms, d, &r[1]), c2 = run<2, V, 4>(sms, d, &r[2]),
                 c7 = run<7, V, 4>(sms, d, &r[3]), c9 = run<9, V, 4>(sms, d, &r[4]), c8 = run<8, V, 4>(sms, d, &r[5]);
    printf("W 4  %-36s %8.0f | n16 %+5.1f%% (%5.1f) | n32 %+5.1f%% (%5.1f) | n64 %+5.1f%% (%5.1f) | n32 by twos %+5.1f%% "
           "(%5.1f) | n256 ss %+5.1f%% (%5.1f)\n",
           name, c0, 100.0 * (c6 / c0 - 1), r[1], 100.0 * (c2 / c0 - 1), r[2], 100.0 * (c7 / c0 - 1), r[3],
           100.0 * (c9 / c0 - 1), r[4], 100.0 * (c8 / c0 - 1), r[5]);
}

int main() {
    const int sms = probe_sms("cvt_contention");
    unsigned long long *d;
    CK(cudaMalloc(&d, sizeof(unsigned long long) * 132 * 32));
    for (int round = 0; round < 2; round++) {
        table<4>(sms, d);
        table<8>(sms, d);
    }
    printf("converter cycles beside chains that overwrite their accumulators (scale-d 0) and the same chains accumulating\n");
    for (int round = 0; round < 2; round++) {
        double r[5];
        const double c0 = run<0, 0, 4>(sms, d, &r[0]), c2 = run<2, 0, 4>(sms, d, &r[1]), c10 = run<10, 0, 4>(sms, d, &r[2]),
                     c7 = run<7, 0, 4>(sms, d, &r[3]), c11 = run<11, 0, 4>(sms, d, &r[4]);
        printf("W 4  0 kernels' path %8.0f | n32 accumulating %+5.1f%% (%5.1f) | n32 overwriting %+5.1f%% (%5.1f) | "
               "n64 accumulating %+5.1f%% (%5.1f) | n64 overwriting %+5.1f%% (%5.1f)\n",
               c0, 100.0 * (c2 / c0 - 1), r[1], 100.0 * (c10 / c0 - 1), r[2], 100.0 * (c7 / c0 - 1), r[3],
               100.0 * (c11 / c0 - 1), r[4]);
    }
    printf("converter cycles beside other wgmma shapes (change against none; clk per wgmma)\n");
    for (int round = 0; round < 2; round++) {
        shapes<0>(sms, d, "0 kernels' path");
        shapes<9>(sms, d, "9 kernels' path, stage LDS, K STS");
        shapes<6>(sms, d, "6 overhead only");
        shapes<7>(sms, d, "7 no converters (100 us asleep)");
    }
    return 0;
}
