#!/usr/bin/env bash
# codec_profile.sh -- one device run for the codec cases of issue 5 that miss their target: build
# (build-gpu: the CLI), the write / gather / convert benchmark, then an Nsight Compute profile
# (scripts/profile.sh) of one launch of each case's kernel. Logs go to $OUT (default /tmp/out).
# Environment: CASES (space-separated NAME:OP:KERNEL_REGEX:FILTER items, FILTER last and allowed
# to hold spaces as '~'; default: the cases below), BENCH=0 skips the benchmark.
set -o pipefail
cd "$(dirname "$0")/.."
export OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export PATH="$PATH:/usr/local/cuda/bin"
cmake -S . -B build-gpu -DAK_REQUIRE_CUDA=ON -DCMAKE_BUILD_TYPE=Release >/dev/null &&
  cmake --build build-gpu -j16 --target attnkit_cli 2>&1 | grep -E " error" | sed -n 1,10p
if [ "${BENCH:-1}" = 1 ]; then
  timeout 120 ./build-gpu/attnkit bench --backend cuda --op write,gather,convert 2>&1 | tee "$OUT/bench.txt" |
    grep -E "ceil|write|gather|C5"
fi
CASES=${CASES:-"idxw_pages:write:ak_idx_write_bf16_kernel:IDX132~n~262144~in~random~whole
c9w_pages:write:ak_mla_lean_kernel:C9~bf16~rows->V4~n~262144~in~random~whole
c2w_pages:write:ak_mla_lean_kernel:C2~bf16~rows->656~n~262144~in~random~whole
c6g:gather:ak_mla_lean_kernel:C6~V4
c10g:gather:ak_idx_gather_kernel:C10~IDX132
c5k:convert:ak_mla_lean_kernel:C5~BF16->FP8-PT~k_scale~0.0179"}
for c in $CASES; do
  IFS=: read -r name op kern filt <<< "$c"
  SKIP=${SKIP:-20} NCU_TIMEOUT=${NCU_TIMEOUT:-150} bash scripts/profile.sh "$name" "$op" "${filt//\~/ }" "$kern"
done
