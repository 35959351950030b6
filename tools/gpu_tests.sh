#!/bin/sh
# Every GPU test program at once: on a GPU machine the CUDA tests are bound
# by their CPU oracles, not the GPU, so running them side by side takes
# about as long as the slowest one (~40 s on an H200 with 16 cores, against
# minutes one after another). Prints each program's summary line and, for a
# failure, its first failing lines; exits 1 if any failed.
# Usage: tools/gpu_tests.sh [BUILD] (default build); logs go to $OUT (or
# ./gpu-test-logs). Build the tests first (make, or tools/prebuilt.sh link).
set -u
b="${1:-build}"
out="${OUT:-gpu-test-logs}"
mkdir -p "$out"
# executables only: -MMD leaves test_cuda_*.d and .o beside them
tests=$(for f in "$b"/tests/test_cuda_*; do [ -f "$f" ] && [ -x "$f" ] && echo "$f"; done)
[ -n "$tests" ] || { echo "gpu_tests.sh: no $b/tests/test_cuda_* (build them first)" >&2; exit 2; }
for t in $tests; do
    (timeout "${TEST_TIMEOUT:-300}" "$t" > "$out/$(basename "$t").log" 2>&1; echo "exit $?" >> "$out/$(basename "$t").log") &
done
wait
bad=0
for t in $tests; do
    log="$out/$(basename "$t").log"
    rc=$(tail -n 1 "$log" | sed 's/exit //')
    case "$rc" in
        0) echo "PASS $(grep -E "checks, [0-9]+ failed" "$log" | tail -n 1)" ;;
        77) echo "SKIP $(head -n 1 "$log")" ;;
        *) echo "FAIL $(basename "$t") (exit $rc)"; grep -iE "fail|error|differ|mismatch" "$log" | head -n 6; bad=1 ;;
    esac
done
exit $bad
