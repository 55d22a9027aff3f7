#!/bin/sh
# usage: h12w_ab.sh MODEL BATCH SECONDS ROUNDS "ENV_A" "ENV_B" [BIN_A BIN_B]
# alternates A and B (bench kernel, 2 threads); prints min/p50 per run. Run under flock -x.
M=$1; B=$2; S=$3; R=$4; EA=$5; EB=$6; BA=${7:-/work/h12w/bin/idunno}; BB=${8:-/work/h12w/bin/idunno}
LA=${LIBA:-/work/h12w/bin/libidunno_kernel.so}; LB=${LIBB:-/work/h12w/bin/libidunno_kernel.so}
echo "# $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg) model $M batch $B: A=[$EA $BA] B=[$EB $BB]"
i=1
while [ $i -le $R ]; do
  for side in A B; do
    if [ $side = A ]; then E=$EA; BIN=$BA; L=$LA; else E=$EB; BIN=$BB; L=$LB; fi
    out=$(env $E IDUNNO_KERNEL_LIB=$L $BIN bench kernel --model ~/.cache/idunno/ortbench/$M.onnx --batch $B --threads 2 --seconds $S --json 2>/dev/null)
    echo "$side round $i $(echo "$out" | /usr/bin/python3 -c 'import json,sys; d=json.load(sys.stdin); print("min %.2f p50 %.2f runs %d" % (d["min_ms"], d["p50_ms"], d["runs"]))') load $(cut -d' ' -f1 /proc/loadavg)"
  done
  i=$((i+1))
done
