#!/usr/bin/env bash
# profile.sh -- Nsight Compute profile of one kernel launch inside an `attnkit bench` case, for the
# perf log: the full section set (speed of light, occupancy, warp states, memory), and the per-SASS-
# instruction stall samples (the source page, with -lineinfo's CUDA lines) as CSV.
#
# usage: scripts/profile.sh NAME OP FILTER KERNEL_REGEX
#   NAME          file stem under $OUT (NAME.txt: details; NAME_sass.csv: source page)
#   OP            the bench --op (e.g. mla_decode_sparse)
#   FILTER        AK_BENCH_FILTER: substring of the case's shape (e.g. "b 128 s_q 1 h_q 16 ")
#   KERNEL_REGEX  kernel-name regex (e.g. ak_sd_main)
# Environment: BUILD (default build-gpu, must be built), OUT (default /tmp/out), SKIP (launches of
# the kernel skipped before the profiled one, default 5: past the warm-up), NCU_TIMEOUT (120), KBASE
# (what KERNEL_REGEX matches: function, demangled or mangled, the last to pick template instances).
set -u -o pipefail
[ $# -eq 4 ] || { sed -n 2,12p "$0"; exit 2; }
. "$(dirname "$0")/ncu_env.sh"
rep="$OUT/$1"
AK_BENCH_FILTER="$3" timeout "${NCU_TIMEOUT:-120}" "$NCU" --set full --import-source yes --kernel-name-base "${KBASE:-function}" \
    --kernel-name "regex:$4" --launch-skip "${SKIP:-5}" --launch-count 1 -f -o "$rep" \
    "./$BUILD/attnkit" bench --backend cuda --op "$2" > "$rep.log" 2>&1
rc=$?
echo "profile $1: ncu rc $rc"
[ $rc -eq 0 ] || tail -20 "$rep.log"
"$NCU" -i "$rep.ncu-rep" --page details > "$OUT/$1.txt" 2>&1
"$NCU" -i "$rep.ncu-rep" --page source --csv --print-source sass > "$OUT/$1_sass.csv" 2>&1
rm -f "$rep.ncu-rep" "$rep.log"
grep -E "Duration|DRAM Throughput|Compute \(SM\) Throughput|Achieved Occupancy|Registers Per|Issued Warp|Warp Cycles Per Issued" "$OUT/$1.txt" | head -12
exit $rc
