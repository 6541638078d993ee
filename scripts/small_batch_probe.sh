#!/usr/bin/env bash
# small_batch_probe.sh -- where the fixed cost of the small-batch sparse decode shapes goes: the
# kernel-boundary costs inside a replayed graph (scripts/launch_gap.cu), then for each small shape
# the graph-replay time per call (attnkit bench) beside the duration of each kernel it launches
# (Nsight Compute, clocks and caches left alone). Logs go to $OUT (default /tmp/out).
# Environment: BUILD (default build-gpu; built here if missing), SHAPES (bench filters, '|'-separated).
set -o pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}
BUILD=${BUILD:-build-gpu}
mkdir -p "$OUT"
export PATH="$PATH:/usr/local/cuda/bin"
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader
cmake -S . -B "$BUILD" -DAK_REQUIRE_CUDA=ON -DCMAKE_BUILD_TYPE=Release >/dev/null &&
  cmake --build "$BUILD" -j16 --target attnkit_cli 2>&1 | grep -E " error|C7520" | sed -n 1,10p
nvcc -gencode=arch=compute_90a,code=sm_90a -O3 -std=c++17 scripts/launch_gap.cu -o "$BUILD/launch_gap" && "./$BUILD/launch_gap"
SHAPES=${SHAPES:-"b 1 s_q 1 h_q 16 |b 1 s_q 1 h_q 128 |b 8 s_q 1 h_q 16 |b 8 s_q 1 h_q 128 |dsv4-flash b 1 s_q 1 "}
IFS='|' read -r -a list <<<"$SHAPES"
for f in "${list[@]}"; do
  echo "== $f"
  AK_BENCH_FILTER="$f" timeout 60 "./$BUILD/attnkit" bench --backend cuda --op mla_decode_sparse 2>&1 | grep mla_decode_sparse
  AK_BENCH_FILTER="$f" timeout 120 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum \
    --launch-skip 40 --launch-count 6 -k "regex:ak_sd" "./$BUILD/attnkit" bench --backend cuda --op mla_decode_sparse \
    > "$OUT/ncu.txt" 2>&1
  grep -E "ak_sd[a-z_]*|gpu__time_duration" "$OUT/ncu.txt" | sed -E 's/\(int, int, int\).*//; s/ +/ /g' | head -12
done
