#!/bin/bash
# ours alone against ours beside two SCHED_IDLE busy loops (one pinned to each CPU: they run
# only when nothing else wants the CPU, so the vCPUs never halt), and ORT alone
cd /work/h14c
M=$1; B=$2; S=$3; R=$4
f='import json,sys; d=json.load(sys.stdin); print("min %.2f p50 %.2f p99 %.2f ips %.2f cpu-ips %.2f"%(d["min_ms"],d["p50_ms"],d["p99_ms"],d["images_per_sec"],d["images_per_cpu_second"]))'
run() { bin/idunno bench kernel --model ~/.cache/idunno/ortbench/$M.onnx --batch $B --threads 2 --seconds $S --json | python3 -c "$f"; }
for r in $(seq $R); do
  echo -n "round $r $(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg) ours alone:      "; run
  chrt -i 0 taskset -c 0 sh -c 'while :; do :; done' & A=$!
  chrt -i 0 taskset -c 1 sh -c 'while :; do :; done' & C=$!
  echo -n "round $r $(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg) ours idle-spin:  "; run
  kill $A $C; wait $A $C 2>/dev/null
  echo -n "round $r $(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg) ort alone:       "; node benchmarks/ort/bench.js ~/.cache/idunno/ortbench/$M.onnx $B $S 2 | python3 -c "$f"
done
