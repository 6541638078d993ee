#!/usr/bin/env bash
# pipe_profile.sh -- how busy the SM's shared-memory banks, tensor (GMMA) pipe and issue slots are
# during one launch of a sparse decode kernel, for the cases of a benchmark filter: Nsight Compute
# on one launch per case (after the warm-up), beside the case's own benchmark line. Answers whether
# a kernel is bound by shared-memory bandwidth (docs/perf.md, session 19).
#
# usage: scripts/pipe_profile.sh KERNEL_REGEX FILTER...
#   KERNEL_REGEX  kernel-name regex (e.g. ak_sdx_main)
#   FILTER        AK_BENCH_FILTER of one mla_decode_sparse case each
# Environment: BUILD (default build-gpu, must be built), OUT (default /tmp/out), SKIP (launches of
# the kernel skipped before the profiled one, default 10), METRICS (space-separated metric names in
# place of the default set: pipe and issue utilizations are taken per active cycle, the stall
# reasons *_per_issue_active as ratios).
set -u -o pipefail
[ $# -ge 2 ] || { sed -n 2,13p "$0"; exit 2; }
. "$(dirname "$0")/ncu_env.sh"
re=$1
shift
# the metrics this ncu knows, of the ones asked for (an unknown name fails the whole run)
"$NCU" --query-metrics --chip gh100 > "$OUT/metrics_known.txt" 2>&1
want=${METRICS:-"l1tex__data_pipe_lsu_wavefronts_mem_shared l1tex__data_pipe_lsu_wavefronts_mem_shared_op_gmma
l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st
l1tex__data_bank_reads l1tex__data_bank_writes sm__pipe_tensor_op_hmma_cycles_active
sm__pipe_shared_cycles_active smsp__issue_active dram__throughput"}
M=""
for m in $want; do
  if grep -q "^$m " "$OUT/metrics_known.txt"; then
    case $m in
      *per_issue_active) M="$M,$m.ratio" ;;
      *issue_active|sm__pipe_*|sm__inst_executed_pipe_*) M="$M,$m.avg.pct_of_peak_sustained_active" ;;
      *) M="$M,$m.avg.pct_of_peak_sustained_elapsed" ;;
    esac
  else
    echo "metric $m: not known to this ncu"
  fi
done
M="gpu__time_duration.sum${M}"
for f in "$@"; do
  echo "== $f"
  AK_BENCH_FILTER="$f" timeout 120 ./"$BUILD"/attnkit bench --backend cuda --op mla_decode_sparse 2>&1 |
    grep -E "^mla_decode_sparse"
  AK_BENCH_FILTER="$f" timeout 150 "$NCU" --metrics "$M" --kernel-name "regex:$re" --launch-skip "${SKIP:-10}" \
    --launch-count 1 ./"$BUILD"/attnkit bench --backend cuda --op mla_decode_sparse 2>&1 |
    grep -E "^\s+(gpu__|l1tex__|sm__|smsp__|dram__)" | sed 's/^ */  /'
done
