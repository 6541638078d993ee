#!/usr/bin/env bash
# foundation_run.sh -- one device run for the foundation ops (codecs, builders, transforms, merge):
# build (build-gpu, the CLI and gpu_test_foundation only), gpu_test_foundation, `attnkit check
# --backend cuda` on those ops, their benchmark, compute-sanitizer memcheck on the quick test,
# optionally an Nsight Compute profile of one staged codec launch. Logs go to $OUT (default
# /tmp/out). Environment: BENCH_TIMEOUT, BENCH_OPS, SANITIZE=0, SAN_TIMEOUT, PROFILE=1,
# NCU_TIMEOUT.
set -o pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem,power.limit,driver_version --format=csv | tee $OUT/log.txt
t0=$(date +%s)
cmake -S . -B build-gpu -DAK_REQUIRE_CUDA=ON -DCMAKE_BUILD_TYPE=Release >/dev/null &&
  cmake --build build-gpu -j16 --target attnkit_cli gpu_test_foundation 2>&1 | grep -v "^\[" | grep -v "sd_main\|Local memory" | tail -5 | tee -a $OUT/log.txt
echo "build $(( $(date +%s) - t0 )) s" | tee -a $OUT/log.txt
timeout 60 ./build-gpu/tests/gpu_test_foundation > $OUT/test.txt 2>&1; echo "gpu_test_foundation rc $?" | tee -a $OUT/log.txt
grep -i -E "fail|pass|ok|seed" $OUT/test.txt | tail -25 | tee -a $OUT/log.txt
timeout 60 ./build-gpu/attnkit check --backend cuda --op cache_write,cache_gather,cache_convert,block_table,csr,transform,swa_indices,combine_indices,merge > $OUT/check.txt 2>&1; echo "check rc $?" | tee -a $OUT/log.txt
grep -i -E "fail|mismatch|error" $OUT/check.txt | head -20 | tee -a $OUT/log.txt
tail -4 $OUT/check.txt | tee -a $OUT/log.txt
t1=$(date +%s)
timeout ${BENCH_TIMEOUT:-110} ./build-gpu/attnkit bench --backend cuda --op ${BENCH_OPS:-write,gather,convert,block_table,csr,transform_paged,transform_ragged,swa_indices,combine_indices,merge} > $OUT/bench.txt 2>&1; echo "bench rc $? in $(( $(date +%s) - t1 )) s" | tee -a $OUT/log.txt
cat $OUT/bench.txt
if [ "${SANITIZE:-1}" = 1 ]; then
  AK_TEST_QUICK=1 timeout ${SAN_TIMEOUT:-40} compute-sanitizer --tool memcheck --error-exitcode 99 ./build-gpu/tests/gpu_test_foundation > $OUT/memcheck.txt 2>&1; echo "memcheck rc $?" | tee -a $OUT/log.txt
  tail -6 $OUT/memcheck.txt | tee -a $OUT/log.txt
fi
if [ "${PROFILE:-0}" = 1 ]; then
  NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
  timeout ${NCU_TIMEOUT:-60} $NCU --kernel-name regex:ak_mla_codec_kernel --launch-skip 20 --launch-count 1 --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats ./build-gpu/attnkit bench --backend cuda --op convert > $OUT/ncu.txt 2>&1; echo "ncu rc $?" | tee -a $OUT/log.txt
  grep -E "Duration|DRAM Throughput|Memory Throughput|Compute \(SM\)|Achieved Occupancy|Theoretical Occupancy|Block Limit|Registers Per|Dynamic Shared|Waves|Stall|Issued Warp|Warp Cycles|ERR|rror" $OUT/ncu.txt | head -40 | tee -a $OUT/log.txt
fi
