#!/usr/bin/env bash
# session 75, final tree: make gpu-test, then two more benches of the 64-head targets
cd "$(dirname "$0")/.."
BENCH_OPS=mla_decode_sparse DEADLINE=440 make gpu-test > $OUT/gpu_test.txt 2>&1
echo "gpu-test rc $?" > $OUT/summary.txt
for k in 1 2; do
  AK_BENCH_FILTER="dsv32 b 128 s_q 1 h_q 64 ,dsv32 b 128 s_q 1 h_q 128 ,dsv32 b 128 s_q 2 " timeout 120 ./build-gpu/attnkit bench --backend cuda --op mla_decode_sparse > $OUT/bench64_$k.txt 2>&1
done
grep -h "mla_decode_sparse" $OUT/bench64_*.txt >> $OUT/summary.txt
