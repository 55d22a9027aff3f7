#!/bin/bash
# two one-thread bench kernel loops pinned to cpu0 and cpu1 at once; per-second throughput each
M=${1:-resnet18}; N=${2:-12}
for c in 0 1; do
  ( for i in $(seq 1 $N); do IDUNNO_KERNEL_LIB=bin/libidunno_kernel.so taskset -c $c bin/idunno bench kernel --model ~/.cache/idunno/ortbench/$M.onnx --batch 1 --threads 1 --seconds 1 --json 2>/dev/null | python3 -c "import json,sys,time; d=json.load(sys.stdin); print('%.1f cpu$c %s'%(time.time()%1000, {k:d[k] for k in d if k in ('images_per_sec','min_ms','p50_ms')}))"; done ) > /tmp/s12/asym_$c.txt &
done
wait
paste /tmp/s12/asym_0.txt /tmp/s12/asym_1.txt
