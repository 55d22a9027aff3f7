#!/bin/sh
# per-kind fastest sums with IDK_PROFILE=1, both settings alternated
M=$HOME/.cache/idunno/ortbench
cd /work/h13a
for spec in "vit_b_16 1 3" "vit_b_16 8 6" "transformer_encoder 1 3" "transformer_encoder 8 3" "swin_t 1 3"; do
  set -- $spec
  for e in 1 0; do
    echo "== $1 b$2 IDK_ATTN_FUSED=$e $(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg)"
    IDK_ATTN_FUSED=$e IDK_PROFILE=1 bin/idunno bench kernel --model $M/$1.onnx --batch $2 --threads 2 --seconds $3 --json 2>&1 | grep -E "kind +(5|10|42|43):|fastest run|min_ms" | sed 's/.*"min_ms":\([0-9.]*\).*/min_ms \1/'
  done
done
