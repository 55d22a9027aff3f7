#!/bin/bash
# ab2.sh MODEL BATCH ROUNDS SECONDS VAR: alternate VAR=0/1 processes (ABBA): throughput, p50, min
M=$1; B=$2; R=$3; S=$4; V=$5; LIB=${LIB:-/work/main/bin/libidunno_kernel.so}
cd /work/main
for r in $(seq 1 $R); do
  if [ $((r%2)) = 1 ]; then order="0 1"; else order="1 0"; fi
  for e in $order; do
    out=$(env $V=$e IDUNNO_KERNEL_LIB=$LIB flock -x /tmp/idunno-cpu.lock bin/idunno bench kernel --model ~/.cache/idunno/ortbench/$M.onnx --batch $B --threads 2 --seconds $S 2>&1)
    tp=$(echo "$out" | grep throughput | awk '{print $2}')
    lat=$(echo "$out" | grep "batch latency" | sed 's/batch latency *//')
    echo "$M b$B r$r $V=$e: $tp img/s, $lat"
  done
done
