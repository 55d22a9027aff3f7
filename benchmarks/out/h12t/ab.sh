#!/bin/sh
# ab.sh MODEL BATCH SECONDS ROUNDS "ENV_A" "ENV_B" [BIN_A BIN_B]: alternating bench kernel runs, min_ms each
M=$1; B=$2; S=$3; R=$4; EA=$5; EB=$6; BA=${7:-bin/idunno}; BB=${8:-bin/idunno}
for r in $(seq $R); do
  for x in A B; do
    if [ $x = A ]; then E=$EA; BIN=$BA; else E=$EB; BIN=$BB; fi
    ms=$(env $E $BIN bench kernel --model ~/.cache/idunno/ortbench/$M.onnx --batch $B --threads 2 --seconds $S --json | python3 -c 'import json,sys; d=json.load(sys.stdin); print("%.2f %.2f" % (d["min_ms"], d["p50_ms"]))')
    echo "$(date -u +%H:%M:%S) $(cut -d' ' -f1 /proc/loadavg) $M b$B $x [$E $BIN] min/p50 $ms"
  done
done
