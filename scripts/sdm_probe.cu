/* sdm_probe.cu -- a 16-head sparse decode design that dequantizes each key once, in the registers
 * of the warps that use it for both products, timed without its epilogue (not part of the library;
 * docs/perf.md session 71). Timing only: the operands are random and no result is checked.
 *
 * The design: warp-level mma.sync m16n8k16 with the heads as M (16 heads: no padding), and the
 * NoPE dims split among the four warps of a consumer group: warp w owns value dims 128 w .. + 127
 * (the record's scale block w) and RoPE dims 16 w .. + 15. Per 32-key unit, warp w
 *   - loads its 32 bytes of each of its thread's keys from the raw record in the stage, converts
 *     them once (bf16_rn(float(v) s), exact) into the B fragments of S = Q K^T (K^T's fragment
 *     holds two dims of one key: the bytes are adjacent under a dim permutation shared with Q);
 *   - computes its partial S over its 144 dims (Q's A fragments held in registers for the whole
 *     CTA), and exchanges it with the group's other three warps through shared memory (one named
 *     barrier; each warp sums the four partials in the same order, so all four hold the same S,
 *     the same running maxima and the same P);
 *   - turns the same registers into V's B fragments of O = P V (two keys of one dim) with
 *     movmatrix.trans, 8x8 block by block, while the other warps catch up;
 *   - takes P's A fragments straight from S's accumulators and adds P V over its 128 dims.
 * No bf16 K buffer exists, so the only per-key bytes in shared memory are the raw records (bulk
 * copy in, one read out) and the 2 KB of partial S per warp and unit.
 * G consumer groups take the units in turn (u % G), each with its own running state (merged at the
 * end in a kernel; not timed here).
 *
 * COPY 0: the stages filled once (the consumers alone); COPY 1: PW producer warps bulk-copy every
 * unit's records from random slots of a pool (656 MB, or 5.4 MB that stays in L2) into a ring of
 * NST stages; COPY 2: the same by 16-byte cp.async over the lanes; COPY 3: as COPY 1's launch (384
 * threads, setmaxnreg 40 / 232) with the producer warps idle, so the consumer code is COPY 1's.
 * COPY 4 (x288, session 72): no producers and no stages; each consumer thread loads its own words
 * of its four keys of the group's next unit from global memory into registers (16-byte `ld.global.nc`,
 * 64 contiguous bytes of a record per warp and instruction) right after converting the current
 * unit, so one unit per group is in flight while the group computes.
 * VAR 1: producer warp 0 issues every copy; VAR 2: 64 bytes a record instead of 656.
 * MODE bits (proxies, results wrong on purpose): 1 no conversion (raw words as bf16), 2 no
 * movmatrix, 4 no exchange (each warp's partial S taken as the whole), 8 the consumers only wait
 * and release (COPY 4: only load and fold the words), 16 no products (the operands folded in by
 * integer operations).
 * With copies it also prints CTA 0's per-tile EMPTY wait and copy issue time of each producer warp
 * (COPY 2 reports no issue time) and the FULL wait of each consumer warp.
 *
 * With no argument it runs session 71's table; with `l` session 72's (COPY 4 against its bases).
 * Prints cycles per 64-key tile and CTA; today's swap-AB kernel takes ~3.9k a tile at b 128 h_q 16
 * on the H200 (134k cycles a CTA of 32 tiles), and the 55 us target needs ~3.1k.
 * build: nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -DAK_HAVE_CUDA -Iinclude -Isrc
 *        scripts/sdm_probe.cu -o /tmp/sdm_probe */
#include "cuda/sparse_decode.cuh"
#include "probe.cuh"
#include <algorithm>
#include <vector>

enum { U = 512, STR = 656, UNIT = 32 * STR, NST = 6 };
static const int64_t NREC = 1ll << 20; /* records in the pool (a power of two: slots by mask) */

template <int G> struct map {
    enum {
        ST = 0,                           /* [NST][32 keys][STR] raw records */
        RED = ST + NST * UNIT,            /* [G][2 parities][4 warps][4 n-tiles][32 lanes] float4 partial S */
        BAR = RED + G * 2 * 4 * 4 * 32 * 16, /* FULL[NST], EMPTY[NST] */
        BYTES = BAR + 16 * NST
    };
};

__device__ __forceinline__ uint32_t movt(uint32_t x) {
    uint32_t y;
    asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(y) : "r"(x));
    return y;
}

/* COPY 4: a consumer thread's words of keys 8 j + g (j < 4) of unit u, straight from the pool: 32
   bytes of warp w's scale block (two 16-byte loads 64 bytes apart, so that a warp's instruction
   reads 64 contiguous bytes of each of its eight records), the block's scale and 8 bytes of RoPE. */
struct kwords {
    uint4 x0[4], x1[4];
    float sc[4];
    uint2 rp[4];
};
__device__ __forceinline__ void load_unit(kwords &k, const uint8_t *pool, int64_t nrec, int u, int w, int g, int c4) {
#pragma unroll
    for (int j = 0; j < 4; j++) {
        const int64_t slot = probe_hash((uint32_t)(blockIdx.x * 7919 + u * 131 + 8 * j + g)) & (nrec - 1);
        const uint8_t *rec = pool + slot * STR;
        k.x0[j] = __ldg(reinterpret_cast<const uint4 *>(rec + 128 * w + 16 * c4));
        k.x1[j] = __ldg(reinterpret_cast<const uint4 *>(rec + 128 * w + 64 + 16 * c4));
        k.sc[j] = __ldg(reinterpret_cast<const float *>(rec + 512 + 4 * w));
        k.rp[j] = __ldg(reinterpret_cast<const uint2 *>(rec + 528 + 32 * w + 8 * c4));
    }
}

/* COPY 1-3 launch producer warps; COPY 1 and 2 also issue copies into the stages (with mbarriers). */
__host__ __device__ constexpr bool has_producers(int copy) { return copy >= 1 && copy <= 3; }
__host__ __device__ constexpr bool copies_stages(int copy) { return copy == 1 || copy == 2; }

template <int G, int COPY, int MODE, int PW, int VAR>
__global__ void __launch_bounds__(has_producers(COPY) ? 32 * PW + 128 * G : 128 * G, 1) sdm(long long *out, const uint8_t *pool, float sl, int64_t nrec) {
    typedef map<G> M;
    extern __shared__ __align__(16) uint8_t smem_raw[];
    uint8_t *smem = smem_raw + ((1024u - (ak_smem_addr(smem_raw) & 1023u)) & 1023u);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const uint32_t bar = ak_smem_addr(smem + M::BAR);
    for (int k = tid; k < NST * UNIT / 4; k += blockDim.x)
        reinterpret_cast<uint32_t *>(smem + M::ST)[k] = probe_rec656_word((uint32_t)(k % (UNIT / 4) + 41 * blockIdx.x), 3u);
    if (tid == 0)
        for (int b = 0; b < NST; b++) ak_mbar_init(bar + 8 * b, COPY == 2 ? 32 * PW : (VAR & 1) ? 1 : PW), ak_mbar_init(bar + 8 * (NST + b), 4);
    ak_fence_proxy_async();
    __syncthreads();
    const long long t0 = clock64();
    if (has_producers(COPY)) {
        if (warp < PW) { /* producers: records KPW warp .. of every unit */
            enum { KPW = (VAR & 1) ? 32 : 32 / PW, CB = (VAR & 2) ? 64 : STR /* VAR 2: 64 bytes a record */ };
            if (G == 2) ak_setmaxnreg_dec<40>();
            if (COPY == 3) return; /* the same consumer code, no copies: stages filled once */
            if ((VAR & 1) && warp > 0) return; /* VAR 1: warp 0 issues every copy (scheduler 0 only) */
            long long tw = 0, ti = 0;
            for (int u = 0; u < U; u++) {
                const int b = u % NST;
                const long long ta = clock64();
                ak_mbar_wait(bar + 8 * (NST + b), ((u / NST) & 1) ^ 1);
                const long long tb = clock64();
                tw += tb - ta;
                if (COPY == 2) { /* 16-byte cp.async chunks over the lanes, one noinc arrival per lane */
                    int64_t sl = 0;
                    if (lane < KPW) sl = probe_hash((uint32_t)(blockIdx.x * 7919 + u * 131 + KPW * warp + lane)) & (nrec - 1);
#pragma unroll
                    for (int i = 0; i < (KPW * 41 + 31) / 32; i++) {
                        const int c = lane + 32 * i, k = c / 41, off = 16 * (c - 41 * k);
                        const int64_t slot = __shfl_sync(0xffffffffu, sl, k < KPW ? k : 0);
                        if (c < KPW * 41)
                            ak_cp_async16(ak_smem_addr(smem + M::ST + b * UNIT + (KPW * warp + k) * STR + off),
                                          pool + slot * STR + off, 16);
                    }
                    ak_cp_async_mbar_arrive(bar + 8 * b);
                    continue;
                }
                if (lane == 0) ak_mbar_arrive_tx(bar + 8 * b, KPW * CB);
                __syncwarp();
                if (lane < KPW) {
                    const int key = KPW * warp + lane;
                    const int64_t slot = probe_hash((uint32_t)(blockIdx.x * 7919 + u * 131 + key)) & (nrec - 1);
                    probe_bulk_g2s(ak_smem_addr(smem + M::ST + b * UNIT + key * STR), pool + slot * STR, CB, bar + 8 * b);
                }
                __syncwarp();
                ti += clock64() - tb;
            }
            if (lane == 0) out[2048 + 8 * blockIdx.x + warp] = tw, out[4096 + 8 * blockIdx.x + warp] = ti;
            return;
        }
        if (G == 2 && PW == 4) ak_setmaxnreg_inc<232>(); /* 128 x 40 + 256 x 232 <= 64 K; 256 threads need none */
        if (G == 2 && PW == 8) ak_setmaxnreg_inc<216>(); /* 256 x 40 + 256 x 216 = 64 K */
    }
    const int cw = __shfl_sync(0xffffffffu, has_producers(COPY) ? warp - PW : warp, 0);
    const int grp = cw >> 2, w = cw & 3, g = lane >> 2, c4 = lane & 3;
    uint32_t qa[9][4]; /* Q's A fragments over this warp's 144 dims (random here) */
#pragma unroll
    for (int s = 0; s < 9; s++)
#pragma unroll
        for (int i = 0; i < 4; i++) qa[s][i] = fill(tid * 37 + s * 4 + i + 977 * blockIdx.x, true);
    float o[16][4], m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};
#pragma unroll
    for (int n = 0; n < 16; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) o[n][e] = 0.0f;
    float4 *red = reinterpret_cast<float4 *>(smem + M::RED) + grp * 2 * 4 * 4 * 32;
    long long cwt = 0;
    /* COPY 4: this thread's words of the group's next unit, loaded into registers */
    kwords gk;
    if (COPY == 4) load_unit(gk, pool, nrec, grp, w, g, c4);
    uint32_t fold = 0;
    for (int u = grp, it = 0; u < U; u += G, it++) {
        const int b = u % NST;
        const long long ca = clock64();
        if (copies_stages(COPY)) ak_mbar_wait(bar + 8 * b, (u / NST) & 1);
        cwt += clock64() - ca;
        if (MODE & 8) {
            __syncwarp();
            if (copies_stages(COPY) && lane == 0) ak_mbar_arrive(bar + 8 * (NST + b));
            if (COPY == 4) { /* loads only: fold this unit's words, load the next unit's */
#pragma unroll
                for (int j = 0; j < 4; j++)
                    fold ^= gk.x0[j].x ^ gk.x0[j].w ^ gk.x1[j].y ^ gk.x1[j].z ^ __float_as_uint(gk.sc[j]) ^ gk.rp[j].x ^ gk.rp[j].y;
                load_unit(gk, pool, nrec, u + G, w, g, c4);
            }
            continue;
        }
        const uint8_t *sp = smem + M::ST + b * UNIT;
        uint32_t kb[4][8][2], kr[4][2];
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const uint8_t *rec = sp + (8 * j + g) * STR;
            uint4 x0, x1;
            float sc;
            uint2 rp;
            if (COPY == 4) {
                x0 = gk.x0[j], x1 = gk.x1[j], sc = gk.sc[j], rp = gk.rp[j];
            } else {
                x0 = *reinterpret_cast<const uint4 *>(rec + 128 * w + 32 * c4);
                x1 = *reinterpret_cast<const uint4 *>(rec + 128 * w + 32 * c4 + 16);
                sc = *reinterpret_cast<const float *>(rec + 512 + 4 * w);
                rp = *reinterpret_cast<const uint2 *>(rec + 528 + 32 * w + 8 * c4);
            }
            const uint32_t wd[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
#pragma unroll
            for (int s = 0; s < 8; s++) {
                if (MODE & 1) {
                    kb[j][s][0] = wd[s];
                    kb[j][s][1] = wd[s] ^ __float_as_uint(sc);
                } else {
                    kb[j][s][0] = ak_sd_deq2<0>(wd[s], sc);
                    kb[j][s][1] = ak_sd_deq2<1>(wd[s], sc);
                }
            }
            kr[j][0] = rp.x, kr[j][1] = rp.y;
        }
        if (COPY == 4 && u + G < U) load_unit(gk, pool, nrec, u + G, w, g, c4); /* in flight while this unit computes */
        __syncwarp();
        if (copies_stages(COPY) && lane == 0) ak_mbar_arrive(bar + 8 * (NST + b)); /* EMPTY: this warp's reads are in registers */
        float sp4[4][4];
#pragma unroll
        for (int j = 0; j < 4; j++) {
#pragma unroll
            for (int e = 0; e < 4; e++) sp4[j][e] = 0.0f;
            if (MODE & 16) { /* proxy: no products, the operands folded in */
#pragma unroll
                for (int s = 0; s < 8; s++) sp4[j][s & 3] += __uint_as_float(kb[j][s][0] ^ kb[j][s][1]);
                sp4[j][0] += __uint_as_float(kr[j][0] ^ kr[j][1] ^ qa[j][0]);
            } else {
#pragma unroll
                for (int s = 0; s < 8; s++) ak_mma_bf16_16816(sp4[j], qa[s], kb[j][s][0], kb[j][s][1]);
                ak_mma_bf16_16816(sp4[j], qa[8], kr[j][0], kr[j][1]);
            }
        }
        float4 *rp = red + (it & 1) * 4 * 4 * 32;
        if (!(MODE & 4))
#pragma unroll
            for (int j = 0; j < 4; j++) rp[(w * 4 + j) * 32 + lane] = make_float4(sp4[j][0], sp4[j][1], sp4[j][2], sp4[j][3]);
        /* V's B fragments from K^T's, in place: block (keys 8 j .., dims of half h of step s) */
        if (!(MODE & 2))
#pragma unroll
            for (int j = 0; j < 4; j++)
#pragma unroll
                for (int s = 0; s < 8; s++) kb[j][s][0] = movt(kb[j][s][0]), kb[j][s][1] = movt(kb[j][s][1]);
        float s4[4][4];
        if (!(MODE & 4)) {
            ak_bar_sync(1 + grp, 128);
#pragma unroll
            for (int j = 0; j < 4; j++) {
                float4 t = rp[j * 32 + lane];
#pragma unroll
                for (int v = 1; v < 4; v++) {
                    const float4 x = rp[(v * 4 + j) * 32 + lane];
                    t.x += x.x, t.y += x.y, t.z += x.z, t.w += x.w;
                }
                s4[j][0] = t.x, s4[j][1] = t.y, s4[j][2] = t.z, s4[j][3] = t.w;
            }
        } else {
#pragma unroll
            for (int j = 0; j < 4; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) s4[j][e] = sp4[j][e];
        }
        /* online softmax over rows g (e 0, 1) and g + 8 (e 2, 3), lazy rescale past m + 8 */
        float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) s4[j][e] *= sl, mx[e >> 1] = fmaxf(mx[e >> 1], s4[j][e]);
        const bool keep = __all_sync(0xffffffffu, mx[0] <= m_run[0] + 8.0f && mx[1] <= m_run[1] + 8.0f);
        float al[2] = {1.0f, 1.0f};
        if (!keep) {
#pragma unroll
            for (int hr = 0; hr < 2; hr++) {
                mx[hr] = fmaxf(mx[hr], __shfl_xor_sync(0xffffffffu, mx[hr], 1));
                mx[hr] = fmaxf(mx[hr], __shfl_xor_sync(0xffffffffu, mx[hr], 2));
                const float m_new = fmaxf(m_run[hr], mx[hr]);
                al[hr] = m_run[hr] == -INFINITY ? 0.0f : ak_ex2(m_run[hr] - m_new);
                m_run[hr] = m_new;
                l_run[hr] *= al[hr];
            }
#pragma unroll
            for (int n = 0; n < 16; n++) o[n][0] *= al[0], o[n][1] *= al[0], o[n][2] *= al[1], o[n][3] *= al[1];
        }
        uint32_t pa[2][4];
#pragma unroll
        for (int j = 0; j < 4; j++) {
            float p[4];
#pragma unroll
            for (int e = 0; e < 4; e++) p[e] = ak_ex2(s4[j][e] - m_run[e >> 1]);
            l_run[0] += p[0] + p[1], l_run[1] += p[2] + p[3];
            pa[j >> 1][2 * (j & 1)] = ak_sd_pack_bf16(p[0], p[1]);
            pa[j >> 1][2 * (j & 1) + 1] = ak_sd_pack_bf16(p[2], p[3]);
        }
        /* O [16 heads x 128 dims] += P [16 x 32 keys] V: k-step q is keys 16 q .. (n-tiles 2 q, 2 q + 1) */
#pragma unroll
        for (int q = 0; q < 2; q++)
#pragma unroll
            for (int n = 0; n < 16; n++) {
                if (MODE & 16) o[n][q] += __uint_as_float(pa[q][n & 3] ^ kb[2 * q][n >> 1][n & 1] ^ kb[2 * q + 1][n >> 1][n & 1]);
                else ak_mma_bf16_16816(o[n], pa[q], kb[2 * q][n >> 1][n & 1], kb[2 * q + 1][n >> 1][n & 1]);
            }
    }
    float acc = l_run[0] + l_run[1] + __uint_as_float(fold);
#pragma unroll
    for (int n = 0; n < 16; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) acc += o[n][e];
    if (cw == 0 && lane == 0) out[blockIdx.x] = clock64() - t0;
    if (lane == 0) out[6144 + 8 * blockIdx.x + cw] = cwt;
    if (acc == 1.2345f) out[1000] = 1; /* keeps the products live */
}

template <int G, int COPY, int MODE, int PW = 4, int VAR = 0> static void run(int sms, const uint8_t *pool, const char *what, int64_t nrec = NREC) {
    typedef map<G> M;
    long long *dout;
    CK(cudaMalloc(&dout, 8192 * sizeof(long long)));
    CK(cudaMemset(dout, 0, 8192 * sizeof(long long)));
    CK(cudaFuncSetAttribute(sdm<G, COPY, MODE, PW, VAR>, cudaFuncAttributeMaxDynamicSharedMemorySize, M::BYTES + 1024));
    std::vector<double> per;
    const int threads = has_producers(COPY) ? 32 * PW + 128 * G : 128 * G;
    for (int rep = 0; rep < 3; rep++) {
        sdm<G, COPY, MODE, PW, VAR><<<sms, threads, M::BYTES + 1024>>>(dout, pool, 0.0625f, nrec);
        CK(cudaGetLastError());
        CK(cudaDeviceSynchronize());
        static long long h[8192];
        CK(cudaMemcpy(h, dout, 8192 * sizeof(long long), cudaMemcpyDeviceToHost));
        std::vector<long long> v(h, h + sms);
        std::sort(v.begin(), v.end());
        per.push_back((double)v[sms / 2] / (U / 2));
        if (rep == 2)
            printf("G %d COPY %d MODE %d PW %d VAR %d (%s): cycles per 64-key tile and CTA (median of %d CTAs, %d tiles): "
                   "%.0f / %.0f / %.0f (min %.0f, max %.0f)\n",
                   G, COPY, MODE, PW, VAR, what, sms, U / 2, per[0], per[1], per[2], (double)v[0] / (U / 2),
                   (double)v[sms - 1] / (U / 2));
        if (rep == 2 && copies_stages(COPY)) { /* per 64-key tile, CTA 0: producer warps' EMPTY wait and issue, consumer warps' FULL wait */
            printf("   CTA 0 per tile: producers EMPTY wait");
            for (int k = 0; k < ((VAR & 1) ? 1 : PW); k++) printf(" %.0f", (double)h[2048 + k] / (U / 2));
            printf(", issue");
            for (int k = 0; k < ((VAR & 1) ? 1 : PW); k++) printf(" %.0f", (double)h[4096 + k] / (U / 2));
            printf("; consumers FULL wait");
            for (int k = 0; k < 4 * G; k++) printf(" %.0f", (double)h[6144 + k] / (U / 2));
            printf("\n");
        }
    }
    CK(cudaFree(dout));
}

int main(int argc, char **argv) {
    const int sms = probe_sms("sdm_probe");
    uint8_t *pool = probe_pool656(NREC);
    const int64_t l2 = 1 << 13; /* 5.4 MB */
    run<2, 0, 0>(sms, pool, "records in place, 256 threads"); /* the base of both tables */
    run<2, 1, 0>(sms, pool, "bulk copies from DRAM");
    if (argc > 1 && argv[1][0] == 'l') { /* session 72: records loaded by the consumers themselves */
        run<2, 4, 0>(sms, pool, "consumers load from DRAM");
        run<2, 4, 0>(sms, pool, "consumers load from L2", l2);
        run<2, 4, 8>(sms, pool, "consumers load only (DRAM)");
        run<2, 4, 8>(sms, pool, "consumers load only (L2)", l2);
        run<2, 4, 7>(sms, pool, "consumers load (DRAM), proxy: products and softmax only");
        run<1, 4, 0>(sms, pool, "consumers load from DRAM, one group");
        run<2, 4, 0>(sms, pool, "consumers load from 16 records (L1)", 16);
        run<2, 4, 7>(sms, pool, "consumers load (16 records, L1), proxy: products and softmax only", 16);
        run<2, 4, 7>(sms, pool, "consumers load (L2), proxy: products and softmax only", l2);
        run<2, 4, 8>(sms, pool, "consumers load only (16 records, L1)", 16);
        run<2, 0, 7>(sms, pool, "in place, 256 threads, proxy: products and softmax only");
        CK(cudaFree(pool));
        return 0;
    }
    run<1, 0, 0>(sms, pool, "records in place, one group");
    run<2, 3, 0>(sms, pool, "records in place, 384 threads, producer warps idle");
    run<2, 0, 1>(sms, pool, "in place, proxy: no conversion");
    run<2, 0, 2>(sms, pool, "in place, proxy: no movmatrix");
    run<2, 0, 4>(sms, pool, "in place, proxy: no exchange");
    run<2, 0, 16>(sms, pool, "in place, proxy: no products");
    run<2, 3, 7>(sms, pool, "in place, 384 threads, proxy: products and softmax only");
    run<2, 1, 0>(sms, pool, "bulk copies from L2", l2);
    run<2, 1, 8>(sms, pool, "copies only (DRAM)");
    run<2, 1, 8>(sms, pool, "copies only (L2)", l2);
    run<2, 1, 16>(sms, pool, "copies (L2), proxy: no products", l2);
    run<2, 1, 7>(sms, pool, "copies (L2), proxy: products and softmax only", l2);
    run<2, 1, 0, 4, 2>(sms, pool, "copies of 64 bytes a record (DRAM)");
    run<2, 1, 0, 8>(sms, pool, "eight producer warps");
    run<2, 1, 0, 4, 1>(sms, pool, "producer warp 0 issues every copy");
    run<2, 2, 0>(sms, pool, "16-byte cp.async instead of bulk copies");
    CK(cudaFree(pool));
    return 0;
}
