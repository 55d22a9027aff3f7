#!/usr/bin/env bash
# Failure detector benchmarks (see benchmarks/README.md, fd section). Writes benchmarks/out/fd_*.csv.
# FD_LOSS_DURATION shortens the long lossy run (default 10m).
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p benchmarks/out
BIN=${IDUNNO_BIN:-$PWD/bin/idunno}
go build -o benchmarks/out/fdbench ./benchmarks/fd
# setsid: the driver leads its own session so it can raise its priority like the nodes do.
B="setsid -w benchmarks/out/fdbench"
$B -mode crash -kill 1 -trials 40 -bin "$BIN" -out benchmarks/out/fd_crash1.csv | tee benchmarks/out/fd_crash1.txt
$B -mode crash -kill 3 -trials 30 -bin "$BIN" -out benchmarks/out/fd_crash3.csv | tee benchmarks/out/fd_crash3.txt
$B -mode sim -loss 0 -sizes 10,30,100,300,1000 -trials 5 -out benchmarks/out/fd_sim_scaling.csv | tee benchmarks/out/fd_sim_scaling.txt
$B -mode sim -loss 0.03 -sizes 10,100,1000 -trials 5 -out benchmarks/out/fd_sim_scaling_loss3.csv | tee benchmarks/out/fd_sim_scaling_loss3.txt
$B -mode loss -duration "${FD_LOSS_DURATION:-10m}" -bin "$BIN" -out benchmarks/out/fd_loss.csv | tee benchmarks/out/fd_loss.txt
# A node busy-looping inside its own process (2 loops per CPU, at the node's priority) on top of
# the above; short, because it takes the machine's CPUs for its whole run.
$B -mode loss -busy node7 -duration 2m -bin "$BIN" -out benchmarks/out/fd_loss_busy.csv | tee benchmarks/out/fd_loss_busy.txt
