#!/usr/bin/env bash
# quick_ab.sh -- a short device run for a sparse decode kernel variant: build (build-gpu: the CLI and
# the sparse decode GPU test), the quick sparse decode test under a 45 s limit (a variant that fails
# or deadlocks stops the run here instead of holding the device), then the mla_decode_sparse
# benchmark of each base and of this tree, the full sparse decode test and `attnkit check --op
# mla_decode`. Logs go to $OUT (default /tmp/out).
# Environment: BASE="DIR ..." (each a `git archive` of a base commit or variant, untracked in the
# tree, built as build-$(basename DIR)); FILTER (AK_BENCH_FILTER for the benches); SANITIZE=1 adds
# memcheck and racecheck on the quick test.
set -o pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export PATH="$PATH:/usr/local/cuda/bin"
cmake -S . -B build-gpu -DAK_REQUIRE_CUDA=ON -DCMAKE_BUILD_TYPE=Release >/dev/null &&
  cmake --build build-gpu -j16 --target attnkit_cli gpu_test_sparse_decode 2>&1 | grep -E " error|C75[0-9][0-9]" | head
for d in ${BASE:-}; do
  cmake -S "$d" -B "build-$(basename "$d")" -DAK_REQUIRE_CUDA=ON -DCMAKE_BUILD_TYPE=Release >/dev/null &&
    cmake --build "build-$(basename "$d")" -j16 --target attnkit_cli 2>&1 | grep " error" | head -3
done
AK_TEST_QUICK=1 timeout 45 ./build-gpu/tests/gpu_test_sparse_decode > "$OUT/quick.txt" 2>&1
rc=$?
echo "quick rc $rc"
tail -3 "$OUT/quick.txt"
# a failing run's seed and cases on stdout: the device returns only a few files from $OUT
[ $rc -eq 0 ] || { grep -E "^seed|^FAIL" "$OUT/quick.txt" | head -20; exit 1; }
for d in ${BASE:-}; do
  echo "== $d"
  AK_BENCH_FILTER="${FILTER:-}" timeout 60 "./build-$(basename "$d")/attnkit" bench --backend cuda --op mla_decode_sparse 2>&1 |
    grep -E "DSA|DSV4|MLA_|ceil"
done
echo "== tree"
AK_BENCH_FILTER="${FILTER:-}" timeout 60 ./build-gpu/attnkit bench --backend cuda --op mla_decode_sparse 2>&1 |
  grep -E "DSA|DSV4|MLA_|ceil"
timeout 100 ./build-gpu/tests/gpu_test_sparse_decode > "$OUT/full.txt" 2>&1
rc=$?
echo "full rc $rc"
tail -2 "$OUT/full.txt"
[ $rc -eq 0 ] || grep -E "^seed|^FAIL" "$OUT/full.txt" | head -20
timeout 60 ./build-gpu/attnkit check --backend cuda --op mla_decode > "$OUT/check.txt" 2>&1
echo "check rc $?"
tail -1 "$OUT/check.txt"
if [ "${SANITIZE:-0}" = 1 ]; then
  for tool in memcheck racecheck; do
    AK_TEST_QUICK=1 timeout 150 compute-sanitizer --tool $tool --error-exitcode 99 ./build-gpu/tests/gpu_test_sparse_decode > "$OUT/$tool.txt" 2>&1
    echo "$tool rc $?"
    tail -2 "$OUT/$tool.txt"
  done
fi
