#!/bin/sh
# device call 1: build, profiles (124M FP8/BF16, 1.3B FP8 one microbatch), cuDNN config sweep, attention + torch tests
o="$OUT"
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
t0=$(date +%s)
make -j16 > $o/build.log 2>&1 || { tail -40 $o/build.log; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
export OUT=$o
for cfg in "124M on" "124M off"; do
  set -- $cfg
  timeout 150 sh tools/profile_gpt.sh $1 $2 2>&1 | head -45
  echo "t $(( $(date +%s) - t0 )) s"
done
EXTRA="--grad-accum 1" timeout 150 sh tools/profile_gpt.sh 1.3B on 2>&1 | head -45
echo "t $(( $(date +%s) - t0 )) s"
for c in 0 1 2; do
  echo "== F8_CUDNN_CONFIG=$c"
  F8_CUDNN_CONFIG=$c timeout 60 ./build/bench/bench_attention 2>&1 | grep -v '^{' | grep -i "cudnn\|engine\|B2\|B4\|B8\|B16" | head -30
done
echo "t $(( $(date +%s) - t0 )) s"
timeout 120 ./build/tests/test_cuda_attention 2>&1 | tail -3
timeout 120 python3 python/tests/test_torch.py 2>&1 | tail -5
echo "t $(( $(date +%s) - t0 )) s"
