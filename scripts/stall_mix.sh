#!/usr/bin/env bash
# stall_mix.sh -- the stall-reason mix of one kernel launch inside an `attnkit bench` case: each
# reason's share of the warps' stall cycles (Nsight Compute's smsp__average_warps_issue_stalled_*
# ratios), the SM cycles active and the instructions executed. Quicker than profile.sh (no source
# page), and the cache control is a choice: Nsight Compute's default flushes every cache before the
# profiled launch, which puts the code's first fetch on every SM (session 46, x218: instruction
# fetch 23% of b 8 h_q 128's stalls flushed, 5% not).
#
# usage: scripts/stall_mix.sh OP FILTER KERNEL_REGEX [CACHE]
#   OP            the bench --op (e.g. mla_decode_sparse)
#   FILTER        AK_BENCH_FILTER: substring of the case's shape (e.g. "b 8 s_q 1 h_q 16")
#   KERNEL_REGEX  kernel-name regex (e.g. ak_sdt_main)
#   CACHE         none (default: caches as the previous launches left them) or all (flushed)
# Environment: BUILD (default build-gpu, must be built), OUT (default /tmp/out: the raw CSV), SKIP
# (launches of the kernel skipped first, default 60: past the bench's warm-up), NCU_TIMEOUT (150).
set -u -o pipefail
[ $# -ge 3 ] || { sed -n 2,16p "$0"; exit 2; }
. "$(dirname "$0")/ncu_env.sh"
cache=${4:-none}
csv="$OUT/stall_mix_$3_$cache.csv"
M="regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,smsp__cycles_active.avg,smsp__inst_executed.sum"
AK_BENCH_FILTER="$2" timeout "${NCU_TIMEOUT:-150}" "$NCU" --cache-control "$cache" --clock-control none \
    --metrics "$M" --kernel-name "regex:$3" --launch-skip "${SKIP:-60}" --launch-count 1 --csv --page raw \
    "./$BUILD/attnkit" bench --backend cuda --op "$1" > "$csv" 2> "$csv.err"
rc=$?
echo "stall_mix $3 ($2) cache $cache: ncu rc $rc"
[ $rc -eq 0 ] || { tail -5 "$csv.err"; exit $rc; }
python3 - "$csv" <<'PY'
import csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if r]
start = next((i for i, r in enumerate(rows) if r[0] == "ID"), None)
if start is None or len(rows) < start + 3:
    sys.exit("no result in " + sys.argv[1])
hdr, d = rows[start], rows[-1]
pre, suf = "smsp__average_warps_issue_stalled_", "_per_issue_active.ratio"
mix = {}
for k, v in zip(hdr, d):
    if k.startswith(pre) and k.endswith(suf):
        try:
            mix[k[len(pre):-len(suf)]] = float(v.replace(",", ""))
        except ValueError:
            pass
tot = sum(mix.values()) or 1.0
print("  stall cycles per issue %.2f: " % tot +
      ", ".join("%s %.0f%%" % (k, 100 * v / tot) for k, v in sorted(mix.items(), key=lambda x: -x[1])[:10]))
for k, v in zip(hdr, d):
    if k in ("smsp__cycles_active.avg", "smsp__inst_executed.sum"):
        print("  %s %s" % (k, v))
PY
