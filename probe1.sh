#!/usr/bin/env bash
export PATH=$PATH:/usr/local/cuda/bin
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
( bash scripts/sass.sh src/cuda/sparse_decode.cu ak_sd_combineILi32ELi2E $OUT/sass_c32_2.s > $OUT/sass_sum.txt 2>&1
  bash scripts/sass.sh src/cuda/sparse_decode.cu ak_sd_combineILi16ELi4E $OUT/sass_c16_4.s >> $OUT/sass_sum.txt 2>&1 ) &
FILTER="dsv32 b 8 s_q 1 h_q 16 ,dsv32 b 1 s_q 1 h_q 128 ,dsv32 b 32 s_q 1 h_q 16 ,dsv32 b 8 s_q 1 h_q 128 " bash scripts/sd_trace.sh > $OUT/trace.txt 2>&1
wait
grep -E "tmain|^mla" $OUT/trace.txt | cut -c1-200 | tail -80
cat $OUT/sass_sum.txt
