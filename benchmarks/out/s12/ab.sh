#!/bin/bash
# ab.sh MODEL BATCH ROUNDS SECONDS: alternate IDK_SCONV=0/1 processes (ABBA), IDK_PROFILE=2
M=$1; B=$2; R=$3; S=$4
cd /work/main
for r in $(seq 1 $R); do
  if [ $((r%2)) = 1 ]; then order="0 1"; else order="1 0"; fi
  for e in $order; do
    out=$(IDK_SCONV=$e IDK_PROFILE=2 IDUNNO_KERNEL_LIB=bin/libidunno_kernel.so flock -x /tmp/idunno-cpu.lock bin/idunno bench kernel --model ~/.cache/idunno/ortbench/$M.onnx --batch $B --threads 2 --seconds $S 2>&1)
    sum=$(echo "$out" | grep -o "sum of each step's fastest: [0-9.]*" | awk '{print $NF}')
    fr=$(echo "$out" | grep -o "fastest run [0-9.]*" | awk '{print $NF}')
    nc=$(echo "$out" | grep "idk_profile step" | grep -c " C ")
    cpu=$(echo "$out" | grep "per CPU-second" | awk '{print $3}')
    echo "$M b$B round $r SCONV=$e: steps-fastest-sum $sum ms, fastest run $fr ms, C steps $nc, GFLOP/CPU-s $cpu"
  done
done
