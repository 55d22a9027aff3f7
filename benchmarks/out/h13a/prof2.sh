#!/bin/sh
# per-step minima (IDK_PROFILE=2) of the attention steps: the fused step, or the scores product, softmax and product with V
M=$HOME/.cache/idunno/ortbench
cd /work/h13a
for spec in "vit_b_16 1 4" "vit_b_16 8 8" "transformer_encoder 1 4" "transformer_encoder 8 6" "swin_t 1 4"; do
  set -- $spec
  for e in 1 0; do
    IDK_ATTN_FUSED=$e IDK_PROFILE=2 bin/idunno bench kernel --model $M/$1.onnx --batch $2 --threads 2 --seconds $3 --json > /tmp/h13a/p2.txt 2>&1
    python3 - "$1 b$2 IDK_ATTN_FUSED=$e $(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg)" <<'PY'
import re, sys
steps = [l for l in open('/tmp/h13a/p2.txt') if l.startswith('idk_profile step')]
att = 0.0; n = 0
for l in steps:
    m = re.search(r'kind +(\d+) .*fastest ([0-9.]+)\) out (\S+) in (.*?) (ia|inbest)', l)
    if not m: continue
    kind, fast, out, ins = int(m.group(1)), float(m.group(2)), m.group(3), m.group(4)
    def sq(s):
        d = s.lstrip('c').split('x')
        return len(d) >= 3 and d[-1] == d[-2]
    if kind == 43 or kind in (10, 42) and sq(out) or kind == 5 and (sq(out) or any(sq(x) for x in ins.split())):
        att += fast; n += 1
tot = re.search(r'"min_ms":([0-9.]+)', open('/tmp/h13a/p2.txt').read())
print(f"{sys.argv[1]}: attention steps {n}, sum of fastest {att:.3f} ms; run min_ms {tot.group(1) if tot else '?'}")
PY
  done
done
