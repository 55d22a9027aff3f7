#!/usr/bin/env bash
# make bench: runs every benchmark and writes CSV and plots under benchmarks/out/.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p benchmarks/out
./benchmarks/kernel.sh
# sdfs: put/get throughput (1 MB, 1 GB) vs cp, node peak RSS, restore time after 3 kills
go run ./benchmarks/sdfs --bin bin/idunno --out benchmarks/out/sdfs.csv | tee benchmarks/out/sdfs.txt
