#!/bin/sh
cd /work/h12r; export IDUNNO_KERNEL_LIB=$PWD/bin/libidunno_kernel.so
while pgrep -f "run_b8.sh|run_more.sh" >/dev/null; do sleep 5; done
go build -o /tmp/h12r_ort ./benchmarks/ort
flock -x /tmp/idunno-cpu.lock sh -c 'echo "# start $(date -u +%FT%TZ) load: $(cut -d" " -f1-3 /proc/loadavg)"; /tmp/h12r_ort --bin bin/idunno_h12r --models shufflenet_v2_x1_0,squeezenet1_0,googlenet,resnet50 --batches 1,8 --precisions fp32,bf16,int8 --rounds 2 --seconds 1.5 --out benchmarks/out/h12r/ort; echo "# end $(date -u +%FT%TZ) load: $(cut -d" " -f1-3 /proc/loadavg)"'
