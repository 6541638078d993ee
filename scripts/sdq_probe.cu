/* sdq_probe.cu -- a 64-head sparse decode design that dequantizes the keys in registers, timed
 * without its epilogue (not part of the library; docs/perf.md session 53). Timing only: the
 * operands are random and no result is checked.
 *
 * The design: a CTA per (token, 64-head tile, split) in the swap-AB orientation, K as the wgmma A
 * operand from registers as in ak_sdr_main, so no bf16 K buffer crosses shared memory and S^T = K
 * Q^T is m64n64k16 (2 KB of Q per k16 step and 64 keys, against the 64-head kernel's 2 KB per 32
 * keys). O^T [512 dims x 64 heads] f32 does not fit one warpgroup (256 registers), so two
 * consumer warpgroups split it by dims (4 m-tiles each, 128 registers) and take the S^T tiles in
 * turn: warpgroup n % 2 computes S^T and the softmax of tile n, hands P^T, the heads' new maxima
 * and rescale factors to the other through shared memory and a named barrier (three P^T and
 * factor slots: a warpgroup still reads tile n - 1's after it has released tile n, and the other
 * writes tile n + 1's), and both add V^T P^T over their dims, each converting its half of V again
 * from the raw record. Every key's NoPE bytes are converted twice (S, V), as bf16_rn(float(v) s).
 *
 * Record copies, a ring of three 64-key stages from random slots of a 1 GiB pool:
 *   COPY 0  none, the stages filled once (256 threads: the consumers alone);
 *   COPY 1  the consumers copy: after its P V of tile n - 1 a warpgroup waits for that stage's
 *           release and bulk-copies its tile n + 2 (16 records per warp) (256 threads);
 *   COPY 2  a producer warpgroup copies (384 threads, setmaxnreg 40 / 232). Without setmaxnreg a
 *           ninth warp caps every thread at 168 registers (the register file is split among the
 *           four schedulers: three warps on one of them), under which ptxas spills ~2.8 KB and
 *           serializes these wgmma.
 * MODE 1 / 2 / 3 (proxies, COPY 0): S^T's, V^T's or neither A fragment converted (raw words used).
 *
 * Prints cycles per 64-key tile and CTA; the 64-head kernel's unit is ~2550 cycles per 32 keys at
 * b 128, i.e. ~5100 per 64 keys.
 * build: nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -DAK_HAVE_CUDA -Iinclude -Isrc
 *        scripts/sdq_probe.cu -o /tmp/sdq_probe */
#include "cuda/sparse_decode.cuh"
#include "probe.cuh"
#include <algorithm>
#include <vector>

enum {
    NBUF = 3, STR = 656, TILE = 64 * STR, T = 256,
    Q = 0,                          /* [9][64 heads][128 B] bf16 Q, swizzled (B of S^T) */
    P = Q + 9 * 8192,               /* [3][64 heads][128 B] bf16 P^T, swizzled (B of O^T) */
    ST = P + 3 * 8192,              /* [NBUF][64 keys][STR] raw records */
    ML = ST + NBUF * TILE,          /* f32 m[64], alpha[3][64], red[2][4][64] */
    BAR = ML + (64 + 192 + 512) * 4, /* FULL[NBUF], EMPTY[NBUF] */
    BYTES = BAR + 16 * NBUF
};
static const int64_t NREC = (1ll << 30) / STR;

/* D[64x64] (+)= A[64x16] B[16x64]: bf16 A from registers, B from shared memory K-major. */
__device__ __forceinline__ void wgmma_m64n64k16_rs(float *d, const uint32_t *a, uint64_t db, int scale_d) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
                 "}, {%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d));
}

/* The S^T A fragments of group grp (k16 steps 4 grp .. + 3) for the thread's two 656 keys rw[0]
   (row 16 w + g) and rw[1] (+ 8), in ak_sdr_main's operand map (ak_sdr_s_frag, which is per-tensor
   fp8 since session 61): groups 0..7 the thread's 16 bytes of half scale block grp as
   bf16_rn(float(v) s), group 8 the bf16 RoPE as stored. */
__device__ __forceinline__ void s_frag(const uint8_t *const (&rw)[2], const float (&sc)[2][4], int grp, int c4,
                                       uint32_t (&a)[4][4]) {
#pragma unroll
    for (int hr = 0; hr < 2; hr++) {
        if (grp < 8) {
            const uint4 x = *reinterpret_cast<const uint4 *>(rw[hr] + 128 * (grp >> 1) + 32 * c4 + 16 * (grp & 1));
            const uint32_t wd[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
            for (int q = 0; q < 4; q++) {
                a[q][hr] = ak_sd_deq2<0>(wd[q], sc[hr][grp >> 1]);
                a[q][2 + hr] = ak_sd_deq2<1>(wd[q], sc[hr][grp >> 1]);
            }
        } else {
            const uint4 x = *reinterpret_cast<const uint4 *>(rw[hr] + 528 + 32 * c4);
            const uint4 y = *reinterpret_cast<const uint4 *>(rw[hr] + 528 + 32 * c4 + 16);
            a[0][hr] = x.x, a[0][2 + hr] = x.y, a[1][hr] = x.z, a[1][2 + hr] = x.w;
            a[2][hr] = y.x, a[2][2 + hr] = y.y, a[3][hr] = y.z, a[3][2 + hr] = y.w;
        }
    }
}

/* O^T += V^T P^T over this warpgroup's dims (blocks 2 wg, 2 wg + 1) for the tile in st; P^T's
   key order: logical key 2 (8 w + g) + hr is record 16 w + g + 8 hr, as the softmax stores it. */
template <int MODE>
__device__ __forceinline__ void pv(float (*o)[32], const uint8_t *st, uint64_t dp, int wg, int w, int g, int c4) {
#pragma unroll
    for (int kc = 0; kc < 4; kc++) {
        const uint8_t *rec[4];
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int kl = 16 * kc + 2 * c4 + (j & 1) + 8 * (j >> 1);
            rec[j] = st + (16 * (kl >> 4) + ((kl >> 1) & 7) + 8 * (kl & 1)) * STR;
        }
        uint32_t a[4][4];
#pragma unroll
        for (int bl = 0; bl < 2; bl++) {
            const int blk = 2 * wg + bl;
            uint32_t x[4];
            float sk[4];
#pragma unroll
            for (int j = 0; j < 4; j++) {
                x[j] = *reinterpret_cast<const uint32_t *>(rec[j] + 128 * blk + 4 * (8 * w + g));
                sk[j] = *reinterpret_cast<const float *>(rec[j] + 512 + 4 * blk);
            }
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const uint32_t sel = e ? 0x7362u : 0x5140u;
                const uint32_t lo = __byte_perm(x[0], x[1], sel), hi = __byte_perm(x[2], x[3], sel);
                if (MODE & 2) { /* proxy: the raw words as the A values, no conversion */
                    a[2 * bl + e][0] = lo, a[2 * bl + e][1] = hi, a[2 * bl + e][2] = lo ^ hi, a[2 * bl + e][3] = lo + hi;
                } else {
                    a[2 * bl + e][0] = ak_sd_deq2s<0>(lo, sk[0], sk[1]);
                    a[2 * bl + e][1] = ak_sd_deq2s<1>(lo, sk[0], sk[1]);
                    a[2 * bl + e][2] = ak_sd_deq2s<0>(hi, sk[2], sk[3]);
                    a[2 * bl + e][3] = ak_sd_deq2s<1>(hi, sk[2], sk[3]);
                }
            }
        }
        ak_wgmma_fence();
#pragma unroll
        for (int m = 0; m < 4; m++) wgmma_m64n64k16_rs(o[m], a[m], dp + ((kc * 32) >> 4), 1);
        ak_wgmma_commit();
        ak_wgmma_wait<1>();
    }
    ak_wgmma_wait0();
#pragma unroll
    for (int m = 0; m < 4; m++)
#pragma unroll
        for (int k = 0; k < 32; k++) ak_reg_fence(o[m][k]);
}

/* O^T and this thread's row sums times the heads' factors of a tile (alpha in shared memory). */
__device__ __forceinline__ void rescale(float (*o)[32], float *lp, const float *alpha, int c4) {
    float al[16];
    bool any = false;
#pragma unroll
    for (int c = 0; c < 16; c++) al[c] = alpha[8 * (c >> 1) + 2 * c4 + (c & 1)], any |= al[c] != 1.0f;
    if (__any_sync(0xffffffffu, any)) {
#pragma unroll
        for (int m = 0; m < 4; m++)
#pragma unroll
            for (int k = 0; k < 32; k++) o[m][k] *= al[2 * (k >> 2) + (k & 1)];
#pragma unroll
        for (int c = 0; c < 16; c++) lp[c] *= al[c];
    }
}

/* This warp's 16 of tile n's 64 records (random slots of the pool) into stage n % NBUF, completing
   on FULL[n % NBUF]. */
__device__ __forceinline__ void copy_tile(uint8_t *smem, const uint8_t *pool, uint32_t bar, int n, int w, int lane) {
    const int b = n % NBUF;
    if (lane == 0) ak_mbar_arrive_tx(bar + 8 * b, 16u * STR);
    __syncwarp();
    if (lane < 16) {
        const int key = 16 * w + lane;
        const int64_t slot = probe_hash((uint32_t)(blockIdx.x * 7919 + n * 131 + key)) % NREC;
        probe_bulk_g2s(ak_smem_addr(smem + ST + b * TILE + key * STR), pool + slot * STR, STR, bar + 8 * b);
    }
}

template <int COPY, int MODE>
__global__ void __launch_bounds__(COPY == 2 ? 384 : 256, 1) sdq(long long *out, const uint8_t *pool, float sl) {
    extern __shared__ __align__(16) uint8_t smem_raw[];
    uint8_t *smem = smem_raw + ((1024u - (ak_smem_addr(smem_raw) & 1023u)) & 1023u);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const uint32_t bar = ak_smem_addr(smem + BAR);
    for (int k = tid; k < ST / 4; k += blockDim.x) reinterpret_cast<uint32_t *>(smem)[k] = fill(k + 977 * blockIdx.x, true);
    if (!COPY)
        for (int k = tid; k < NBUF * TILE / 4; k += blockDim.x)
            reinterpret_cast<uint32_t *>(smem + ST)[k] = probe_rec656_word((uint32_t)(k % (TILE / 4) + 41 * blockIdx.x), 3u);
    float *mrun = reinterpret_cast<float *>(smem + ML);
    for (int k = tid; k < 64; k += blockDim.x) mrun[k] = -INFINITY;
    if (tid == 0) {
        for (int b = 0; b < NBUF; b++) ak_mbar_init(bar + 8 * b, 4), ak_mbar_init(bar + 8 * (NBUF + b), 256);
    }
    ak_fence_proxy_async();
    __syncthreads();
    const long long t0 = clock64();
    if (COPY == 2) {
        if (warp >= 8) { /* the producer warpgroup: 16 records of every tile per warp */
            ak_setmaxnreg_dec<40>();
            for (int n = 0; n < T; n++) {
                ak_mbar_wait(bar + 8 * (NBUF + n % NBUF), ((n / NBUF) & 1) ^ 1);
                copy_tile(smem, pool, bar, n, warp - 8, lane);
            }
            return;
        }
        ak_setmaxnreg_inc<232>(); /* 128 x (40 + 2 x 232) <= 64 K */
    }
    const int wg = __shfl_sync(0xffffffffu, tid >> 7, 0), w = warp & 3, g = lane >> 2, c4 = lane & 3;
    float o[4][32], lp[16];
#pragma unroll
    for (int m = 0; m < 4; m++)
#pragma unroll
        for (int k = 0; k < 32; k++) o[m][k] = 0.0f;
#pragma unroll
    for (int c = 0; c < 16; c++) lp[c] = 0.0f;
    const uint64_t dq0 = ak_wgmma_desc_sw128(ak_smem_addr(smem + Q), 16, 1024);
    float *alpha = mrun + 64, *red = mrun + 256 + 256 * wg;
    const int k0 = 16 * w + g;
    if (COPY == 1) { /* tiles 0 and 2 (warpgroup 0), 1 (warpgroup 1) */
        copy_tile(smem, pool, bar, wg, w, lane);
        if (wg == 0) copy_tile(smem, pool, bar, 2, w, lane);
    }
    for (int n = wg; n < T; n += 2) {
        const int b = n % NBUF;
        if (COPY) ak_mbar_wait(bar + 8 * b, (n / NBUF) & 1);
        const uint8_t *st = smem + ST + b * TILE;
        const uint8_t *rw[2] = {st + k0 * STR, st + (k0 + 8) * STR};
        float sc[2][4];
#pragma unroll
        for (int hr = 0; hr < 2; hr++) {
            const float4 x = *reinterpret_cast<const float4 *>(rw[hr] + 512);
            sc[hr][0] = x.x, sc[hr][1] = x.y, sc[hr][2] = x.z, sc[hr][3] = x.w;
        }
        /* S^T in ak_sdr_main's operand map: 8 groups of 4 k16 steps from 16 bytes of each key, then the RoPE */
        float s[32];
#pragma unroll
        for (int grp = 0; grp < 9; grp++) {
            uint32_t a[4][4];
            s_frag(rw, sc, grp, c4, a);
            if ((MODE & 1) && grp < 8) { /* proxy: the raw words as the A values, no conversion */
#pragma unroll
                for (int hr = 0; hr < 2; hr++) {
                    const uint4 x = *reinterpret_cast<const uint4 *>(rw[hr] + 128 * (grp >> 1) + 32 * c4 + 16 * (grp & 1));
                    const uint32_t wd[4] = {x.x, x.y, x.z, x.w}, sv = __float_as_uint(sc[hr][grp >> 1]);
#pragma unroll
                    for (int q = 0; q < 4; q++) a[q][hr] = wd[q], a[q][2 + hr] = wd[q] ^ sv;
                }
            }
            ak_wgmma_fence();
#pragma unroll
            for (int q = 0; q < 4; q++) {
                const int kk = 4 * grp + q;
                wgmma_m64n64k16_rs(s, a[q], dq0 + ((uint32_t)((kk >> 2) * 8192 + (kk & 3) * 32) >> 4), kk > 0);
            }
            ak_wgmma_commit();
            ak_wgmma_wait<1>();
        }
        ak_wgmma_wait0();
#pragma unroll
        for (int k = 0; k < 32; k++) ak_reg_fence(s[k]), s[k] *= sl;
        if (n > 0) ak_bar_sync(2 + (wg ^ 1), 256); /* the other warpgroup's tile n - 1: m, alpha, P^T */
        /* the softmax of tile n: lazy maxima (rescale only past m + 8), P^T in the logical key order */
        float m_old[16], m_new[16];
        bool up = false;
#pragma unroll
        for (int c = 0; c < 16; c++) {
            const int j = c >> 1, e = c & 1;
            m_old[c] = mrun[8 * j + 2 * c4 + e];
            up |= fmaxf(s[4 * j + e], s[4 * j + 2 + e]) > m_old[c] + 8.0f;
        }
        const bool resc = ak_bar_any(4 + wg, 128, up);
        float al[16];
#pragma unroll
        for (int c = 0; c < 16; c++) m_new[c] = m_old[c], al[c] = 1.0f;
        if (resc) {
#pragma unroll
            for (int c = 0; c < 16; c++) {
                const int j = c >> 1, e = c & 1;
                float v = fmaxf(s[4 * j + e], s[4 * j + 2 + e]);
                v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 4));
                v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 8));
                v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 16));
                if (g == 0) red[64 * w + 8 * j + 2 * c4 + e] = v;
            }
            ak_bar_sync(4 + wg, 128);
#pragma unroll
            for (int c = 0; c < 16; c++) {
                const int h = 8 * (c >> 1) + 2 * c4 + (c & 1);
                const float mx = fmaxf(fmaxf(red[h], red[64 + h]), fmaxf(red[128 + h], red[192 + h]));
                m_new[c] = fmaxf(m_old[c], mx);
                al[c] = m_old[c] == -INFINITY ? 0.0f : ak_ex2(m_old[c] - m_new[c]);
            }
        }
        uint8_t *pt = smem + P + (n % 3) * 8192;
#pragma unroll
        for (int c = 0; c < 16; c++) {
            const int j = c >> 1, e = c & 1, h = 8 * j + 2 * c4 + e;
            const float p0 = ak_ex2(s[4 * j + e] - m_new[c]), p1 = ak_ex2(s[4 * j + 2 + e] - m_new[c]);
            lp[c] = lp[c] * al[c] + (p0 + p1);
            const int ch = 2 * w + (g >> 2);
            *reinterpret_cast<uint32_t *>(pt + h * 128 + ((ch ^ (h & 7)) << 4) + 4 * (g & 3)) = ak_sd_pack_bf16(p0, p1);
        }
        if (w == 0 && g == 0) {
#pragma unroll
            for (int c = 0; c < 16; c++) {
                const int h = 8 * (c >> 1) + 2 * c4 + (c & 1);
                mrun[h] = m_new[c];
                alpha[64 * (n % 3) + h] = al[c];
            }
        }
        ak_fence_proxy_async();
        ak_bar_arrive(2 + wg, 256); /* tile n's P^T for the other warpgroup */
        ak_bar_sync(4 + wg, 128);   /* and for this one */
        if (n > 0) { /* the other warpgroup's tile n - 1 first: its factors, then its P^T over our dims */
            rescale(o, lp, alpha + 64 * ((n - 1) % 3), c4);
            pv<MODE>(o, smem + ST + ((n - 1) % NBUF) * TILE, ak_wgmma_desc_sw128(ak_smem_addr(smem + P + ((n - 1) % 3) * 8192), 16, 1024),
               wg, w, g, c4);
            ak_mbar_arrive(bar + 8 * (NBUF + (n - 1) % NBUF));
            if (COPY == 1 && n + 2 < T) { /* tile n + 2 into tile n - 1's stage, once both warpgroups have read it */
                ak_mbar_wait(bar + 8 * (NBUF + (n - 1) % NBUF), ((n - 1) / NBUF) & 1);
                copy_tile(smem, pool, bar, n + 2, w, lane);
            }
        }
        if (__any_sync(0xffffffffu, resc)) {
#pragma unroll
            for (int m = 0; m < 4; m++)
#pragma unroll
                for (int k = 0; k < 32; k++) o[m][k] *= al[2 * (k >> 2) + (k & 1)];
        }
        pv<MODE>(o, st, ak_wgmma_desc_sw128(ak_smem_addr(pt), 16, 1024), wg, w, g, c4);
        ak_mbar_arrive(bar + 8 * (NBUF + b));
    }
    if (wg == 0) { /* the last tile (T even: warpgroup 1's) */
        ak_bar_sync(3, 256);
        rescale(o, lp, alpha + 64 * ((T - 1) % 3), c4);
        pv<MODE>(o, smem + ST + ((T - 1) % NBUF) * TILE, ak_wgmma_desc_sw128(ak_smem_addr(smem + P + ((T - 1) % 3) * 8192), 16, 1024), wg, w,
           g, c4);
    }
    float acc = 0.0f;
#pragma unroll
    for (int m = 0; m < 4; m++)
#pragma unroll
        for (int k = 0; k < 32; k++) acc += o[m][k];
#pragma unroll
    for (int c = 0; c < 16; c++) acc += lp[c];
    if (tid == 0) out[blockIdx.x] = clock64() - t0;
    if (acc == 1.2345f) out[1000] = 1; /* keeps the products live */
}

template <int COPY, int MODE> static void run(int sms, const uint8_t *pool, const char *what) {
    long long *dout;
    CK(cudaMalloc(&dout, 1024 * sizeof(long long)));
    CK(cudaMemset(dout, 0, 1024 * sizeof(long long)));
    CK(cudaFuncSetAttribute(sdq<COPY, MODE>, cudaFuncAttributeMaxDynamicSharedMemorySize, BYTES + 1024));
    std::vector<double> per;
    for (int rep = 0; rep < 3; rep++) {
        sdq<COPY, MODE><<<sms, COPY == 2 ? 384 : 256, BYTES + 1024>>>(dout, pool, 0.0625f);
        CK(cudaGetLastError());
        CK(cudaDeviceSynchronize());
        long long h[132];
        CK(cudaMemcpy(h, dout, sms * sizeof(long long), cudaMemcpyDeviceToHost));
        std::vector<long long> v(h, h + sms);
        std::sort(v.begin(), v.end());
        per.push_back((double)v[sms / 2] / T);
        if (rep == 2)
            printf("%s: cycles per 64-key tile and CTA (median of %d CTAs, %d tiles each): %.0f / %.0f / %.0f "
                   "(min %.0f, max %.0f)\n",
                   what, sms, T, per[0], per[1],
                   per[2], (double)v[0] / T, (double)v[sms - 1] / T);
    }
    CK(cudaFree(dout));
}

int main() {
    const int sms = probe_sms("sdq_probe");
    uint8_t *pool = probe_pool656(NREC);
    run<0, 0>(sms, pool, "records in place (256 threads)");
    run<1, 0>(sms, pool, "records copied by the consumers from a 1 GiB pool (256 threads)");
    run<2, 0>(sms, pool, "records copied by a producer warpgroup from a 1 GiB pool (384 threads, setmaxnreg 40 / 232)");
    run<0, 1>(sms, pool, "in place, proxy: S^T's A without conversion");
    run<0, 2>(sms, pool, "in place, proxy: V^T's A without conversion");
    run<0, 3>(sms, pool, "in place, proxy: neither converted");
    CK(cudaFree(pool));
    return 0;
}
