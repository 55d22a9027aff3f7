#!/bin/bash
# usage: ab_main.sh MODEL BATCH ROUNDS SECONDS: per round (one exclusive-lock hold each), main's
# build (/tmp/h12s_main, a copy of /work/main/bin), this branch's and ONNX Runtime's bench.js,
# the order rotated each round; prints min ms, runs, load average and UTC time per run.
M=~/.cache/idunno/ortbench
m=$1; b=$2; rounds=$3; secs=$4
for r in $(seq $rounds); do
  case $((r % 3)) in 1) order="main br ort";; 2) order="br ort main";; 0) order="ort main br";; esac
  flock -x /tmp/idunno-cpu.lock bash -c '
  for c in '"$order"'; do
    load=$(cut -d" " -f1 /proc/loadavg)
    case $c in
      main) out=$(/tmp/h12s_main/idunno bench kernel --model '$M'/'$m'.onnx --batch '$b' --threads 2 --seconds '$secs' --json);;
      br) out=$(/work/h12s/bin/idunno bench kernel --model '$M'/'$m'.onnx --batch '$b' --threads 2 --seconds '$secs' --json);;
      ort) out=$(cd /work/h12s/benchmarks/ort && node bench.js '$M'/'$m'.onnx '$b' '$secs' 2);;
    esac
    min=$(echo "$out" | /usr/bin/python3 -c "import json,sys; d=json.loads(sys.stdin.read().strip().splitlines()[-1]); print(\"%.2f %d\"%(d[\"min_ms\"],d[\"runs\"]))")
    echo "'$r' '$m' '$b' $c $min load=$load $(date -u +%H:%M:%S)"
  done'
done
