#!/bin/sh
# abp2.sh MODEL BATCH SECONDS ROUNDS OUTDIR "ENV_A" "ENV_B": alternating IDK_PROFILE=2 runs, files OUTDIR/{A,B}_r.txt
M=$1; B=$2; S=$3; R=$4; O=$5; EA=$6; EB=$7; mkdir -p $O
for r in $(seq $R); do
  for x in A B; do
    if [ $x = A ]; then E=$EA; else E=$EB; fi
    (date -u +%H:%M:%S; cat /proc/loadavg; env IDK_PROFILE=2 $E bin/idunno bench kernel --model ~/.cache/idunno/ortbench/$M.onnx --batch $B --threads 2 --seconds $S --json 2>&1) > $O/${x}_$r.txt
  done
done
