#!/bin/bash
# busy.sh MODEL NICE SPINS...: alternate bench kernel processes with each GOMP_SPINCOUNT beside one busy loop (nice NICE), 3 rounds of 3 s
M=$1; N=$2; shift 2
nice -n $N bash -c 'while :; do :; done' & BP=$!
for r in 1 2 3; do for sp in "$@"; do
  o=$(GOMP_SPINCOUNT=$sp IDUNNO_KERNEL_LIB=bin/libidunno_kernel.so bin/idunno bench kernel --model ~/.cache/idunno/ortbench/$M.onnx --batch 1 --threads 2 --seconds 3 --json)
  echo "$M nice$N spin $sp: $(echo $o | python3 -c 'import json,sys; d=json.load(sys.stdin); print("%.1f img/s p50 %.1f min %.1f" % (d["images_per_sec"], d["p50_ms"], d["min_ms"]))')"
done; done
kill $BP
