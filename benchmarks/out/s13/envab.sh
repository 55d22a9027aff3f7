#!/bin/bash
# envab.sh MODEL BATCH SECONDS NAME=VALUE [repeats]
for i in $(seq 1 ${5:-1}); do
IDUNNO_KERNEL_LIB=${LIB:-/work/main/bin/libidunno_kernel.so} IDK_AB_MODEL=$HOME/.cache/idunno/ortbench/$1.onnx IDK_AB_BATCH=$2 IDK_AB_SECONDS=$3 IDK_AB_ENV=$4 flock -x /tmp/idunno-cpu.lock /tmp/s13/kernel.test -test.run TestEnvAB -test.v 2>&1 | grep -E "runs,"
done
