#!/bin/bash
# usage: ab.sh "models" "batches" rounds seconds "configs..." ; config = name=ENV... with bin path
# configs: main | br | br:VAR=val ... | ort
M=~/.cache/idunno/ortbench
models=$1; batches=$2; rounds=$3; secs=$4; shift 4
for r in $(seq $rounds); do
 flock -x /tmp/idunno-cpu.lock bash -c '
  for m in '"$models"'; do for b in '"$batches"'; do for c in '"$*"'; do
   load=$(cut -d" " -f1 /proc/loadavg)
   case $c in
    main) out=$(/tmp/h12m_main/idunno bench kernel --model '$M'/$m.onnx --batch $b --threads 2 --seconds '$secs' --json);;
    ort) out=$(cd /work/main/benchmarks/ort && node bench.js '$M'/$m.onnx $b '$secs' 2);;
    br) out=$(/work/h12m/bin/idunno bench kernel --model '$M'/$m.onnx --batch $b --threads 2 --seconds '$secs' --json);;
    br:*) out=$(env ${c#br:} /work/h12m/bin/idunno bench kernel --model '$M'/$m.onnx --batch $b --threads 2 --seconds '$secs' --json);;
   esac
   min=$(echo "$out" | /usr/bin/python3 -c "import json,sys; d=json.loads(sys.stdin.read().strip().splitlines()[-1]); print(\"%.2f %d\"%(d[\"min_ms\"],d[\"runs\"]))")
   echo "'$r' $m $b $c $min load=$load $(date -u +%H:%M:%S)"
  done; done; done'
done
