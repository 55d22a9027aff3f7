#!/usr/bin/env bash
# make bench: runs every benchmark and writes CSV and plots under benchmarks/out/.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p benchmarks/out
./benchmarks/kernel.sh
