#!/usr/bin/env python3
"""sd_proxy.py DIR VARIANT -- x105's work proxies for the 64-head sparse decode kernel
(`ak_sdx_main`), session 73's for both warp-specialized kernels and session 74's schedules of the
swap-AB producers, patched into the tree at DIR (a copy: `git archive HEAD | tar -x -C DIR`).

Except z and zp, the proxies compute wrong results and are timed only (scripts/quick_ab.sh with
TIME_ANYWAY=1). They ask which side of a unit its time follows, and z / zp whether the producers'
phases cost time:
  c   each producer warp copies and converts 4 of its 8 keys (V4: copies 4, converts all 8, as in
      x105; the other rows keep stale bytes and the keys count as invalid);
  s   consumer warpgroup 1 without its softmax: P from S by one multiply by 0, alpha 1;
  cs  both;
  p   the producers alone (session 73): `ak_sdx_main`'s consumer warpgroups issue neither S, the
      softmax nor P V (S taken as 0, P as 0, alpha 1) but keep every wait, the P hand-off barrier
      and their EMPTY arrivals;
  q   `ak_sdx_main` without S only (S taken as 0; the softmax, its hand-off and P V as they are);
  v   `ak_sdx_main` without P V only (both warpgroups; S and the softmax as they are);
  t   the same as p for the swap-AB kernel (`ak_sdt_main`, 16- and 32-head tiles): its consumer
      warpgroup waits on FULL, fences and arrives on EMPTY, nothing else;
  z   `ak_sdt_main`'s producer warps 4..7 start ~800 clocks after warps 0..3 (a clock spin), so
      that the two producer warps of each scheduler run their copy calls and conversions out of
      phase (session 74; the results stay right);
  zp  `ak_sdt_main`'s producer warps 0..3 and 4..7 convert in turn (two named barriers, a
      ping-pong), each warp's copy call and waits beside the other group's conversion (session
      74; the results stay right);
  tz, tzp  t with z, t with zp.
Session 19 (x105) measured -9% (c), -4% (s) and -22% (cs) at 656 h_q 128: super-additive, the two
sides co-bound. Session 65's trace put the unit on warpgroup 1's chain after x274; these proxies
test that reading. The patches match exact source text, so scripts/sd_trace_check.sh applies them
in CI."""
import sys

if len(sys.argv) != 3 or sys.argv[2] not in ("c", "s", "cs", "p", "q", "v", "t", "z", "tz", "zp", "tzp"):
    sys.exit("usage: sd_proxy.py DIR c|s|cs|p|q|v|t|z|tz|zp|tzp")
path = sys.argv[1] + "/src/cuda/sparse_decode_wgmma.cu"
with open(path) as f:
    src = f.read()


def rep(old, new, count=1):
    global src
    n = src.count(old)
    assert n == count, (old, n)
    src = src.replace(old, new)


if sys.argv[2] in ("p", "q"):
    zero_s = "for (int k = 0; k < 16; k++) s[k] = 0.0f; /* proxy (%s) */\n" % sys.argv[2]
    rep("            ak_sdx_qk<KSTEPS>(s, dq0, dk0);\n", "            " + zero_s)
    rep("                ak_sdx_qk<KSTEPS>(s, dq0, ak_wgmma_desc_add(dk0, ((j + 1) % NBUF) * KBUF));\n",
        "                " + zero_s)
if sys.argv[2] == "p":
    rep("            ak_sdx_softmax(ex ? kq.sl[1] : kq.sl[0], ex ? kq.rel[1] : kq.rel[0], s, kv, c4, m_run, "
        "l_run, pa, o, alpha);\n",
        "            /* proxy (p): no softmax */\n"
        "#pragma unroll\n"
        "            for (int k = 0; k < 8; k++) pa[k] = 0u;\n"
        "            alpha[0] = alpha[1] = 1.0f;\n"
        "            (void)ex, (void)kv;\n")
if sys.argv[2] in ("p", "v"):
    rep("                ak_wgmma_m64n256k16_rs_tb(o, pa + 4 * kk, ak_wgmma_desc_add(dv0, b * KBUF + (kk * 2048 >> 4)));\n",
        "                (void)kk, (void)pa; /* proxy (%s): no P V */\n" % sys.argv[2], 2)
if sys.argv[2] in ("t", "tz", "tzp"):
    # tile n's FULL was waited in the prologue or behind tile n - 1's P V (x327)
    line = "        const int b = n & 1, tn = ak_sdw_next<GEN>(p, t + 1, t_end, len0, len1);\n"
    rep(line, line +
        "        if (p.h_q > 0) { /* proxy (t): the producers alone */\n"
        "            ak_mbar_arrive(bar + 8 * (2 + b));\n"
        "            if (tn < t_end) ak_mbar_wait(bar + 8 * (b ^ 1), ((n + 1) >> 1) & 1);\n"
        "            t = tn;\n"
        "            continue;\n"
        "        }\n")
if sys.argv[2] in ("z", "tz"):
    rep("    const int key = KPW * w + (lane & (KPW - 1)); /* lanes KPW.. mirror lanes 0.. (unused slot ids) */\n",
        "    const int key = KPW * w + (lane & (KPW - 1)); /* lanes KPW.. mirror lanes 0.. (unused slot ids) */\n"
        "    if (w >= 4) { /* proxy (z): warps 4.. out of phase with the warps 0.. of their schedulers */\n"
        "        const long long z0 = clock64();\n"
        "        while (clock64() - z0 < 800) {}\n"
        "    }\n")
if sys.argv[2] in ("zp", "tzp"):
    conv = ("        else ak_sdx_convert<LAYOUT, KPW>(stg0 + (uint32_t)((j % NST) * SB),\n"
            "                                         kb0 + (uint32_t)(b * M::KB * AK_SDW_TILE + half * 32 * 128), lanes, lane);\n")
    rep("        if (M::V4) ak_sdt_convert_v4(", "        if (w >= 4) ak_bar_sync(3, 256); /* proxy (zp): the groups convert in turn */\n"
        "        else if (j > 0) ak_bar_sync(4, 256);\n"
        "        if (M::V4) ak_sdt_convert_v4(")
    rep(conv, conv + "        if (w < 4) ak_bar_arrive(3, 256);\n        else if (ub < u_end) ak_bar_arrive(4, 256);\n")
if "c" in sys.argv[2]:
    rep("    enum { NBUF = M::NBUF, NST = M::NST, KPW = 8 };\n",
        "    enum { NBUF = M::NBUF, NST = M::NST, KPW = 4 }; /* proxy (c) */\n")
    # V4's stage barriers count the copying lanes' cp.async arrivals
    rep("ak_mbar_init(bar + 8 * (2 * NBUF + k), M::V4 ? 1 + 8 : 1);",
        "ak_mbar_init(bar + 8 * (2 * NBUF + k), M::V4 ? 1 + 4 : 1); /* proxy (c) */")
if "s" in sys.argv[2]:
    rep("            ak_sdx_softmax(ex ? kq.sl[1] : kq.sl[0], ex ? kq.rel[1] : kq.rel[0], s, kv, c4, m_run, "
        "l_run, pa, o, alpha);\n",
        "            /* proxy (s): P from S by one multiply by 0, no softmax */\n"
        "#pragma unroll\n"
        "            for (int k = 0; k < 8; k++) pa[k] = ak_sd_pack_bf16(s[2 * k] * 0.0f, s[2 * k + 1] * 0.0f);\n"
        "            alpha[0] = alpha[1] = 1.0f;\n"
        "            (void)ex;\n")
with open(path, "w") as f:
    f.write(src)
print("sd_proxy.py: %s patched with proxy (%s)" % (path, sys.argv[2]))
