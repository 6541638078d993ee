#!/usr/bin/env bash
# sass.sh -- the machine code of one kernel of one CUDA source, compiled as the library compiles it
# (sm_90a, -O3), without a device: one instruction per line into OUT_FILE (default
# /tmp/sass_FUNC.s), then a summary (instructions, wgmma instructions, uniform moves and adds, the
# 64-bit uniform adds, register spills). Counting a variant's instructions here before a device call
# is how x116 found its descriptor moves (docs/perf.md, session 20).
#
# usage: scripts/sass.sh SOURCE FUNCTION [OUT_FILE]
#   SOURCE    a .cu file of src/cuda (e.g. src/cuda/sparse_decode_wgmma.cu)
#   FUNCTION  a substring of the mangled kernel name (e.g. ak_sdx_mainILi3ELi0E: ak_sdx_main<656, one list>)
# Environment: CUOBJDUMP (default: cuobjdump on PATH or in /usr/local/cuda/bin; the device image has
# it; where nvcc comes without it, the copy in Triton's wheel, triton/backends/nvidia/bin/cuobjdump,
# or in NVIDIA's nvidia-cuda-cuobjdump wheel, nvidia/cu13/bin/cuobjdump, works), NVCC_FLAGS (extra
# compiler flags, e.g. -DSOMETHING for a variant). scripts/sass_loop.py counts one loop of an object.
set -u -o pipefail
[ $# -ge 2 ] || { sed -n 2,16p "$0"; exit 2; }
cd "$(dirname "$0")/.."
src=$1 fn=$2 out=${3:-/tmp/sass_$2.s}
OBJDUMP=${CUOBJDUMP:-$(command -v cuobjdump || echo /usr/local/cuda/bin/cuobjdump)}
[ -x "$OBJDUMP" ] || { echo "sass.sh: no cuobjdump (set CUOBJDUMP)"; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
obj=$tmp/kernel.o log=$tmp/ptxas.log
nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -DAK_BUILDING_LIBRARY -DAK_HAVE_CUDA \
    -D_POSIX_C_SOURCE=200809L -Iinclude -Isrc ${NVCC_FLAGS:-} -c "$src" -o "$obj" -Xptxas -v 2> "$log" ||
    { cat "$log"; exit 1; }
# the instruction text of the function's body: drop the address and encoding comments
"$OBJDUMP" -sass "$obj" | awk -v f="$fn" '/Function :/ {on = index($0, f) > 0; next}
    on && $1 ~ /^\/\*[0-9a-f]+\*\/$/ {$1 = ""; line = $0; sub(/;.*$/, "", line); gsub(/^ +| +$/, "", line); print line}' > "$out"
n=$(wc -l < "$out")
[ "$n" -gt 0 ] || { echo "sass.sh: no function matching '$fn' in $src"; exit 1; }
echo "$fn: $n instructions in $out; HGMMA $(grep -c HGMMA "$out"), UMOV $(grep -c '^UMOV' "$out")," \
    "UIADD3 $(grep -c '^UIADD3 ' "$out"), UIADD3.64 $(grep -c '^UIADD3.64' "$out")"
grep -A3 "Compiling entry function '[^']*$fn" "$log" | grep -E "registers|spill" | sed 's/^ *ptxas info *: *//; s/^ */  /'
