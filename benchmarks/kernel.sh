#!/usr/bin/env bash
# benchmarks/kernel.sh: kernel throughput per model and batch size (idunno bench kernel) and
# the Go→C dispatch overhead for LeNet-5 batch 1. Writes benchmarks/out/kernel.csv and
# benchmarks/out/kernel_dispatch.txt. Needs `make` first (bin/idunno, bin/libidunno_kernel.so).
#   SECONDS_PER_RUN (default 10)   how long each configuration runs
#   THREADS (default 2)            kernel threads
#   CONFIGS                        "model:batch ..." (default below)
#   PRECISIONS (default "fp32 bf16") kernel precisions (bf16 is skipped on CPUs without it)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${IDUNNO_BIN:-$PWD/bin/idunno}
export IDUNNO_KERNEL_LIB=${IDUNNO_KERNEL_LIB:-$PWD/bin/libidunno_kernel.so}
SECS=${SECONDS_PER_RUN:-10}
THREADS=${THREADS:-2}
CONFIGS=${CONFIGS:-"lenet5:1 lenet5:64 resnet18:1 resnet18:8 resnet50:1 resnet50:8 mobilenet_v2:1 squeezenet:1 alexnet:1 vgg16:1 inception_v3:1"}
OUT=benchmarks/out
MODELS=${MODELS_DIR:-${TMPDIR:-/tmp}/idunno-bench-models}  # zoo files are large: kept out of the tree
mkdir -p "$OUT" "$MODELS"
csv="$OUT/kernel.csv"
PRECISIONS=${PRECISIONS:-"fp32 bf16"}
echo "model,precision,batch,threads,images_per_sec,p50_ms,p99_ms,gflop_per_image,peak_gflops,fraction_of_peak,gflops_per_cpu_second,peak_gflops_per_cpu_second,fraction_of_peak_cpu,fraction_of_peak_p50,load_avg" > "$csv"
for cfg in $CONFIGS; do
  model=${cfg%%:*}; batch=${cfg##*:}
  f="$MODELS/$model.onnx"
  [ -f "$f" ] || "$BIN" zoo "$model" --out "$f" >/dev/null
  for prec in $PRECISIONS; do
    json=$("$BIN" bench kernel --model "$f" --batch "$batch" --threads "$THREADS" --seconds "$SECS" --precision "$prec" --json) || {
      echo "$model $prec: skipped" >&2; continue; }
    line=$(printf '%s' "$json" | /usr/bin/python3 -c 'import json,sys; r=json.load(sys.stdin); print(",".join(str(r[k]) for k in ["batch","threads","images_per_sec","p50_ms","p99_ms","gflop_per_image","peak_gflops","fraction_of_peak","gflops_per_cpu_second","peak_gflops_per_cpu_second","fraction_of_peak_cpu","fraction_of_peak_p50"]))')
    load=$(cut -d' ' -f1 /proc/loadavg)
    echo "$model,$prec,$line,$load" | tee -a "$csv"
  done
done
echo "wrote $csv"
go test ./kernel -run '^$' -bench 'DispatchLeNet5|NoopCall' -benchtime 20000x | tee "$OUT/kernel_dispatch.txt"
