#!/usr/bin/env bash
# benchmarks/int8/run.sh: int8 (QDQ) against fp32 on torchvision's ResNet-50 exported by
# PyTorch, in the same run: alternating rounds of `idunno bench kernel` on the float model and
# on the model `idunno quantize` writes from it, plus the VNNI and AMX int8 and FP32 FMA peaks.
# Writes benchmarks/out/int8_qdq.csv. Needs `make` first.
#   ROUNDS (default 3)  SECONDS_EACH (default 10)  THREADS (default 2)  BATCH (default 8)
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${IDUNNO_BIN:-$PWD/bin/idunno}
export IDUNNO_KERNEL_LIB=${IDUNNO_KERNEL_LIB:-$PWD/bin/libidunno_kernel.so}
ROUNDS=${ROUNDS:-3}; SECS=${SECONDS_EACH:-10}; THREADS=${THREADS:-2}; BATCH=${BATCH:-8}
MODELS=${MODELS_DIR:-${TMPDIR:-/tmp}/idunno-bench-models}
OUT=benchmarks/out
mkdir -p "$MODELS" "$OUT"
f32="$MODELS/tv_resnet50.onnx"; i8="$MODELS/tv_resnet50.int8.onnx"; calib="$MODELS/calib224.npy"
if [ ! -f "$f32" ] || [ ! -f "$calib" ]; then
  # random weights with randomised BatchNormalization statistics (folded by the exporter);
  # calibration on 16 random images in [0, 1): the figures here are speed, not accuracy
  /usr/bin/python3 - "$f32" "$calib" <<'PY'
import sys, numpy as np, torch, torchvision
torch.manual_seed(0)
m = torchvision.models.resnet50().eval()
for mod in m.modules():
    if isinstance(mod, torch.nn.BatchNorm2d):
        mod.running_mean.uniform_(-0.1, 0.1); mod.running_var.uniform_(0.5, 1.5)
torch.onnx.export(m, torch.randn(1, 3, 224, 224), sys.argv[1], opset_version=13, input_names=["input"],
                  output_names=["output"], dynamic_axes={"input": {0: "N"}, "output": {0: "N"}}, do_constant_folding=True)
np.save(sys.argv[2], np.random.default_rng(0).random((16, 3, 224, 224), dtype=np.float32))
PY
fi
[ -f "$i8" ] || "$BIN" quantize --model "$f32" --calibration "$calib" --samples 16 --batch 8 --out "$i8" --threads "$THREADS"
csv="$OUT/int8_qdq.csv"
echo "round,precision,batch,threads,images_per_sec,p50_ms,gflops_per_cpu_second,load_avg" > "$csv"
for r in $(seq 1 "$ROUNDS"); do
  for p in fp32 int8; do
    m=$f32; [ $p = int8 ] && m=$i8
    json=$("$BIN" bench kernel --model "$m" --batch "$BATCH" --threads "$THREADS" --seconds "$SECS" --json)
    line=$(printf '%s' "$json" | /usr/bin/python3 -c 'import json,sys; r=json.load(sys.stdin); print(",".join(str(r[k]) for k in ["batch","threads","images_per_sec","p50_ms","gflops_per_cpu_second"]))')
    echo "$r,$p,$line,$(cut -d' ' -f1 /proc/loadavg)" | tee -a "$csv"
  done
done
# peaks: VNNI and AMX int8 and FP32 FMA, per CPU second (meaningful under load) and wall (2 threads)
go test ./kernel -run 'TestPeakInt8' -v -count=1 | grep 'int8.*peak' | tee "$OUT/int8_qdq_peak.txt"
/usr/bin/python3 - "$csv" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
for key in ["images_per_sec", "gflops_per_cpu_second"]:
    f = statistics.median(float(r[key]) for r in rows if r["precision"] == "fp32")
    i = statistics.median(float(r[key]) for r in rows if r["precision"] == "int8")
    print(f"median {key}: fp32 {f:.2f}, int8 {i:.2f}, int8/fp32 {i/f:.2f}x")
PY
echo "wrote $csv"
