#!/usr/bin/env bash
# dram_traffic.sh -- what the codec cases of issue 5 move at the DRAM pins against what the benchmark
# counts: for each case, one launch of its kernel under Nsight Compute (DRAM bytes read and written,
# L2 sectors, DRAM throughput as a share of its peak) beside the benchmark's own line (its counted
# bytes are GB/s x us). A case whose DRAM throughput is near its peak while its counted rate is far
# below the copy's is bound by bytes the layout makes the memory move (partial sectors, ECC
# read-modify-write), not by the kernel. Logs go to $OUT (default /tmp/out).
# Environment: BUILD (default build-gpu, built by this script), SKIP (launches skipped, default 10),
# DT_CASES (other cases, "op|filter" items separated by ';', e.g. sparse decode shapes) and
# DT_KERNEL (the kernel-name regex, default ^ak_).
set -u -o pipefail
export PATH="$PATH:/usr/local/cuda/bin"
. "$(dirname "$0")/ncu_env.sh"
cmake -S . -B "$BUILD" -DAK_REQUIRE_CUDA=ON -DCMAKE_BUILD_TYPE=Release >/dev/null &&
  cmake --build "$BUILD" -j16 --target attnkit_cli 2>&1 | grep -E " error" | sed -n 1,10p
M=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sectors_op_read.sum,lts__t_sectors_op_write.sum,lts__t_sector_hit_rate.pct
CASES=(
  "convert|C2 BF16->656 "
  "write|C2 bf16 rows->656 n 262144 random slots"
  "write|C9 bf16 rows->V4 n 262144 random slots"
  "write|bf16 rows->IDX132 n 262144 random slots"
  "write|C2 bf16 rows->656 n 262144 in random whole pages"
  "write|bf16 rows->IDX132 n 262144 in random whole pages"
  "gather|C3 656->bf16"
  "gather|C6 V4->bf16"
  "gather|C10 IDX132"
)
[ -n "${DT_CASES:-}" ] && IFS=';' read -r -a CASES <<< "$DT_CASES"
for c in "${CASES[@]}"; do
  op=${c%%|*}
  filt=${c#*|}
  echo "== $op: $filt"
  AK_BENCH_FILTER="$filt" timeout 120 ./"$BUILD"/attnkit bench --backend cuda --op "$op" 2>&1 | grep -E "^(ceil|$op)"
  AK_BENCH_FILTER="$filt" timeout 150 "$NCU" --metrics "$M" --kernel-name "regex:${DT_KERNEL:-^ak_}" --launch-skip "${SKIP:-10}" \
    --launch-count 1 --csv ./"$BUILD"/attnkit bench --backend cuda --op "$op" 2>/dev/null |
    grep -E '^"' | awk -F'","' 'NR > 1 { printf "  ncu %-45s %s %s\n", $(NF-2), $(NF-1), $NF }'
done
