#!/bin/sh
cd /work/h12r; export IDUNNO_KERNEL_LIB=$PWD/bin/libidunno_kernel.so
O=benchmarks/out/h12r
flock -x /tmp/idunno-cpu.lock $O/ab.sh $O/b8_c1.txt 8 2 2 bf16,int8 resnet50 resnet18 resnext50_32x4d mobilenet_v2 mobilenet_v3_large
flock -x /tmp/idunno-cpu.lock $O/ab.sh $O/b8_c2.txt 8 2 2 bf16,int8 mnasnet1_0 shufflenet_v2_x1_0 squeezenet1_0 densenet121 googlenet
flock -x /tmp/idunno-cpu.lock $O/ab.sh $O/b8_c3.txt 8 2 2 bf16,int8 inception_v3 efficientnet_b0 efficientnet_v2_s regnet_y_400mf convnext_tiny
flock -x /tmp/idunno-cpu.lock $O/ab.sh $O/b8_c4.txt 8 2 2 bf16,int8 wide_resnet50_2 vit_b_16 swin_t swin_v2_t transformer_encoder
