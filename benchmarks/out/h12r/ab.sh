#!/bin/sh
# A/B of IDK_SPLIT=1 against the default rule, bf16 and int8, alternating within one locked run.
# usage: ab.sh OUT BATCH ROUNDS SECONDS PRECS MODEL...
out=$1; b=$2; rounds=$3; secs=$4; precs=$5; shift 5
M=$HOME/.cache/idunno/ortbench
{
echo "# start $(date -u +%FT%TZ) load: $(cut -d' ' -f1-3 /proc/loadavg) batch=$b rounds=$rounds seconds=$secs"
r=0
while [ $r -lt $rounds ]; do
  for m in "$@"; do
    for p in $(echo $precs | tr , ' '); do
      f=$M/$m.onnx; [ $p = int8 ] && f=$M/$m.int8.onnx
      if [ $((r % 2)) -eq 0 ]; then order="def split"; else order="split def"; fi
      for s in $order; do
        v=0; [ $s = split ] && v=1
        j=$(IDK_SPLIT=$v bin/idunno bench kernel --model $f --batch $b --threads 2 --seconds $secs --precision $p --json 2>&1 | tail -1)
        echo "round=$r model=$m prec=$p mode=$s $j"
      done
    done
  done
  r=$((r+1))
done
echo "# end $(date -u +%FT%TZ) load: $(cut -d' ' -f1-3 /proc/loadavg)"
} >> $out
