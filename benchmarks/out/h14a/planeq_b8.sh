#!/bin/sh
# planeq_b8.sh ENV=V: each ORT-map model's plan steps (IDK_PROFILE=2, times cut) at batch 8 (or $BATCHES), default against ENV=V
B=${B:-bin/idunno}
for m in $(ls ~/.cache/idunno/ortbench/*.onnx | grep -v int8); do
  for b in ${BATCHES:-8}; do
    a=$(flock -s /tmp/idunno-cpu.lock env IDK_PROFILE=2 $B bench kernel --model $m --batch $b --threads 2 --seconds 0.01 --json 2>&1 | grep "idk_profile step" | sed -E 's/[0-9.]+ ms \(fastest [0-9.]+\)//; s/inbest [0-9.]+//; s/ +/ /g')
    o=$(flock -s /tmp/idunno-cpu.lock env "$@" IDK_PROFILE=2 $B bench kernel --model $m --batch $b --threads 2 --seconds 0.01 --json 2>&1 | grep "idk_profile step" | sed -E 's/[0-9.]+ ms \(fastest [0-9.]+\)//; s/inbest [0-9.]+//; s/ +/ /g')
    n=$(echo "$a" | wc -l)
    if [ "$a" = "$o" ]; then echo "$(basename $m .onnx) b$b same ($n steps)"; else echo "$(basename $m .onnx) b$b CHANGED ($n steps with default): $(diff <(echo "$a") <(echo "$o") | grep '^[<>]' | head -2 | tr '\n' ' ')"; fi
  done
done
