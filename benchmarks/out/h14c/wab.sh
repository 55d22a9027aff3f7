#!/bin/bash
# alternating processes: wait policies, ours at batch $2 for $3 s, $4 rounds
M=$1; B=$2; S=$3; R=$4
cd /work/h14c
f='import json,sys; d=json.load(sys.stdin); print("min %.2f p50 %.2f p99 %.2f ips %.2f cpu-ips %.2f"%(d["min_ms"],d["p50_ms"],d["p99_ms"],d["images_per_sec"],d["images_per_cpu_second"]))'
V=("X=1" "GOMP_SPINCOUNT=30000" "OMP_WAIT_POLICY=active")
for r in $(seq $R); do
  if [ $((r % 2)) = 0 ]; then order="2 1 0"; else order="0 1 2"; fi
  for i in $order; do
    echo -n "round $r load $(cut -d' ' -f1 /proc/loadavg) ${V[$i]}: "
    env ${V[$i]} bin/idunno bench kernel --model ~/.cache/idunno/ortbench/$M.onnx --batch $B --threads 2 --seconds $S --json | python3 -c "$f"
  done
done
