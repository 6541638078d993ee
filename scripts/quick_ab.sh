#!/usr/bin/env bash
# quick_ab.sh -- a same-run A/B of sparse decode kernel variants on a GPU machine. Builds this tree
# (build-gpu: the CLI and the sparse decode GPU test) and every BASE tree (build-<basename>) in
# parallel; runs this tree's quick sparse decode test under a 60 s limit (a variant that fails or
# deadlocks stops the run here instead of holding the device); then ROUNDS rounds of the
# mla_decode_sparse benchmark, every base and this tree ("gpu") alternated within each round, as
# JSON; prints their cycles table (scripts/ab_table.py: cycles = us x the SM clock read after each
# sample, the change against the first base); then this tree's full sparse decode test and
# `attnkit check --op mla_decode`, and with SANITIZE=1 memcheck and racecheck on the quick test.
# Logs go to $OUT (default /tmp/out), the JSON rounds bundled in ab.tgz (the device returns few
# files).
# Environment: BASE="DIR ..." (each a `git archive` of a base commit or a variant tree, untracked
# and not ignored, so that the device copies it); ROUNDS (default 3); AK_BENCH_SHAPES (BxSxH,...:
# 656, V4 and per-tensor fp8 at each shape) and FILTER (AK_BENCH_FILTER) pick the cases; QUICK_ONLY=1
# skips the full test and the check; SANITIZE=1; TIME_ANYWAY=1 times the trees even when the quick
# test fails (a variant whose results are known to be off, timed as a proxy).
set -o pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export PATH="$PATH:/usr/local/cuda/bin"
t0=$(date +%s)
names=""
for d in ${BASE:-}; do names="$names $(basename "$d")"; done
n=$(( $(echo $names | wc -w) + 1 ))
jobs=$(( $(nproc) / n )); [ "$jobs" -ge 1 ] || jobs=1
build() { # source dir, build dir
  cmake -S "$1" -B "$2" -DAK_REQUIRE_CUDA=ON -DCMAKE_BUILD_TYPE=Release >/dev/null &&
    cmake --build "$2" -j"$jobs" --target attnkit_cli gpu_test_sparse_decode 2>&1 | grep -E " error|C75[0-9][0-9]" | sed -n 1,5p
}
build . build-gpu > "$OUT/build_gpu.txt" 2>&1 &
for d in ${BASE:-}; do build "$d" "build-$(basename "$d")" > "$OUT/build_$(basename "$d").txt" 2>&1 & done
wait
echo "built in $(( $(date +%s) - t0 )) s"
cat "$OUT"/build_*.txt
for v in $names gpu; do [ -x "build-$v/attnkit" ] || { echo "no attnkit built for $v"; exit 1; }; done
AK_TEST_QUICK=1 timeout 60 ./build-gpu/tests/gpu_test_sparse_decode > "$OUT/quick.txt" 2>&1
rc=$?
echo "quick rc $rc: $(tail -1 "$OUT/quick.txt")"
[ $rc -eq 77 ] && { echo "no GPU: nothing to time"; exit 0; }
# a failing run's seed and cases on stdout: the device returns only a few files from $OUT
[ $rc -eq 0 ] || { grep -E "^seed|FAIL" "$OUT/quick.txt" | head -20; [ "${TIME_ANYWAY:-0}" = 1 ] || exit 1; }
for round in $(seq "${ROUNDS:-3}"); do
  for v in $names gpu; do
    AK_BENCH_FILTER="${FILTER:-}" timeout 150 "./build-$v/attnkit" bench --backend cuda --op mla_decode_sparse --json \
      > "$OUT/r${round}_$v.json" 2> "$OUT/r${round}_$v.err" || echo "round $round $v: bench rc $?"
  done
done
python3 scripts/ab_table.py "$OUT" "$(echo $names gpu | tr ' ' ',')" | tee "$OUT/table.txt"
(cd "$OUT" && tar czf ab.tgz r*_*.json && rm -f r*_*.json r*_*.err build_*.txt)
if [ "${QUICK_ONLY:-0}" != 1 ]; then
  timeout 150 ./build-gpu/tests/gpu_test_sparse_decode > "$OUT/full.txt" 2>&1
  rc=$?
  echo "full rc $rc: $(tail -1 "$OUT/full.txt")"
  [ $rc -eq 0 ] || grep -E "^seed|FAIL" "$OUT/full.txt" | head -20
  timeout 60 ./build-gpu/attnkit check --backend cuda --op mla_decode > "$OUT/check.txt" 2>&1
  echo "check rc $?: $(tail -1 "$OUT/check.txt")"
fi
if [ "${SANITIZE:-0}" = 1 ]; then
  for tool in memcheck racecheck; do
    AK_TEST_QUICK=1 timeout 200 compute-sanitizer --tool $tool --error-exitcode 99 ./build-gpu/tests/gpu_test_sparse_decode > "$OUT/$tool.txt" 2>&1
    echo "$tool rc $?: $(tail -1 "$OUT/$tool.txt")"
  done
fi
echo "total $(( $(date +%s) - t0 )) s"
