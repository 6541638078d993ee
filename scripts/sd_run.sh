#!/usr/bin/env bash
# sd_run.sh -- one device run for the sparse MLA decode: build (build-gpu: the CLI and the sparse
# decode GPU tests), gpu_test_sparse_decode and gpu_test_wgmma, `attnkit check --backend cuda --op
# mla_decode`, compute-sanitizer memcheck and racecheck on the quick sparse decode test, and the
# mla_decode_sparse benchmark once per value of AB (space-separated settings of the variable ABVAR,
# for an A/B of two kernels in one run; default: one bench). Logs go to $OUT (default /tmp/out).
# Environment: SANITIZE=0, BENCH_TIMEOUT, TEST_TIMEOUT, ABVAR, AB, PROFILE="NAME FILTER KERNEL_REGEX";
# BASE="DIR ..." (each a `git archive` of a base commit or variant, untracked in the tree): also
# builds each DIR as build-$(basename DIR) and runs its benchmark before each of this tree's, for a
# same-run A/B of commits.
set -o pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export PATH="$PATH:/usr/local/cuda/bin"
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem,power.limit,driver_version --format=csv | tee $OUT/log.txt
t0=$(date +%s)
cmake -S . -B build-gpu -DAK_REQUIRE_CUDA=ON -DCMAKE_BUILD_TYPE=Release >/dev/null &&
  cmake --build build-gpu -j16 --target attnkit_cli gpu_test_sparse_decode gpu_test_wgmma 2>&1 |
  grep -E "error|warning|C75[0-9][0-9]" | grep -v "ak_sd_main" | sed -n 1,20p | tee -a $OUT/log.txt
for d in ${BASE:-}; do
  cmake -S "$d" -B "build-$(basename "$d")" -DAK_REQUIRE_CUDA=ON -DCMAKE_BUILD_TYPE=Release >/dev/null &&
    cmake --build "build-$(basename "$d")" -j16 --target attnkit_cli 2>&1 | grep -E " error" | sed -n 1,5p | tee -a $OUT/log.txt
done
echo "build $(( $(date +%s) - t0 )) s" | tee -a $OUT/log.txt
for t in gpu_test_wgmma gpu_test_sparse_decode; do
  timeout ${TEST_TIMEOUT:-240} ./build-gpu/tests/$t > $OUT/$t.txt 2>&1; echo "$t rc $?" | tee -a $OUT/log.txt
  grep -i -E "fail|seed|passed" $OUT/$t.txt | tail -12 | tee -a $OUT/log.txt
done
timeout 120 ./build-gpu/attnkit check --backend cuda --op mla_decode > $OUT/check.txt 2>&1; echo "check rc $?" | tee -a $OUT/log.txt
grep -i -E "fail|mismatch|error" $OUT/check.txt | head -10 | tee -a $OUT/log.txt
tail -2 $OUT/check.txt | tee -a $OUT/log.txt
for v in ${AB:-default}; do
  [ "$v" != default ] && export ${ABVAR}=$v
  for d in ${BASE:-}; do
    echo "== bench $(basename "$d") ${ABVAR:-}=$v" | tee -a $OUT/log.txt
    timeout ${BENCH_TIMEOUT:-120} "./build-$(basename "$d")/attnkit" bench --backend cuda --op mla_decode_sparse 2>&1 | tee -a $OUT/log.txt
  done
  echo "== bench ${ABVAR:-}=$v" | tee -a $OUT/log.txt
  timeout ${BENCH_TIMEOUT:-120} ./build-gpu/attnkit bench --backend cuda --op mla_decode_sparse 2>&1 | tee -a $OUT/log.txt
done
if [ "${SANITIZE:-1}" = 1 ]; then
  for tool in memcheck racecheck; do
    AK_TEST_QUICK=1 timeout 150 compute-sanitizer --tool $tool --error-exitcode 99 ./build-gpu/tests/gpu_test_sparse_decode > $OUT/$tool.txt 2>&1
    echo "$tool rc $?" | tee -a $OUT/log.txt
    tail -4 $OUT/$tool.txt | tee -a $OUT/log.txt
  done
fi
if [ -n "${PROFILE:-}" ]; then
  set -- $PROFILE
  scripts/profile.sh "$1" mla_decode_sparse "$2" "$3" | tee -a $OUT/log.txt
fi
