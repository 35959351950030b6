#!/bin/sh
# One GPU-machine session in a single command: build, run the whole test
# suite (GPU tests included), the GPU tests under compute-sanitizer memcheck
# (quick mode), the trainer, and the benchmarks. Logs go to $OUT (or
# ./gpu-logs). Usage: tools/gpu_session.sh [tests|bench|train|all]...
# (default all; also: overhead). MEMCHECK=0 skips memcheck. Objects prebuilt elsewhere can be dropped into
# build/src/cuda first (same flags): make only rebuilds what is older.
set -u
out="${OUT:-gpu-logs}"
mkdir -p "$out"
parts="${*:-all}"
has() { case " $parts " in *" $1 "*|*" all "*) return 0 ;; esac; return 1; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | tee "$out/device.txt"
make -j16 > "$out/build.log" 2>&1 || { echo "build failed"; tail -n 40 "$out/build.log"; exit 1; }
if has tests; then
    make test 2>&1 | tee "$out/test.log" | grep -E "^(PASS|FAIL|SKIP)|passed|failed:|CHECK|worst|launches \(" | head -n 120
    [ "${MEMCHECK:-1}" = 0 ] || for t in build/tests/test_cuda_*; do
        [ -x "$t" ] || continue
        F8_TEST_QUICK=1 timeout 300 compute-sanitizer --tool memcheck --leak-check no "$t" \
            > "$out/memcheck-$(basename "$t").log" 2>&1
        echo "memcheck $(basename "$t"): exit $? $(grep -h 'ERROR SUMMARY' "$out/memcheck-$(basename "$t").log")"
    done
fi
if has train; then
    ./build/f8_train --steps 60 --log "$out/gpu_tiny.csv" --plot "$out/gpu_tiny.svg" 2>&1 | tail -n 8
fi
if has bench; then
    for b in build/bench/bench_*; do
        echo "== $b"
        timeout 300 "$b" > "$out/$(basename "$b").log" 2>&1
        echo "exit $?"; grep -v '^{' "$out/$(basename "$b").log" | tail -n 30
    done
fi
if has overhead; then
    timeout 300 ./build/bench/bench_overhead > "$out/bench_overhead.log" 2>&1
    echo "bench_overhead exit $?"; grep -v '^{' "$out/bench_overhead.log" | tail -n 45
fi
if has gpt; then
    OUT="$out" sh tools/bench_gpt.sh 20
fi
if has converge; then
    OUT="$out" sh tools/converge.sh "${CONVERGE_STEPS:-1000}"
fi
exit 0
