#!/usr/bin/env bash
# make bench: runs every benchmark and writes CSV and plots under benchmarks/out/.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p benchmarks/out
./benchmarks/kernel.sh
# fd: detection latency (1 and 3 crashes), lossy long run, simulated scaling to 1,000 nodes
./benchmarks/fd/run.sh
# sdfs: put/get throughput (1 MB, 1 GB) vs cp, node peak RSS, restore time after 3 kills
go run ./benchmarks/sdfs --bin bin/idunno --out benchmarks/out/sdfs.csv | tee benchmarks/out/sdfs.txt
# dataset: preprocessing and data-path throughput
./benchmarks/dataset.sh
# cluster: fair-time convergence after a second job arrives; rate around 1, 3 worker and coordinator crashes
go run ./benchmarks/cluster --bin bin/idunno --out benchmarks/out | tee benchmarks/out/cluster.txt
# charts: PNG figures from the CSV files above
go run ./benchmarks/charts --out benchmarks/out
