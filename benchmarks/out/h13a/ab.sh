#!/bin/sh
cd /work/h13a/kernel
for spec in "vit_b_16 1 16" "transformer_encoder 1 16" "vit_b_16 8 40" "swin_t 1 12"; do
  set -- $spec
  echo "== $1 b$2 $(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg)"
  IDK_AB_MODEL=/root/.cache/idunno/ortbench/$1.onnx IDK_AB_BATCH=$2 IDK_AB_SECONDS=$3 IDK_AB_ENV=IDK_ATTN_FUSED=0 /tmp/h13a/kernel.test -test.run TestEnvAB -test.v 2>&1 | grep -vE "^(=== RUN|PASS|ok)"
done
