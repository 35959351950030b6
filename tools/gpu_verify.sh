#!/bin/sh
# One GPU call after CPU work: link the tests, the trainer and two benches
# against a library prebuilt here (tools/prebuilt.sh pack; carry .prebuilt),
# run every CUDA test, then time the first loss and the steady speed of an
# older f8_train beside this tree's (tools/bench_startup.sh).
# Usage: [STEPS=12] tools/gpu_verify.sh [OLD_F8_TRAIN]
# OLD_F8_TRAIN: e.g. a binary built here from an earlier commit with
# `make CUDA=1 BUILD=b0 b0/f8_train`, stripped, carried in an ignored folder.
set -u
out="${OUT:-gpu-logs}"
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
T="$(ls tests/test_cuda_*.c | sed 's|tests/|build/tests/|;s|\.c$||') build/tests/test_attention_path build/f8_train
   build/bench/bench_modules build/bench/bench_linear"
# shellcheck disable=SC2086 # T is a list of targets
sh tools/prebuilt.sh link $T > "$out/link.log" 2>&1 || { tail -n 30 "$out/link.log"; exit 1; }
OUT="$out/tests" TEST_TIMEOUT=240 sh tools/gpu_tests.sh
F8_REQUIRE_CUDNN=1 ./build/tests/test_attention_path 2>&1 | tail -n 2
STEPS="${STEPS:-12}" OUT="$out/startup" sh tools/bench_startup.sh ${1:-} ./build/f8_train
