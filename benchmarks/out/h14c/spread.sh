#!/bin/bash
# usage: spread.sh MODEL BATCH SECONDS ROUNDS
M=$1; B=$2; S=$3; R=$4
cd /work/h14c
for r in $(seq $R); do
  echo "round $r $(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg)"
  echo -n "idunno "; bin/idunno bench kernel --model ~/.cache/idunno/ortbench/$M.onnx --batch $B --threads 2 --seconds $S --json | python3 -c 'import json,sys; d=json.load(sys.stdin); print("min %.2f p50 %.2f p99 %.2f ips %.2f runs %d cpu-ips %.2f"%(d["min_ms"],d["p50_ms"],d["p99_ms"],d["images_per_sec"],d["runs"],d["images_per_cpu_second"]))'
  echo -n "ort    "; node benchmarks/ort/bench.js ~/.cache/idunno/ortbench/$M.onnx $B $S 2 | python3 -c 'import json,sys; d=json.load(sys.stdin); print("min %.2f p50 %.2f p99 %.2f ips %.2f runs %d cpu-ips %.2f"%(d["min_ms"],d["p50_ms"],d["p99_ms"],d["images_per_sec"],d["runs"],d["images_per_cpu_second"]))'
done
