#!/usr/bin/env bash
# sd_trace.sh -- per-unit timelines of the sparse decode kernels on a GPU machine: copies this tree
# to $WORK (default /tmp/sd_trace), instruments the copy (scripts/sd_trace.py), builds its attnkit
# and runs the mla_decode_sparse cases that FILTER names (AK_BENCH_FILTER syntax), printing each
# case's averages in cycles per unit next to its time. A traced call takes ~1-3% longer on most
# shapes, ~9% at b 128 h_q 64 and 128 (session 51; there the CTAs' stamped spans match the
# untraced call and the extra lies outside them) and ~16% at b 8 h_q 128 (session 83): compare
# traced builds with traced builds.
# V4's instance of ak_sdx_main spills 36 bytes when traced (its producer's 136 registers), and
# its units then run ~20% long: do not split V4's 64-head unit by this trace. A stamp right after
# a bar.sync (BAR.SYNC.DEFER_BLOCKING) issues before the barrier completes, so warpgroup 2's "P
# loaded" stamp follows the use of its P loads; warpgroup 1's barrier stamp is its pass only where
# it arrives last, which it does at b 128 (session 52).
set -eo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/cuda/bin"
W=${WORK:-/tmp/sd_trace}
rm -rf "$W"
mkdir -p "$W/src"
tar --exclude='./build*' --exclude=./.git -cf - . | tar -x -m -C "$W/src"
python3 scripts/sd_trace.py "$W/src"
cmake -S "$W/src" -B "$W/build" -DAK_REQUIRE_CUDA=ON -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$W/build" -j"$(nproc)" --target attnkit_cli 2>&1 | grep -E " error" || true
AK_BENCH_FILTER="${FILTER:-}" "$W/build/attnkit" bench --backend cuda --op mla_decode_sparse 2>&1 |
  grep -E "^(fence|sdt|trace|tmain|mla_decode_sparse)" | cut -c1-800
