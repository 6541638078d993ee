#!/usr/bin/env python3
"""sd_proxy.py DIR VARIANT -- x105's work proxies for the 64-head sparse decode kernel
(`ak_sdx_main`), patched into the tree at DIR (a copy: `git archive HEAD | tar -x -C DIR`).

The proxies compute wrong results and are timed only (scripts/quick_ab.sh with TIME_ANYWAY=1).
They ask which side of the 64-head unit its time follows:
  c   each producer warp copies and converts 4 of its 8 keys (V4: copies 4, converts all 8, as in
      x105; the other rows keep stale bytes and the keys count as invalid);
  s   consumer warpgroup 1 without its softmax: P from S by one multiply by 0, alpha 1;
  cs  both.
Session 19 (x105) measured -9% (c), -4% (s) and -22% (cs) at 656 h_q 128: super-additive, the two
sides co-bound. Session 65's trace put the unit on warpgroup 1's chain after x274; these proxies
test that reading. The patches match exact source text, so scripts/sd_trace_check.sh applies them
in CI."""
import sys

if len(sys.argv) != 3 or sys.argv[2] not in ("c", "s", "cs"):
    sys.exit("usage: sd_proxy.py DIR c|s|cs")
path = sys.argv[1] + "/src/cuda/sparse_decode_wgmma.cu"
with open(path) as f:
    src = f.read()


def rep(old, new):
    global src
    n = src.count(old)
    assert n == 1, (old, n)
    src = src.replace(old, new)


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
