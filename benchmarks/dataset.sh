#!/usr/bin/env bash
# Data-path benchmarks (sched/dataset): preprocessing throughput and the worker's path from
# dataset bytes to a batch tensor, on Debian's Fashion-MNIST. Writes benchmarks/out/dataset.txt
# (go test output) and benchmarks/out/dataset.csv. cpu_* columns count the process's CPU time,
# so they hold on a busy machine where wall-clock figures do not.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p benchmarks/out
go test ./sched/dataset -run '^$' -bench . -benchtime "${BENCHTIME:-2s}" -count "${COUNT:-3}" | tee benchmarks/out/dataset.txt
{
  echo "benchmark,ns_per_op,images_per_s,cpu_ns_per_op,cpu_images_per_s,mb_per_s"
  awk '/^Benchmark/ {
    ns = ""; img = ""; mb = ""; cns = ""; cimg = "";
    for (i = 3; i < NF; i++) {
      if ($(i+1) == "ns/op") ns = $i;
      if ($(i+1) == "images/s") img = $i;
      if ($(i+1) == "MB/s") mb = $i;
      if ($(i+1) == "cpu-ns/op") cns = $i;
      if ($(i+1) == "cpu-images/s") cimg = $i;
    }
    sub(/-[0-9]+$/, "", $1); print $1 "," ns "," img "," cns "," cimg "," mb }' benchmarks/out/dataset.txt
} > benchmarks/out/dataset.csv
echo "wrote benchmarks/out/dataset.csv"
