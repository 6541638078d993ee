#!/usr/bin/env bash
# bench_power.sh -- the power and SM clock of the card while `attnkit bench` times sparse decode
# cases (session 40): one bench process per case, `nvidia-smi` sampling every 5 ms beside it
# (power.draw.instant where the driver has it, else the averaged power.draw; clocks.sm; the clock
# event reasons, 0x4 = SW power cap). For each case it prints the bench line with its cycles (us x
# the bench's SM MHz) and the samples of the last stretch above 250 W before the process ended (the
# case's replays): median and maximum power, the clock's median and range, and the reasons seen.
# nvidia-smi updates its values about every 100 ms, so a case needs ~100 ms of replays to be seen
# at all. With several builds (an A/B) each case runs in every build in turn, so that they meet
# the same card state; under the power cap the clock follows the data as well as the work
# (docs/perf.md session 48), so compare variants that change values in cycles.
# Environment: BUILDS (space-separated build directories holding attnkit, default build-gpu; each
# is labelled by its name), CASES ('|'-separated AK_BENCH_FILTER strings, default the 64-head
# targets), ROUNDS (default 1), OUT (logs, default /tmp/out).
set -o pipefail
cd "$(dirname "$0")/.."
BUILDS=${BUILDS:-${BUILD:-build-gpu}}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
CASES=${CASES:-"b 128 s_q 1 h_q 128 topk|b 128 s_q 1 h_q 64 topk|b 128 s_q 2 h_q 128 topk|h_q 128 b 128 s_q 2 topk 128"}
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
PW=power.draw.instant
nvidia-smi --query-gpu=$PW --format=csv,noheader >/dev/null 2>&1 || PW=power.draw
IFS='|' read -ra list <<< "$CASES"
k=0
for round in $(seq "${ROUNDS:-1}"); do
 for f in "${list[@]}"; do
  for b in $BUILDS; do
   k=$((k + 1))
   nvidia-smi --query-gpu=timestamp,clocks.sm,$PW,clocks_event_reasons.active --format=csv,noheader,nounits \
     -lms 5 > "$OUT/power_$k.csv" 2>/dev/null &
   sp=$!
   sleep 0.5
   AK_BENCH_FILTER="$f" "./$b/attnkit" bench --backend cuda --op mla_decode_sparse 2>&1 |
     grep -E "^mla_decode_sparse " | head -1 | sed -E 's/ +/ /g' |
     awk -v b="$(basename "$b")" '{ us = $0; sub(/\*.*/, "", us); n = split(us, a, " ");
       printf "%s: %s (%.1fk cycles)\n", b, $0, a[n] * $NF / 1000 }'
   end=$(date +%s.%N)
   sleep 0.2
   kill $sp
   wait $sp 2>/dev/null
   python3 - "$end" "$OUT/power_$k.csv" <<'PY'
import datetime, statistics, sys
end, rows = float(sys.argv[1]), []
for line in open(sys.argv[2]):
    p = [x.strip() for x in line.split(',')]
    try:
        t = datetime.datetime.strptime(p[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
        rows.append((t, float(p[1]), float(p[2]), p[3]))
    except (ValueError, IndexError):
        pass
busy, tail = [r for r in rows if r[0] <= end and r[2] > 250], []
for r in reversed(busy):
    if tail and tail[-1][0] - r[0] > 0.05:
        break
    tail.append(r)
if not tail:
    print("  no sample above 250 W")
else:
    clk, pw = [r[1] for r in tail], [r[2] for r in tail]
    print("  %.0f ms above 250 W: power median %.0f W (max %.0f), SM clock median %.0f MHz (%.0f-%.0f), reasons %s"
          % (1000 * (tail[0][0] - tail[-1][0]), statistics.median(pw), max(pw), statistics.median(clk),
             min(clk), max(clk), " ".join(sorted(set(r[3] for r in tail)))))
PY
  done
 done
done
