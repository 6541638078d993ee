#!/usr/bin/env python3
"""sd_trace.py DIR -- instruments a copy of the tree at DIR (never the working tree) for per-unit
timelines of the sparse decode kernels: clock64 stamps of the producer (warp 0, lane 0) and the
consumers (their first thread) of ak_sdx_main (64-head tiles), ak_sdt_main (swap-AB) and ak_sdr_main
(register-dequantizing; consumer warpgroup 0), written to a device array for 64 sampled CTAs,
printed by `attnkit bench` after each mla_decode_sparse case as averages in cycles (docs/perf.md,
sessions 13 and 27); %globaltimer stamps of ak_sd_main and the combine (session 24). Run through
scripts/sd_trace.sh."""
import sys
d = sys.argv[1]
f=d+'/src/cuda/sparse_decode_wgmma.cu'
s=open(f).read()
hdr='''
/* sd_trace.py: stamps; streams 0-18 (ak_sdx_main), ak_tr2 (ak_sdt_main) */
#define AK_TR_CTAS 64
#define AK_TR_N 80
#define AK_TR_S 19
__device__ unsigned long long ak_tr[AK_TR_CTAS][AK_TR_S][AK_TR_N];
__device__ __forceinline__ unsigned long long ak_clk() { unsigned long long t; asm volatile("mov.u64 %0, %%clock64;" : "=l"(t)::"memory"); return t; }
__device__ __forceinline__ int ak_trc() { int stride = gridDim.x > 256 ? 8 : gridDim.x > 64 ? 4 : 1; return blockIdx.x % stride == 0 && blockIdx.x / stride < AK_TR_CTAS ? (int)(blockIdx.x / stride) : -1; }
#define TR(sx, jx) do { const int c_ = ak_trc(); if (c_ >= 0 && (jx) < AK_TR_N) ak_tr[c_][sx][jx] = ak_clk(); } while (0)
'''
i=s.index('/* Byte offset of the 16-byte chunk')
s=s[:i]+hdr+s[i:]
def rep(old,new,count=1):
    global s
    n=s.count(old)
    assert n>=count, (old,n)
    s=s.replace(old,new,count)
# producer (sdx): streams 3 P_SW,4 P_SD,5 P_ED,6 P_FA, 10 P_CI (copy issue start)
rep('''        const int un = NST == 3 ? uc : ub;\n''','''        const int un = NST == 3 ? uc : ub;\n        if (w == 0 && lane == 0) TR(10, j);\n''')
rep('''        ak_mbar_wait(sbar + 8 * (j % NST), (j / NST) & 1); /* unit a's records landed */
        const int b = j % NBUF;
        ak_mbar_wait(bar + 8 * (NBUF + b), ((j / NBUF) & 1) ^ 1); /* EMPTY[b] */''','''        if (w == 0 && lane == 0) TR(3, j);
        ak_mbar_wait(sbar + 8 * (j % NST), (j / NST) & 1); /* unit a's records landed */
        if (w == 0 && lane == 0) TR(4, j);
        const int b = j % NBUF;
        ak_mbar_wait(bar + 8 * (NBUF + b), ((j / NBUF) & 1) ^ 1); /* EMPTY[b] */
        if (w == 0 && lane == 0) TR(5, j);''')
rep('''        ak_mbar_arrive(bar + 8 * b); /* FULL[b] */\n''','''        ak_mbar_arrive(bar + 8 * b); /* FULL[b] */\n        if (w == 0 && lane == 0) TR(6, j);\n''')
# kernel start
rep('''static_assert(AK_SDW_HEADS * AK_SDX_XSTR * 4 <= ak_sdx_map<LAYOUT>::VALID, "staged rows fit before the masks");
''','''static_assert(AK_SDW_HEADS * AK_SDX_XSTR * 4 <= ak_sdx_map<LAYOUT>::VALID, "staged rows fit before the masks");
    if (threadIdx.x == 0) TR(7, 9);
''')
rep('''ak_mbar_init(bar + 8 * M::EPI, 256); /* every consumer thread */
    }
    __syncthreads();
    ak_grid_dep_wait();''','''ak_mbar_init(bar + 8 * M::EPI, 256); /* every consumer thread */
    }
    __syncthreads();
    ak_grid_dep_wait();
    if (threadIdx.x == 0) TR(7, 0);''')
rep('''    ak_fence_proxy_async(); /* Q tile writes -> the wgmma (async proxy) reads */
    ak_bar_sync(1, 256);
''','''    ak_fence_proxy_async(); /* Q tile writes -> the wgmma (async proxy) reads */
    ak_bar_sync(1, 256);
    if (ctid == 0) TR(7, 1);
''')
# consumer wg1: first wait
rep('''        if (u < u_end) {
            ak_mbar_wait(bar, 0);
''','''        if (u < u_end) {
            if (ctid == 0) TR(0, 0);
            ak_mbar_wait(bar, 0);
            if (ctid == 0) TR(1, 0);
''')
rep('''            ak_sdx_softmax(ex ? kq.sl[1] : kq.sl[0], ex ? kq.rel[1] : kq.rel[0], s, kv, c4, m_run, l_run, pa, o, alpha);''','''            ak_sdx_softmax(ex ? kq.sl[1] : kq.sl[0], ex ? kq.rel[1] : kq.rel[0], s, kv, c4, m_run, l_run, pa, o, alpha);
            if (ctid == 0) TR(2, j);''')
rep('''                ak_mbar_wait(bar + 8 * ((j + 1) % NBUF), ((j + 1) / NBUF) & 1); /* FULL */''','''                if (ctid == 0) TR(0, j + 1);
                ak_mbar_wait(bar + 8 * ((j + 1) % NBUF), ((j + 1) / NBUF) & 1); /* FULL */
                if (ctid == 0) TR(1, j + 1);''')
rep('''        if (c4 == 0)
#pragma unroll
            for (int hr = 0; hr < 2; hr++) ml_s[rows[hr]] = m_run[hr], ml_s[64 + rows[hr]] = l_run[hr];''','''        if (ctid == 0) TR(7, 2);
        if (c4 == 0)
#pragma unroll
            for (int hr = 0; hr < 2; hr++) ml_s[rows[hr]] = m_run[hr], ml_s[64 + rows[hr]] = l_run[hr];''')
# wg2
rep('''            ak_bar_sync(2, 256); /* P and alpha of unit j */''','''            if (ctid == 128) TR(11, j);
            ak_bar_sync(2, 256); /* P and alpha of unit j */''')
# stamp 8 follows the use of the P loads: a clock read right after the barrier's
# BAR.SYNC.DEFER_BLOCKING issues before the barrier completes, so there it stamped warpgroup 2's
# arrival (session 52)
rep('''            if (!__all_sync(0xffffffffu, a0 == 1.0f && a1 == 1.0f)) ak_sdx_rescale(o, a0, a1);''', '''            if (!__all_sync(0xffffffffu, a0 == 1.0f && a1 == 1.0f)) ak_sdx_rescale(o, a0, a1);
            if (ctid == 128) TR(8, j);''')
rep('''            ak_mbar_arrive(bar + 8 * (NBUF + b)); /* EMPTY[b] */
            /* the next unit after the release''','''            ak_mbar_arrive(bar + 8 * (NBUF + b)); /* EMPTY[b] */
            if (ctid == 128) TR(9, j);
            /* the next unit after the release''')
# end
rep('''    if (ORD == 0 || pslot >= 0 || p.out_bulk)
        ak_sdw_write_staged<ORD == 0>(p, smem + M::Q, alpha_s,''', '''    if (ctid == 0) TR(7, 3);
    if (ORD == 0 || pslot >= 0 || p.out_bulk)
        ak_sdw_write_staged<ORD == 0>(p, smem + M::Q, alpha_s,''')
rep('''        ak_sdw_write_rows(p, o, m_run, l_run, kq.ref, r, i, h0, wg, wr, g, c4);
}''', '''        ak_sdw_write_rows(p, o, m_run, l_run, kq.ref, r, i, h0, wg, wr, g, c4);
    __syncwarp();
    if (ctid == 0) TR(7, 4);
}''')
# consumer 1: the P barrier passed (14) and S of the next unit complete (15)
rep('''            ak_bar_sync(2, 256); /* P and alpha of this unit are ready */
''', '''            ak_bar_sync(2, 256); /* P and alpha of this unit are ready */
            if (ctid == 0) TR(14, j);
''')
rep('''            ak_wgmma_wait0();
#pragma unroll
            for (int k = 0; k < 128; k++) ak_reg_fence(o[k]);
            u = un;
''', '''            ak_wgmma_wait0();
            if (ctid == 0) TR(15, j + 1);
#pragma unroll
            for (int k = 0; k < 128; k++) ak_reg_fence(o[k]);
            u = un;
''')
# copy call (13) and conversion end (12) of the producer's step
rep('''                                                  sbar + 8 * st, pol);
        }
''', '''                                                  sbar + 8 * st, pol);
        }
        if (w == 0 && lane == 0) TR(13, j);
''')
rep('''                                        lanes, lane);
''', '''                                        lanes, lane);
        if (w == 0 && lane == 0) TR(12, j);
''')
# the tensor pipe's order: warpgroup 2's P V issued (16), warpgroup 1's next S issued (17) and its
# own P V done (18), each indexed by the unit whose P V it is
rep('''            ak_wgmma_commit();
            ak_wgmma_wait0();
#pragma unroll
            for (int k = 0; k < 128; k++) ak_reg_fence(o[k]);
            ak_mbar_arrive(bar + 8 * (NBUF + b)); /* EMPTY[b] */
            if (ctid == 128) TR(9, j);''', '''            ak_wgmma_commit();
            if (ctid == 128) TR(16, j);
            ak_wgmma_wait0();
#pragma unroll
            for (int k = 0; k < 128; k++) ak_reg_fence(o[k]);
            ak_mbar_arrive(bar + 8 * (NBUF + b)); /* EMPTY[b] */
            if (ctid == 128) TR(9, j);''')
rep('''                ak_sdx_qk<KSTEPS>(s, dq0, ak_wgmma_desc_add(dk0, ((j + 1) % NBUF) * KBUF));
''', '''                ak_sdx_qk<KSTEPS>(s, dq0, ak_wgmma_desc_add(dk0, ((j + 1) % NBUF) * KBUF));
                if (ctid == 0) TR(17, j);
''')
rep('''                ak_wgmma_wait<1>();
            } else {''', '''                ak_wgmma_wait<1>();
                if (ctid == 0) TR(18, j);
            } else {''')
# host side: averages over the sampled CTAs, printed after each case (the cmd_bench.c hook below)
s += '''
#include <stdio.h>
extern "C" void ak_trace_dump_sdt(const char *tag);
extern "C" void ak_trace_dump(const char *tag) {
    ak_trace_dump_sdt(tag);
    static unsigned long long h[AK_TR_CTAS][AK_TR_S][AK_TR_N];
    if (cudaDeviceSynchronize() != cudaSuccess || cudaMemcpyFromSymbol(h, ak_tr, sizeof h) != cudaSuccess) return;
    static unsigned long long z[AK_TR_CTAS][AK_TR_S][AK_TR_N];
    cudaMemcpyToSymbol(ak_tr, z, sizeof z);
    double a[21] = {0}, xa[2] = {0}, ph[2][3] = {{0}}, ta[10] = {0};
    int nc = 0;
    for (int c = 0; c < AK_TR_CTAS; c++) {
        unsigned long long *m = h[c][7];
        if (m[0] == 0 || m[4] == 0) continue;
        int n = 0;
        while (n < AK_TR_N && h[c][1][n] != 0) n++;
        if (n < 2) continue;
        double v[21] = {0}, x[2] = {0};
        for (int j = 0; j < n; j++) {
            v[5] += (double)(h[c][1][j] - h[c][0][j]);                 /* consumer 1's FULL wait */
            if (h[c][2][j]) v[6] += (double)(h[c][2][j] - h[c][1][j]); /* FULL seen -> softmax done */
            if (h[c][4][j]) {
                v[7] += (double)(h[c][4][j] - h[c][3][j]); /* stage wait */
                v[8] += (double)(h[c][5][j] - h[c][4][j]); /* EMPTY wait */
                v[9] += (double)(h[c][6][j] - h[c][5][j]); /* conversion, fence, FULL arrival */
            }
            if (h[c][10][j] && h[c][3][j]) v[10] += (double)(h[c][3][j] - h[c][10][j]); /* copies, next slots */
            if (h[c][13][j]) v[18] += (double)(h[c][13][j] - h[c][10][j]); /* the copy call alone */
            if (h[c][12][j]) v[19] += (double)(h[c][6][j] - h[c][12][j]);  /* fence and arrival alone */
            if (h[c][8][j]) v[11] += (double)(h[c][8][j] - h[c][11][j]), v[12] += (double)(h[c][9][j] - h[c][8][j]);
            if (j > 0 && h[c][15][j] && h[c][2][j]) v[20] += (double)(h[c][15][j] - h[c][1][j]), x[0] += (double)(h[c][2][j] - h[c][15][j]);
            if (h[c][14][j] && h[c][2][j]) x[1] += (double)(h[c][14][j] - h[c][2][j]);
        }
        x[0] /= n; x[1] /= n; xa[0] += x[0]; xa[1] += x[1];
        {   /* the tensor pipe's order in unit j: when each product was issued and done, after warpgroup
               1's P barrier stamp (14) and after warpgroup 2 has used its P loads (8); and when the
               producer's wait for the buffer's EMPTY ended (5 of step j + 2: two K buffers) */
            int m = 0;
            double y[10] = {0};
            for (int j = 0; j + 1 < n; j++) {
                if (!h[c][16][j] || !h[c][17][j] || !h[c][18][j] || !h[c][14][j] || !h[c][8][j] || !h[c][15][j + 1]) continue;
                y[0] += (double)(h[c][16][j] - h[c][8][j]);      /* WG2: P loaded -> its P V issued */
                y[1] += (double)(h[c][17][j] - h[c][14][j]);     /* WG1: P barrier -> next S issued */
                y[2] += (double)(h[c][18][j] - h[c][14][j]);     /* WG1: P barrier -> its P V done */
                y[3] += (double)(h[c][15][j + 1] - h[c][14][j]); /* WG1: P barrier -> next S done */
                y[4] += (double)(h[c][9][j] - h[c][8][j]);       /* WG2: P loaded -> its P V done, EMPTY */
                y[5] += h[c][16][j] < h[c][17][j] ? 1.0 : 0.0;   /* WG2's P V issued before S's issue ended */
                y[6] += h[c][9][j] < h[c][15][j + 1] ? 1.0 : 0.0; /* WG2's P V done before S */
                y[9] += (double)h[c][8][j] - (double)h[c][14][j]; /* WG2's P loaded, after WG1's barrier stamp */
                if (j + 2 < n && h[c][5][j + 2]) y[7] += (double)h[c][5][j + 2] - (double)h[c][9][j], y[8] += 1.0; /* EMPTY seen by the producer (two buffers) */
                m++;
            }
            if (m > 0) {
                for (int k = 0; k < 7; k++) ta[k] += y[k] / m;
                ta[9] += y[9] / m;
                if (y[8] > 0) ta[7] += y[7] / y[8];
                ta[8] += 1.0;
            }
        }
        /* phases: how much of the producer's copy call (10 -> 13) and of its conversion (5 -> 12)
           falls inside consumer 1's wait for S (1 -> 15) and inside its softmax (15 -> 2), over all
           units of the CTA (one clock: the same SM) */
        for (int j = 0; j < n; j++) {
            const unsigned long long ivs[2][2] = {{h[c][10][j], h[c][13][j]}, {h[c][5][j], h[c][12][j]}};
            for (int q = 0; q < 2; q++) {
                const unsigned long long b0 = ivs[q][0], b1 = ivs[q][1];
                if (b0 == 0 || b1 <= b0) continue;
                ph[q][0] += (double)(b1 - b0);
                for (int k = 1; k < n; k++) {
                    const unsigned long long w[2][2] = {{h[c][1][k], h[c][15][k]}, {h[c][15][k], h[c][2][k]}};
                    for (int e = 0; e < 2; e++) {
                        if (w[e][0] == 0 || w[e][1] <= w[e][0]) continue;
                        const unsigned long long lo = b0 > w[e][0] ? b0 : w[e][0], hi = b1 < w[e][1] ? b1 : w[e][1];
                        if (hi > lo) ph[q][1 + e] += (double)(hi - lo);
                    }
                }
            }
        }
        for (int k = 5; k < 21; k++) v[k] /= n;
        v[0] = (double)(m[0] - m[9]);               /* griddepcontrol.wait */
        v[1] = (double)(m[1] - m[0]);               /* Q in shared memory */
        v[2] = (double)(h[c][1][0] - m[0]);         /* first FULL seen */
        v[3] = (double)(h[c][6][0] - m[0]);         /* first FULL arrival */
        v[4] = (double)(h[c][1][n - 1] - h[c][1][0]) / (n - 1); /* unit cycle */
        v[13] = (double)(m[2] - h[c][1][n - 1]);
        v[14] = (double)(m[3] - m[2]);
        v[15] = (double)(m[4] - m[3]);
        v[16] = (double)(m[4] - m[9]);
        v[17] = n;
        for (int k = 0; k < 21; k++) a[k] += v[k];
        nc++;
    }
    if (nc == 0) return;
    for (int k = 0; k < 21; k++) a[k] /= nc;
    if (ta[8] > 0)
        fprintf(stderr, "trace %s: order per unit, cycles after the P barrier (WG1's stamp; WG2's from its P loaded, %.0f after it): WG2 P V issued %.0f, WG1 S issued %.0f, WG1 P V done %.0f, "
                "S done %.0f, WG2 P V done (EMPTY) %.0f | WG2 P V issued before S %.0f%%, done before S %.0f%% | "
                "WG2's EMPTY -> producer's EMPTY wait end (two buffers) %.0f\\n", tag, ta[9] / ta[8], ta[0] / ta[8], ta[1] / ta[8], ta[2] / ta[8],
                ta[3] / ta[8], ta[4] / ta[8], 100 * ta[5] / ta[8], 100 * ta[6] / ta[8], ta[7] / ta[8]);
    fprintf(stderr, "trace %s: consumer 1 per unit: FULL seen -> S done %.0f, S done -> softmax done %.0f, softmax done -> P barrier passed %.0f\\n", tag, a[20], xa[0] / nc, xa[1] / nc);
    if (ph[0][0] > 0 && ph[1][0] > 0)
        fprintf(stderr, "trace %s: phases: producer copy call %.0f%% beside consumer 1's wait for S, %.0f%% beside its softmax; "
                "conversion %.0f%% / %.0f%%\\n", tag, 100 * ph[0][1] / ph[0][0], 100 * ph[0][2] / ph[0][0],
                100 * ph[1][1] / ph[1][0], 100 * ph[1][2] / ph[1][0]);
    fprintf(stderr, "trace %s: %d CTAs (cycles, means) units %.0f | dep wait %.0f, Q %.0f, first FULL seen %.0f, "
            "first FULL arrival %.0f | unit cycle %.0f: consumer 1 FULL wait %.0f, FULL -> softmax done %.0f | "
            "producer: copies and next slots %.0f (copy call %.0f), stage wait %.0f, EMPTY wait %.0f, convert %.0f "
            "(fence and arrival %.0f) | consumer 2: P wait %.0f, P V to EMPTY %.0f | last unit -> loop end %.0f, "
            "-> epilogue %.0f, epilogue %.0f | CTA %.0f\\n",
            tag, nc, a[17], a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[10], a[18], a[7], a[8], a[9], a[19], a[11],
            a[12], a[13], a[14], a[15], a[16]);
}
'''
open(f, 'w').write(s)
# bench hook: after each mla_decode_sparse case is timed (the stamps hold its last replay)
cb = d + '/tools/cmd_bench.c'
t = open(cb).read()
old = '                st = ak_bench_cuda_time(ctx, c, o.quick, (int32_t)cool_ms, &r);'
assert t.count(old) == 1
t = t.replace(old, old + '\n                if (strncmp(c->op, "mla_decode_sparse", 17) == 0) { void ak_trace_dump(const char *); ak_trace_dump(c->shape); }')
open(cb, 'w').write(t)

# ---- ak_sdt_main
f = d + '/src/cuda/sparse_decode_wgmma.cu'
s = open(f).read()
def rep(old, new):
    global s
    assert s.count(old) == 1, (old[:70], s.count(old))
    s = s.replace(old, new)
rep('#define TR(sx, jx)','''__device__ unsigned long long ak_tr2[AK_TR_CTAS][12][AK_TR_N];
#define TR2(sx, jx) do { const int c_ = ak_trc(); if (c_ >= 0 && (jx) < AK_TR_N) ak_tr2[c_][sx][jx] = ak_clk(); } while (0)
/* %globaltimer at the dependency wait's end and at the CTA's end, every CTA up to 512 */
__device__ unsigned long long ak_tg2[512][2];
#define TG2(sx) do { if (blockIdx.x < 512) { unsigned long long t_; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t_)::"memory"); ak_tg2[blockIdx.x][sx] = t_; } } while (0)
#define TR(sx, jx)''')
# the CTA's start (after the dependency wait) and end
rep('''    ak_grid_dep_wait(); /* as in ak_sd_main: only parameters and shared memory above */
    if (!ak_sd_take_late<ORD>(p, r, i, t_begin, t_end, pslot)) return;
    if (warp < AK_SDT_PW) {
        const int32_t len0''', '''    ak_grid_dep_wait(); /* as in ak_sd_main: only parameters and shared memory above */
    if (tid == 0) TG2(0);
    if (!ak_sd_take_late<ORD>(p, r, i, t_begin, t_end, pslot)) return;
    if (warp < AK_SDT_PW) {
        const int32_t len0''')
rep('''    ak_sdt_rows_out<LAYOUT, NH>(p, smem, r, i, h0, pslot, sc, tid);
}''', '''    ak_sdt_rows_out<LAYOUT, NH>(p, smem, r, i, h0, pslot, sc, tid);
    if (ct == 0) TR2(11, 3);
    ak_bar_sync(1, 128);
    if (ct == 0) TG2(1); /* (the consumers' end: the producer warps' share of the rows may end later) */
}''')
# producer
rep('''    for (int j = 0; ua < u_end; j++) {
        uint32_t vn = 0u;
        if (ub < u_end)''','''    for (int j = 0; ua < u_end; j++) {
        if (w == 0 && lane == 0) TR2(0, j);
        uint32_t vn = 0u;
        if (ub < u_end)''')
rep('''        const int ud = ub < u_end ? ak_sdt_nextu<GEN>(p, ub, t_end, len0, len1) : u_end;''','''        if (w == 0 && lane == 0) TR2(1, j);
        const int ud = ub < u_end ? ak_sdt_nextu<GEN>(p, ub, t_end, len0, len1) : u_end;''')
rep('''        const int n = j >> 1, b = n & 1, half = j & 1;   /* tile n of this CTA, its buffer, this half */
        if (half == 0) ak_mbar_wait(bar + 8 * (2 + b), ((n >> 1) & 1) ^ 1); /* EMPTY[b] */''','''        if (w == 0 && lane == 0) TR2(2, j);
        const int n = j >> 1, b = n & 1, half = j & 1;   /* tile n of this CTA, its buffer, this half */
        if (half == 0) ak_mbar_wait(bar + 8 * (2 + b), ((n >> 1) & 1) ^ 1); /* EMPTY[b] */
        if (w == 0 && lane == 0) TR2(3, j);''')
rep('''            ak_mbar_arrive(bar + 8 * b); /* FULL[b] */
        }
        __syncwarp();''','''            ak_mbar_arrive(bar + 8 * b); /* FULL[b] */
        }
        __syncwarp();
        if (w == 0 && lane == 0) TR2(4, j); /* the step's end (FULL arrives after odd halves: x131) */''')
# consumer
rep('''    ak_sdw_load_q<DQK, NH, 128, ORD == AK_SD_ORD_ONE>(p, qs, r, i, h0, ct);
    ak_fence_proxy_async(); /* Q writes -> the wgmma (async proxy) reads */
    ak_bar_sync(1, 128);''','''    if (ct == 0) TR2(11, 0);
    ak_sdw_load_q<DQK, NH, 128, ORD == AK_SD_ORD_ONE>(p, qs, r, i, h0, ct);
    ak_fence_proxy_async(); /* Q writes -> the wgmma (async proxy) reads */
    ak_bar_sync(1, 128);
    if (ct == 0) TR2(11, 1);''')
# tile n's stamps 5 (before its FULL wait), 6 (after it) and 7 (its S complete) are taken in the
# prologue for tile 0 and in tile n - 1's iteration otherwise, where S of tile n is issued behind
# P V (x327)
rep('''    if (t < t_end) {
        ak_mbar_wait(bar, 0); /* FULL[0] */''','''    if (t < t_end) {
        if (ct == 0) TR2(5, 0);
        ak_mbar_wait(bar, 0); /* FULL[0] */
        if (ct == 0) TR2(6, 0);''')
rep('''        ak_sdt_qk<NH, KSTEPS>(s, dk0, dq0);
        ak_wgmma_wait0();
    }''','''        ak_sdt_qk<NH, KSTEPS>(s, dk0, dq0);
        ak_wgmma_wait0();
        if (ct == 0) TR2(7, 0);
    }''')
rep('''            ak_mbar_wait(bar + 8 * (b ^ 1), ((n + 1) >> 1) & 1); /* FULL of tile n + 1 */''','''            if (ct == 0) TR2(5, n + 1);
            ak_mbar_wait(bar + 8 * (b ^ 1), ((n + 1) >> 1) & 1); /* FULL of tile n + 1 */
            if (ct == 0) TR2(6, n + 1);''')
rep('''        /* P = 2^(s - m) rounded to bf16 into P^T [head][key] (swizzled); this thread's key sums */''','''        if (ct == 0) TR2(8, n);
        /* P = 2^(s - m) rounded to bf16 into P^T [head][key] (swizzled); this thread's key sums */''')
rep('''        ak_bar_sync(2, 128);     /* P^T complete; every thread has read the column maxima */''','''        ak_bar_sync(2, 128);     /* P^T complete; every thread has read the column maxima */
        if (ct == 0) TR2(9, n);''')
rep('''        ak_mbar_arrive(bar + 8 * (2 + b)); /* EMPTY[b] */
        ak_wgmma_wait0(); /* S^T of tile n + 1: no product is in flight across the loop's edge */
        t = tn;
    }

    ak_grid_dep_launch(); /* the next kernel may start its CTAs during this epilogue */
    /* column sums''','''        ak_mbar_arrive(bar + 8 * (2 + b)); /* EMPTY[b] */
        if (ct == 0) TR2(10, n);
        ak_wgmma_wait0(); /* S^T of tile n + 1: no product is in flight across the loop's edge */
        if (ct == 0 && tn < t_end) TR2(7, n + 1);
        t = tn;
    }
    if (ct == 0) TR2(11, 2);

    ak_grid_dep_launch(); /* the next kernel may start its CTAs during this epilogue */
    /* column sums''')
rep('''    ak_sdt_colsum<NH>(l_part, red, w, g, c4);
    ak_bar_sync(1, 128);
    /* Per head: the factor''', '''    ak_sdt_colsum<NH>(l_part, red, w, g, c4);
    ak_bar_sync(1, 128);
    if (ct == 0) TR2(11, 4);
    /* Per head: the factor''')
rep('''    if (pslot >= 0) ak_sd_part_put(am, amax, 4);
    /* staged rows and scale words -> all 384 threads, through mbarrier EPI (racecheck reported this
       hand-off across __syncthreads, reached by the producers at another instruction) */
    ak_mbar_arrive(bar + 8 * M::EPI);
    ak_mbar_wait(bar + 8 * M::EPI, 0);
    if (pslot >= 0) sc = ak_sd_part_get(amax, 4, inv);''', '''    if (ct == 0) TR2(11, 5);
    if (pslot >= 0) ak_sd_part_put(am, amax, 4);
    /* staged rows and scale words -> all 384 threads, through mbarrier EPI (racecheck reported this
       hand-off across __syncthreads, reached by the producers at another instruction) */
    ak_mbar_arrive(bar + 8 * M::EPI);
    ak_mbar_wait(bar + 8 * M::EPI, 0);
    if (pslot >= 0) sc = ak_sd_part_get(amax, 4, inv);
    if (ct == 0) TR2(11, 6);''')
s += '''
static int ak_trace_cmpd(const void *x, const void *y) {
    const double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}
extern "C" void ak_trace_dump_sdt(const char *tag) {
    static unsigned long long h[AK_TR_CTAS][12][AK_TR_N];
    if (cudaMemcpyFromSymbol(h, ak_tr2, sizeof h) != cudaSuccess) return;
    static unsigned long long z[AK_TR_CTAS][12][AK_TR_N];
    cudaMemcpyToSymbol(ak_tr2, z, sizeof z);
    double a[23] = {0}; int nc = 0;
    for (int c = 0; c < AK_TR_CTAS; c++) {
        if (h[c][11][0] == 0 || h[c][11][2] == 0 || h[c][11][3] == 0) continue;
        int ns = 0; while (ns < AK_TR_N && h[c][4][ns] != 0) ns++;
        int nt = 0; while (nt < AK_TR_N && h[c][10][nt] != 0) nt++;
        if (ns < 4 || nt < 2) continue;
        double v[16] = {0};
        for (int j = 1; j < ns; j++) {
            v[0] += h[c][1][j] - h[c][0][j]; v[1] += h[c][2][j] - h[c][1][j]; v[2] += h[c][3][j] - h[c][2][j];
            v[3] += h[c][4][j] - h[c][3][j]; v[4] += (j + 1 < ns ? h[c][0][j + 1] : h[c][4][j]) - h[c][4][j];
        }
        for (int k = 0; k < 5; k++) v[k] /= (ns - 1);
        /* tile n from its FULL wait (behind P V of tile n - 1) to tile n + 1's: FULL wait, S with
           P V of tile n - 1's wait and EMPTY, column maxima, softmax + P + barrier, P V issued */
        if (nt < 3) continue;
        for (int n = 1; n + 1 < nt; n++) {
            v[5] += h[c][6][n] - h[c][5][n]; v[6] += h[c][7][n] - h[c][6][n]; v[7] += h[c][8][n] - h[c][7][n];
            v[8] += h[c][9][n] - h[c][8][n]; v[9] += h[c][5][n + 1] - h[c][9][n];
        }
        for (int k = 5; k < 10; k++) v[k] /= (nt - 2);
        v[11] = (double)(h[c][10][nt - 1] - h[c][6][0]) / nt; v[12] = h[c][11][1] - h[c][11][0]; v[13] = h[c][6][0] - h[c][11][0]; v[14] = ns; v[15] = nt;
        const double e1 = (double)(h[c][11][2] - h[c][10][nt - 1]), e2 = (double)(h[c][11][3] - h[c][11][2]), tot = (double)(h[c][11][3] - h[c][11][0]);
        a[19] += (double)(h[c][11][4] - h[c][11][2]); a[20] += (double)(h[c][11][5] - h[c][11][4]);
        a[21] += (double)(h[c][11][6] - h[c][11][5]); a[22] += (double)(h[c][11][3] - h[c][11][6]);
        for (int k = 0; k < 16; k++) a[k] += v[k];
        a[16] += e1; a[17] += e2; a[18] += tot;
        nc++;
    }
    if (nc == 0) return;
    for (int k = 0; k < 23; k++) a[k] /= nc;
    fprintf(stderr, "sdt %s: CTA (consumer, cycles): last tile -> loop exit %.0f, epilogue %.0f (column sums and barrier %.0f, row factors and staging %.0f, scale hand-off %.0f, lse and rows out %.0f), Q start -> end %.0f\\n", tag, a[16], a[17], a[19], a[20], a[21], a[22], a[18]);
    {   /* every CTA's start (after the dependency wait) and end, ns after the earliest start */
        static unsigned long long g[512][2];
        static const unsigned long long gz[512][2] = {{0}};
        if (cudaMemcpyFromSymbol(g, ak_tg2, sizeof g) == cudaSuccess) {
            cudaMemcpyToSymbol(ak_tg2, gz, sizeof gz);
            unsigned long long t0 = ~0ull;
            int m = 0;
            double st[512], en[512];
            for (int c = 0; c < 512; c++) if (g[c][0] && g[c][1] && g[c][0] < t0) t0 = g[c][0];
            for (int c = 0; c < 512; c++) if (g[c][0] && g[c][1]) { st[m] = (double)(g[c][0] - t0); en[m] = (double)(g[c][1] - t0); m++; }
            if (m > 0) {
                qsort(st, m, sizeof(double), ak_trace_cmpd);
                qsort(en, m, sizeof(double), ak_trace_cmpd);
                fprintf(stderr, "sdt %s: %d CTAs by %%globaltimer, ns after the first start: start median %.0f max %.0f | end min %.0f p10 %.0f median %.0f p90 %.0f max %.0f\\n",
                        tag, m, st[m / 2], st[m - 1], en[0], en[m / 10], en[m / 2], en[(9 * m) / 10], en[m - 1]);
            }
        }
    }
    {   /* the chain to the first FULL: producer warp 0's first two half-steps, cycles after the
           consumers' start (both start at the dependency wait's end) */
        double f[2][5] = {{0}}, ff = 0;
        int m = 0;
        for (int c = 0; c < AK_TR_CTAS; c++) {
            if (h[c][11][0] == 0 || h[c][4][1] == 0 || h[c][6][0] == 0) continue;
            for (int j = 0; j < 2; j++)
                for (int k = 0; k < 5; k++) f[j][k] += (double)((long long)h[c][k][j] - (long long)h[c][11][0]);
            ff += (double)(h[c][6][0] - h[c][11][0]);
            m++;
        }
        if (m > 0)
            fprintf(stderr, "sdt %s: first half-steps (%d CTAs, cycles after the consumers' start): half 0 step start %.0f, next copies issued %.0f, records landed %.0f, EMPTY %.0f, converted %.0f; half 1 %.0f / %.0f / %.0f / %.0f / %.0f; first FULL seen %.0f\\n",
                    tag, m, f[0][0] / m, f[0][1] / m, f[0][2] / m, f[0][3] / m, f[0][4] / m, f[1][0] / m, f[1][1] / m,
                    f[1][2] / m, f[1][3] / m, f[1][4] / m, ff / m);
    }
    fprintf(stderr, "sdt %s: %d CTAs, %.0f half-steps, %.0f tiles | producer per half-step: copy %.0f, slot+stage wait %.0f, EMPTY wait %.0f, convert+fence+arrive %.0f, loop %.0f | consumer per tile %.0f: FULL wait %.0f, S with the last P V's wait and EMPTY %.0f, column maxima %.0f, softmax+P+bar %.0f, P V issued %.0f | Q %.0f, first FULL %.0f\\n",
            tag, nc, a[14], a[15], a[0], a[1], a[2], a[3], a[4], a[11], a[5], a[6], a[7], a[8], a[9], a[12], a[13]);
}
'''
open(f, 'w').write(s)

# ---- ak_sd_main (mma.sync kernel, the small batches) and ak_sd_combine: %globaltimer stamps (ns)
# of thread 0 of every CTA up to 512, printed as the spread over CTAs of each point, relative to the
# earliest main-kernel CTA past its dependency wait (session 24)
f = d + '/src/cuda/sparse_decode.cu'
s = open(f).read()
rep('#include <stdint.h>\n', '''#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#define AK_TM_CTAS 512
#define AK_TM_S 25
__device__ unsigned long long ak_tm[AK_TM_CTAS][AK_TM_S], ak_tc[AK_TM_CTAS][12], ak_tcc[AK_TM_CTAS][12];
__device__ __forceinline__ unsigned long long ak_gt() { unsigned long long t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)::"memory"); return t; }
#define TM(sx) do { if (threadIdx.x == 0 && blockIdx.x < AK_TM_CTAS && (sx) < AK_TM_S) ak_tm[blockIdx.x][sx] = ak_gt(); } while (0)
/* A value stamp waits for its value: the timer reads are predicated on a test of it (an operand
   the instructions do not read would not hold them, session 57) */
#define TMV(sx, v) do { if (threadIdx.x == 0 && blockIdx.x < AK_TM_CTAS) { unsigned long long t_; asm volatile("{\\n\\t.reg .pred p;\\n\\tsetp.eq.u32 p, %1, 0x7fffffff;\\n\\t@!p mov.u64 %0, %%globaltimer;\\n\\t@p mov.u64 %0, 0;\\n\\t}" : "=l"(t_) : "r"((unsigned)(v)) : "memory"); ak_tm[blockIdx.x][sx] = t_; } } while (0)
#define TCV(sx, v) do { if (threadIdx.x == 0 && blockIdx.x < AK_TM_CTAS) { unsigned long long t_, c_; asm volatile("{\\n\\t.reg .pred p;\\n\\tsetp.eq.u32 p, %2, 0x7fffffff;\\n\\t@!p mov.u64 %0, %%clock64;\\n\\t@p mov.u64 %0, 0;\\n\\t@!p mov.u64 %1, %%globaltimer;\\n\\t@p mov.u64 %1, 0;\\n\\t}" : "=l"(c_), "=l"(t_) : "r"(__float_as_uint(v)) : "memory"); ak_tc[blockIdx.x][sx] = t_; ak_tcc[blockIdx.x][sx] = c_; } } while (0)
#define TC(sx) do { if (threadIdx.x == 0 && blockIdx.x < AK_TM_CTAS) { unsigned long long t_, c_; asm volatile("mov.u64 %0, %%clock64;\\n\\tmov.u64 %1, %%globaltimer;" : "=l"(c_), "=l"(t_) :: "memory"); ak_tc[blockIdx.x][sx] = t_; ak_tcc[blockIdx.x][sx] = c_; } } while (0)
''')
rep('''__global__ void __launch_bounds__(AK_SD_THREADS, 1) ak_sd_main(const ak_sd_params p) {
''', '''__global__ void __launch_bounds__(AK_SD_THREADS, 1) ak_sd_main(const ak_sd_params p) {
    TM(0);
''')
rep('''    ak_grid_dep_wait();
    /* Slot ids of the first two tiles''', '''    ak_grid_dep_wait();
    TM(1);
    /* Slot ids of the first two tiles''')
rep('''    int32_t spec0 = -1, spec1 = -1;
''', '''    int32_t spec0 = -1, spec1 = -1;
    TM(24);
''')
rep('''    const int32_t len0 = ak_sd_len(p.list[0], r, i), len1 = ak_sd_len(p.list[1], r, i);
''', '''    TM(20);
    const int32_t len0 = ak_sd_len(p.list[0], r, i), len1 = ak_sd_len(p.list[1], r, i);
    TMV(21, spec0 + spec1);
    TMV(22, len0 + len1);
''')
rep('''#pragma unroll
        for (int k = 0; k < QN; k++) {
            const int it = k * AK_SD_THREADS + tid, row = it / QCH, c = it % QCH;
            if (it < QITEMS) *reinterpret_cast<uint4 *>(qs + row * KSTR + c * 8) = qv[k];''', '''        TMV(23, qv[0].x + qv[QN - 1].y);
#pragma unroll
        for (int k = 0; k < QN; k++) {
            const int it = k * AK_SD_THREADS + tid, row = it / QCH, c = it % QCH;
            if (it < QITEMS) *reinterpret_cast<uint4 *>(qs + row * KSTR + c * 8) = qv[k];''')
rep('''    __syncthreads();
    if (C::PREF && cur < t_end) ak_sd_issue''', '''    __syncthreads();
    TM(2);
    if (C::PREF && cur < t_end) ak_sd_issue''')
rep('''        ak_cp_async_wait_all();
        __syncthreads();
        uint8_t *stg''', '''        ak_cp_async_wait_all();
        __syncthreads();
        if (k < 3) TM(3 + 5 * k);
        uint8_t *stg''')
rep('''            ak_sd_dequant<LAYOUT, KSTR>(stg, ks);
            __syncthreads();''', '''            ak_sd_dequant<LAYOUT, KSTR>(stg, ks);
            __syncthreads();
            if (k < 3) TM(4 + 5 * k);''')
rep('''        __syncthreads();

        /* Online softmax, once per row''', '''        __syncthreads();
        if (k < 3) TM(5 + 5 * k);

        /* Online softmax, once per row''')
rep('''        __syncthreads();
        uint32_t pa[4][4]; /* P as bf16 A fragments of this warp's m-tile */''', '''        __syncthreads();
        if (k < 3) TM(6 + 5 * k);
        uint32_t pa[4][4]; /* P as bf16 A fragments of this warp's m-tile */''')
rep('''        cur = nxt;
        nxt = nxt2;
    }
''', '''        if (k < 3) TM(7 + 5 * k);
        cur = nxt;
        nxt = nxt2;
    }
    TM(18);
''')
rep('''                                          gw == 0 && c4 == 0);
    }
}''', '''                                          gw == 0 && c4 == 0);
    }
    __syncthreads();
    TM(19);
}''')
rep('''    const int64_t row = blockIdx.x;
''', '''    const int64_t row = blockIdx.x;
    TC(0);
''')
rep('''    ak_grid_dep_wait(); /* the main kernel's partial rows''', '''    ak_grid_dep_wait();
    TC(1); /* the main kernel's partial rows''')
rep('''    float mx = li.x;
    for (int s = lane + 32; s < splits; s += 32)''', '''    float mx = li.x;
    TCV(8, li.x);
    if (!BULK) { uint32_t x_ = 0u; /* every loaded split's row, waited for here (holds warp 0 until then) */
#pragma unroll
      for (int k_ = 0; k_ < CH; k_++) if (k_ < splits) x_ ^= v[k_][0];
      TCV(7, __uint_as_float(x_)); }
    for (int s = lane + 32; s < splits; s += 32)''')
rep('''    mx = ak_warp_max(mx);
    float sum = 0.0f;
''', '''    TCV(10, mx);
    mx = ak_warp_max(mx);
    TCV(3, mx);
    float sum = 0.0f;
''')
rep('''    ak_grid_dep_launch();
    /* each lane's first (lse, factor) pair''', '''    ak_grid_dep_launch();
    TC(9);
    /* each lane's first (lse, factor) pair''')
rep('''    const float lse2 = mx != -INFINITY ? mx + ak_lg2(sum) : -INFINITY; /* sum >= 1: the max's term */
''', '''    TCV(11, sum);
    const float lse2 = mx != -INFINITY ? mx + ak_lg2(sum) : -INFINITY; /* sum >= 1: the max's term */
''')
rep('''    float w = ak_sd_combine_weight(li, lse2); /* split lane's, then lane + 32's from s0 = 32 on */
''', '''    float w = ak_sd_combine_weight(li, lse2); /* split lane's, then lane + 32's from s0 = 32 on */
    TCV(4, w);
''')
rep('''            if (k < nb)
                v[k][0] = *reinterpret_cast<const uint32_t *>(ak_sd_cmb_smem + k * (AK_SD_DV * 2) + 4 * tid);
    }
''', '''            if (k < nb)
                v[k][0] = *reinterpret_cast<const uint32_t *>(ak_sd_cmb_smem + k * (AK_SD_DV * 2) + 4 * tid);
    }
    if (BULK) { uint32_t x_ = 0u; /* the bulk-copied rows, read from shared memory after their wait */
#pragma unroll
      for (int k_ = 0; k_ < CH; k_++) if (k_ < nb) x_ ^= v[k_][0];
      TCV(7, __uint_as_float(x_)); }
    TCV(5, __uint_as_float(v[0][0])); /* split 0's partial row (always loaded) */
''')
rep('''        lse_e = lse2 * 0.69314718055994531f;
        if (sink''', '''        TCV(6, acc[0]);
        lse_e = lse2 * 0.69314718055994531f;
        if (sink''')
rep('''                ak_sd_pack_bf16(acc[2 * e] * f, acc[2 * e + 1] * f);
    }
}''', '''                ak_sd_pack_bf16(acc[2 * e] * f, acc[2 * e + 1] * f);
    }
    TC(2);
}''')
s += r'''
static int ak_tm_cmp(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
static void ak_tm_line(const char *tag, const char *name, double *v, int n) {
    if (n == 0) return;
    qsort(v, (size_t)n, sizeof(double), ak_tm_cmp);
    fprintf(stderr, "tmain %s: %-26s n %4d  min %7.0f  med %7.0f  max %7.0f ns\n", tag, name, n, v[0], v[n / 2], v[n - 1]);
}
extern "C" void ak_trace_dump_sdm(const char *tag) {
    static unsigned long long h[AK_TM_CTAS][AK_TM_S], c[AK_TM_CTAS][12], cc[AK_TM_CTAS][12];
    if (cudaDeviceSynchronize() != cudaSuccess || cudaMemcpyFromSymbol(h, ak_tm, sizeof h) != cudaSuccess ||
        cudaMemcpyFromSymbol(c, ak_tc, sizeof c) != cudaSuccess || cudaMemcpyFromSymbol(cc, ak_tcc, sizeof cc) != cudaSuccess) return;
    static unsigned long long z[AK_TM_CTAS][AK_TM_S], zc[AK_TM_CTAS][12];
    cudaMemcpyToSymbol(ak_tm, z, sizeof z);
    cudaMemcpyToSymbol(ak_tc, zc, sizeof zc);
    cudaMemcpyToSymbol(ak_tcc, zc, sizeof zc);
    unsigned long long t0 = ~0ull;
    for (int k = 0; k < AK_TM_CTAS; k++) if (h[k][1] && h[k][1] < t0) t0 = h[k][1];
    /* a call whose main kernel is not ak_sd_main (the wgmma kernels): the combine alone, its times
       after its first CTA's dependency wait */
    const bool sdm = t0 != ~0ull;
    if (!sdm)
        for (int k = 0; k < AK_TM_CTAS; k++) if (c[k][1] && c[k][1] < t0) t0 = c[k][1];
    if (t0 == ~0ull) return;
    if (!sdm) fprintf(stderr, "tmain %s: (no ak_sd_main stamps: times after the combine's first dependency wait)\n", tag);
    static const char *nm[AK_TM_S] = {"entry", "dep wait passed", "slot ids, Q, offsets", "t0 records landed",
        "t0 dequantized", "t0 S", "t0 softmax", "t0 P V", "t1 records landed", "t1 dequantized", "t1 S",
        "t1 softmax", "t1 P V", "t2 records landed", "t2 dequantized", "t2 S", "t2 softmax", "t2 P V",
        "loop end", "rows written", "", "", "", "", ""};
    static double v[AK_TM_CTAS];
    static const char *pn[5] = {"prologue: slot loads issued", "prologue: slot ids in", "prologue: lengths in", "prologue: Q in", "prologue: index math done"};
    for (int sx = 20; sx < 25 && sdm; sx++) {
        int n = 0;
        for (int k = 0; k < AK_TM_CTAS; k++) if (h[k][sx] && h[k][1]) v[n++] = (double)(long long)(h[k][sx] - t0);
        ak_tm_line(tag, pn[sx - 20], v, n);
    }
    for (int sx = 0; sx < 20 && sdm; sx++) {
        int n = 0;
        for (int k = 0; k < AK_TM_CTAS; k++) if (h[k][sx] && h[k][1]) v[n++] = (double)(long long)(h[k][sx] - t0);
        ak_tm_line(tag, nm[sx], v, n);
    }
    static const char *cn[12] = {"combine entry", "combine dep wait passed", "combine end", "combine: lse max known",
                                "combine: weights known", "combine: first partials in", "combine: merged",
                                "combine: all partials in", "combine: own lse pair in", "combine: dependents launched",
                                "combine: before the max", "combine: sum known"};
    for (int sx = 0; sx < 12; sx++) {
        int n = 0;
        for (int k = 0; k < AK_TM_CTAS; k++) if (c[k][sx] && c[k][1] >= t0) v[n++] = (double)(long long)(c[k][sx] - t0);
        ak_tm_line(tag, cn[sx], v, n);
    }
    /* the same points in SM cycles after each CTA's own dependency wait (clock64: exact within a CTA) */
    for (int sx = 0; sx < 12; sx++) {
        int n = 0;
        for (int k = 0; k < AK_TM_CTAS; k++) if (cc[k][sx] && cc[k][1] && c[k][1] >= t0) v[n++] = (double)(long long)(cc[k][sx] - cc[k][1]);
        if (n == 0) continue;
        qsort(v, (size_t)n, sizeof(double), ak_tm_cmp);
        fprintf(stderr, "tmain %s: %-26s n %4d  min %7.0f  med %7.0f  max %7.0f cycles after its own wait\n", tag, cn[sx], n, v[0], v[n / 2], v[n - 1]);
    }
}
'''
open(f, 'w').write(s)
f = d + '/src/cuda/sparse_decode_wgmma.cu'
s = open(f).read()
rep('''extern "C" void ak_trace_dump(const char *tag) {
    ak_trace_dump_sdt(tag);''', '''extern "C" void ak_trace_dump_sdm(const char *tag);
extern "C" void ak_trace_dump(const char *tag) {
    ak_trace_dump_sdt(tag);
    ak_trace_dump_sdm(tag);''')
open(f, 'w').write(s)

# ---- ak_sdr_main (register-dequantizing kernel): clock64 stamps of producer warp 0 per tile and of
# consumer warpgroup 0's first thread per tile it takes (session 27)
rep('#define TR(sx, jx)', '''__device__ unsigned long long ak_tr3[AK_TR_CTAS][12][AK_TR_N];
#define TR3(sx, jx) do { const int c_ = ak_trc(); if (c_ >= 0 && (jx) < AK_TR_N) ak_tr3[c_][sx][jx] = ak_clk(); } while (0)
#define TR(sx, jx)''')
rep('''        ak_mbar_wait(bar + 8 * (AK_SDR_NFULL + b), ((n / AK_SDR_NBUF) & 1) ^ 1); /* EMPTY[b] */''',
    '''        if (w == 0 && lane == 0) TR3(0, n);
        ak_mbar_wait(bar + 8 * (AK_SDR_NFULL + b), ((n / AK_SDR_NBUF) & 1) ^ 1); /* EMPTY[b] */
        if (w == 0 && lane == 0) TR3(1, n);''')
rep('''                             M::CPY, bar + 8 * f, pol);
        t = tn;''',
    '''                             M::CPY, bar + 8 * f, pol);
        __syncwarp();
        if (w == 0 && lane == 0) TR3(2, n);
        t = tn;''')
rep('''    ak_sdr_load_q(p, qs, r, i, h0, ct);''', '''    if (ct == 0) TR3(11, 0);
    ak_sdr_load_q(p, qs, r, i, h0, ct);''')
rep('''        ak_mbar_wait(bar + 8 * (n % AK_SDR_NFULL), (n / AK_SDR_NFULL) & 1); /* FULL[n % NFULL] */
        const uint8_t *st''', '''        if (ct == 0) TR3(5, n);
        ak_mbar_wait(bar + 8 * (n % AK_SDR_NFULL), (n / AK_SDR_NFULL) & 1); /* FULL[n % NFULL] */
        if (ct == 0) TR3(6, n);
        const uint8_t *st''')
rep('''            s[k] = s2[0][k] + s2[1][k];
        }
''', '''            s[k] = s2[0][k] + s2[1][k];
        }
        if (ct == 0) TR3(7, n);
''')
rep('''        ak_bar_sync(bar2, 128);  /* P'^T complete; every thread has read the column maxima */''',
    '''        ak_bar_sync(bar2, 128);  /* P'^T complete; every thread has read the column maxima */
        if (ct == 0) TR3(8, n);''')
rep('''            for (int k = 0; k < 8; k++) ak_reg_fence(o[mb][k]);
    }

    ak_grid_dep_launch();''', '''            for (int k = 0; k < 8; k++) ak_reg_fence(o[mb][k]);
        if (ct == 0) TR3(9, n);
    }
    if (ct == 0) TR3(11, 1);

    ak_grid_dep_launch();''')
rep('''extern "C" void ak_trace_dump(const char *tag) {
    ak_trace_dump_sdt(tag);''', '''extern "C" void ak_trace_dump_sdr(const char *tag);
extern "C" void ak_trace_dump(const char *tag) {
    ak_trace_dump_sdr(tag);
    ak_trace_dump_sdt(tag);''')
s += r'''
/* Means over the sampled CTAs, in cycles: the producer per tile (its EMPTY wait, its copy call,
   the rest of its step), warpgroup 0 per tile it takes (FULL wait, S, softmax, P V), the records'
   landing (FULL seen minus warp 0's copies issued, for tiles whose FULL was waited on) and the
   tile period (the producer's steps). */
extern "C" void ak_trace_dump_sdr(const char *tag) {
    static unsigned long long h[AK_TR_CTAS][12][AK_TR_N];
    if (cudaMemcpyFromSymbol(h, ak_tr3, sizeof h) != cudaSuccess) return;
    static unsigned long long z[AK_TR_CTAS][12][AK_TR_N];
    cudaMemcpyToSymbol(ak_tr3, z, sizeof z);
    double a[12] = {0};
    int nc = 0;
    for (int c = 0; c < AK_TR_CTAS; c++) {
        if (h[c][11][0] == 0 || h[c][11][1] == 0) continue;
        int np = 0;
        while (np < AK_TR_N && h[c][2][np] != 0) np++;
        if (np < 8) continue;
        double v[12] = {0};
        int k = 0;
        for (int n = 1; n < np; n++) {
            v[0] += h[c][1][n] - h[c][0][n]; v[1] += h[c][2][n] - h[c][1][n];
            v[2] += (n + 1 < np ? h[c][0][n + 1] : h[c][2][n]) - h[c][2][n];
        }
        for (int q = 0; q < 3; q++) v[q] /= np - 1;
        v[3] = (double)(h[c][2][np - 1] - h[c][2][0]) / (np - 1);
        for (int n = 1; n < np; n++) {
            if (h[c][9][n] == 0) continue;
            v[4] += h[c][6][n] - h[c][5][n]; v[5] += h[c][7][n] - h[c][6][n]; v[6] += h[c][8][n] - h[c][7][n];
            v[7] += h[c][9][n] - h[c][8][n]; v[8] += (double)(long long)(h[c][6][n] - h[c][2][n]);
            k++;
        }
        if (k == 0) continue;
        for (int q = 4; q < 9; q++) v[q] /= k;
        v[9] = np; v[10] = k;
        for (int q = 0; q < 11; q++) a[q] += v[q];
        nc++;
    }
    if (nc == 0) return;
    for (int q = 0; q < 11; q++) a[q] /= nc;
    fprintf(stderr, "sdr %s: %d CTAs, %.0f tiles (%.0f on warpgroup 0) | producer per tile %.0f: EMPTY wait %.0f, copy call %.0f, rest %.0f | warpgroup 0 per tile: FULL wait %.0f, S %.0f, softmax+P+bar %.0f, PV %.0f | FULL seen - copies issued %.0f\n",
            tag, nc, a[9], a[10], a[3], a[0], a[1], a[2], a[4], a[5], a[6], a[7], a[8]);
}
'''
open(f, 'w').write(s)
