#!/bin/sh
# abp.sh MODEL BATCH SECONDS ROUNDS "ENV_A" "ENV_B" [BIN_A BIN_B]: alternating profiled runs: run min, sum of step minima
M=$1; B=$2; S=$3; R=$4; EA=$5; EB=$6; BA=${7:-bin/idunno}; BB=${8:-bin/idunno}
for r in $(seq $R); do
  for x in A B; do
    if [ $x = A ]; then E=$EA; BIN=$BA; else E=$EB; BIN=$BB; fi
    out=$(env IDK_PROFILE=1 $E $BIN bench kernel --model ~/.cache/idunno/ortbench/$M.onnx --batch $B --threads 2 --seconds $S --json 2>&1)
    mn=$(echo "$out" | grep '^{' | python3 -c 'import json,sys; d=json.load(sys.stdin); print("%.2f" % d["min_ms"])')
    sm=$(echo "$out" | grep -o "sum of each step's fastest: [0-9.]*" | awk '{print $NF}')
    echo "$(date -u +%H:%M:%S) $(cut -d' ' -f1 /proc/loadavg) $M b$B $x [$E $BIN] run_min $mn step_min_sum $sm"
  done
done
