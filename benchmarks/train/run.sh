#!/usr/bin/env bash
# Training throughput, IDunno against PyTorch (Debian's python3-torch) on the same machine in
# the same run: the same ONNX models (zoo, PyTorch initialisation), batch, optimizer (SGD,
# momentum 0.9) and 2 threads; the two alternate ROUNDS times so both see the same load.
# Prints one JSON line per run and a ratio per model (medians), appends to OUT.
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${BIN:-bin/idunno}
SECONDS_EACH=${SECONDS_EACH:-15}
ROUNDS=${ROUNDS:-3}
OUT=${OUT:-benchmarks/out/train.txt}
mkdir -p benchmarks/out "$(dirname "$OUT")"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
: > "$tmp/all.jsonl"
for spec in "lenet5 1,28,28" "resnet18 1,32,32"; do
  set -- $spec
  name=$1 shape=$2
  "$BIN" zoo "$name" --input-shape "$shape" --classes 10 --seed 1 --init torch --out "$tmp/$name.onnx" >/dev/null
  for r in $(seq "$ROUNDS"); do
    "$BIN" bench train --model "$tmp/$name.onnx" --batch 64 --threads 2 --seconds "$SECONDS_EACH" --json | tee -a "$tmp/all.jsonl"
    /usr/bin/python3 benchmarks/train/torch_train.py --model "$tmp/$name.onnx" --batch 64 --threads 2 \
      --optimizer sgd --lr 0.01 --momentum 0.9 --seconds "$SECONDS_EACH" --json | tee -a "$tmp/all.jsonl"
  done
done
/usr/bin/python3 - "$tmp/all.jsonl" <<'PY' | tee -a "$OUT"
import json, statistics, sys, os
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print("# training throughput, batch 64, 2 threads, SGD momentum; load average %s" % os.getloadavg()[0])
for name in ("lenet5", "resnet18"):
    ours = [r for r in rows if r.get("framework") == "idunno" and name in r.get("model", "")]
    theirs = [r for r in rows if r.get("framework") == "pytorch" and name in r.get("model", "")]
    if not ours or not theirs:
        continue
    a = statistics.median(r["samples_per_sec"] for r in ours)
    b = statistics.median(r["samples_per_sec"] for r in theirs)
    frac = statistics.median(r["fraction_of_peak"] for r in ours)
    print("%-9s idunno %8.1f samples/s (%.1f%% of FP32 peak)  pytorch %8.1f samples/s  ratio %.2fx" % (name, a, 100 * frac, b, a / b))
PY
