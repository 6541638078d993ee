#!/usr/bin/env bash
# sd_trace_check.sh -- a CPU test that scripts/sd_trace.py and scripts/sd_proxy.py still apply to
# this tree: the instrumentation and the proxies patch exact source text, so a kernel edit that
# moves it breaks them silently until the next GPU session needs them (the tracer went stale twice
# before). Patches copies of the files they touch in a temporary directory; exit 77 (skipped)
# without python3.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v python3 >/dev/null || { echo "python3 not found: skipped"; exit 77; }
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
mkdir -p "$t/src/cuda" "$t/tools"
cp src/cuda/sparse_decode.cu src/cuda/sparse_decode_wgmma.cu "$t/src/cuda/"
cp tools/cmd_bench.c "$t/tools/"
python3 scripts/sd_trace.py "$t"
echo "sd_trace.py applies to this tree"
for v in c s cs p q v t z tz zp tzp; do
  mkdir -p "$t/$v/src/cuda"
  cp src/cuda/sparse_decode_wgmma.cu "$t/$v/src/cuda/"
  python3 scripts/sd_proxy.py "$t/$v" "$v" >/dev/null
done
echo "sd_proxy.py applies to this tree"
