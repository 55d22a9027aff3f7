#!/bin/sh
cd /work/h12r; export IDUNNO_KERNEL_LIB=$PWD/bin/libidunno_kernel.so
O=benchmarks/out/h12r
while pgrep -f "run_b8.sh" >/dev/null; do sleep 5; done
flock -x /tmp/idunno-cpu.lock sh -c "$O/ab.sh $O/b8_recheck.txt 8 3 2 int8 resnet50 inception_v3 && $O/ab.sh $O/b8_recheck.txt 8 3 2 bf16 resnet18 && $O/ab.sh $O/b4.txt 4 2 2 bf16,int8 resnet50 mobilenet_v2 shufflenet_v2_x1_0 && $O/ab.sh $O/b2.txt 2 2 2 bf16,int8 mobilenet_v2"
