#!/usr/bin/env bash
# make bench: runs every benchmark and writes CSV and plots under benchmarks/out/.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p benchmarks/out
./benchmarks/kernel.sh
# kernel against ONNX Runtime 1.20.1 (CPU EP, 2 threads), in interleaved half-second slices, fp32, bf16 and int8 (each model quantized by `idunno quantize`): ort.csv, ort_ratio.png
IDUNNO_KERNEL_LIB=${IDUNNO_KERNEL_LIB:-$PWD/bin/libidunno_kernel.so} go run ./benchmarks/ort --bin bin/idunno --out benchmarks/out --precisions fp32,bf16,int8 --interleave 0.5 | tee benchmarks/out/ort.txt
# fd: detection latency (1 and 3 crashes), lossy long run, simulated scaling to 1,000 nodes
./benchmarks/fd/run.sh
# sdfs: put/get throughput (1 MB, 1 GB) vs cp, node peak RSS, restore time after 3 kills
go run ./benchmarks/sdfs --bin bin/idunno --out benchmarks/out/sdfs.csv | tee benchmarks/out/sdfs.txt
# dataset: preprocessing and data-path throughput
./benchmarks/dataset.sh
# cluster: fair-time convergence after a second job arrives; rate around 1, 3 worker and coordinator crashes
go run ./benchmarks/cluster --bin bin/idunno --out benchmarks/out | tee benchmarks/out/cluster.txt
# sched: fair-time decision (1,000 workers x 100 jobs) and coordinator cost per task (Go
# benchmarks), then one worker's whole path (SDFS, preprocessing, kernel, SDFS) vs bench kernel
go test ./sched -run '^$' -bench 'CoordinatorPerTask' -benchtime 20000x | tee benchmarks/out/sched-go.txt
go test ./sched/dispatch -run '^$' -bench Decision -benchtime 200x | tee benchmarks/out/dispatch-go.txt
IDUNNO_KERNEL_LIB=${IDUNNO_KERNEL_LIB:-$PWD/bin/libidunno_kernel.so} go run ./benchmarks/sched --bin bin/idunno --out benchmarks/out/sched.csv | tee benchmarks/out/sched.txt
# responsive: a 10-node cluster running two jobs at full speed; python3 and job stats
# timed against the idle machine, detection of a killed worker, throughput with and without
# the probes (benchmarks/README.md, responsive)
IDUNNO_KERNEL_LIB=${IDUNNO_KERNEL_LIB:-$PWD/bin/libidunno_kernel.so} go run ./benchmarks/responsive --bin bin/idunno --out benchmarks/out/responsive.csv | tee benchmarks/out/responsive.txt
# http: KServe v2 endpoint with LeNet-5: overhead over a direct kernel call, latency and
# throughput at several offered loads with and without dynamic batching, peak requests/s
IDUNNO_KERNEL_LIB=${IDUNNO_KERNEL_LIB:-$PWD/bin/libidunno_kernel.so} go run ./benchmarks/http --out benchmarks/out/http.csv | tee benchmarks/out/http.txt
IDUNNO_KERNEL_LIB=${IDUNNO_KERNEL_LIB:-$PWD/bin/libidunno_kernel.so} go run ./benchmarks/http --max-batch 4 --out benchmarks/out/http_b4.csv | tee benchmarks/out/http_b4.txt
# train: training throughput against PyTorch (LeNet-5, ResNet-18), then accuracy runs:
# LeNet-5 5 epochs and ResNet-18 (1x32x32) 10 epochs on Fashion-MNIST (benchmarks/train/README.md)
./benchmarks/train/run.sh
F=/usr/share/datasets/fashion-mnist
bin/idunno train local --model zoo:lenet5 --input-shape 1,28,28 --data $F/train-images-idx3-ubyte.gz --labels $F/train-labels-idx1-ubyte.gz \
  --eval-data $F/t10k-images-idx3-ubyte.gz --eval-labels $F/t10k-labels-idx1-ubyte.gz --epochs 5 --batch 64 --lr 0.01 --momentum 0.9 \
  --init default --scale 1/255 --threads 2 --out benchmarks/out/lenet5-fmnist.onnx --json | tee benchmarks/out/train-lenet5.jsonl
bin/idunno train local --model zoo:resnet18 --input-shape 1,32,32 --data $F/train-images-idx3-ubyte.gz --labels $F/train-labels-idx1-ubyte.gz \
  --eval-data $F/t10k-images-idx3-ubyte.gz --eval-labels $F/t10k-labels-idx1-ubyte.gz --epochs 10 --batch 64 --lr 0.05 --momentum 0.9 \
  --weight-decay 5e-4 --schedule cosine --init default --scale 1/255 --resize 32x32 --threads 2 --out benchmarks/out/resnet18-fmnist.onnx --json | tee benchmarks/out/train-resnet18.jsonl
# charts: PNG figures from the CSV files above
go run ./benchmarks/charts --out benchmarks/out
