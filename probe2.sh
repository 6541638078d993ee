#!/usr/bin/env bash
export PATH=$PATH:/usr/local/cuda/bin
nvidia-smi --query-gpu=name --format=csv,noheader
FILTER="dsv32 b 8 s_q 1 h_q 16 ,dsv32 b 1 s_q 1 h_q 128 ,dsv32 b 32 s_q 1 h_q 16 " bash scripts/sd_trace.sh > $OUT/trace.txt 2>&1
grep -E "cycles after|^mla" $OUT/trace.txt | sed -E 's/tmain dsv32 (b [0-9]+ s_q 1 h_q [0-9]+).*BLOCKSCALE:/\1/' | cut -c1-150
