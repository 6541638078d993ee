#!/usr/bin/env bash
# sd_trace_check.sh -- a CPU test that scripts/sd_trace.py still applies to this tree: the
# instrumentation patches exact source text, so a kernel edit that moves it breaks the tracer
# silently until the next GPU session needs it (it went stale twice before). Patches a copy of the
# files it touches in a temporary directory; exit 77 (skipped) without python3.
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
