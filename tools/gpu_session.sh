#!/bin/sh
# One GPU-machine session in a single command: build, run the whole test suite
# (GPU tests included), the GPU tests under compute-sanitizer memcheck, and the
# benchmarks. Logs go to $OUT (or ./gpu-logs). Usage: tools/gpu_session.sh [quick]
set -u
out="${OUT:-gpu-logs}"
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | tee "$out/device.txt"
make -j16 2>&1 | tail -n 30 > "$out/build.log"; rc=$?
tail -n 5 "$out/build.log"
[ -x build/tests/test_linear ] || { echo "build failed"; cat "$out/build.log"; exit 1; }
make test 2>&1 | tee "$out/test.log" | grep -E "^(PASS|FAIL|SKIP)|passed|failed:|CHECK" | head -n 80
for t in build/tests/test_cuda_*; do
    [ -x "$t" ] || continue
    echo "== compute-sanitizer memcheck $t"
    timeout 300 compute-sanitizer --tool memcheck --leak-check no "$t" > "$out/memcheck-$(basename "$t").log" 2>&1
    echo "exit $?"; tail -n 3 "$out/memcheck-$(basename "$t").log"
done
[ "${1:-}" = quick ] && exit 0
make bench 2>&1 | tee "$out/bench.log" | grep -v '^{' | tail -n 60
./build/f8_train --backend cuda 2>&1 | tail -n 4
exit 0
