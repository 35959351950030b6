#!/bin/sh
# Runs each test binary given as an argument and prints one summary line,
# "N passed, M failed, K skipped". Exit code 77 from a test means skipped
# (a GPU test on a machine without a GPU); any other non-zero code is a failure.
pass=0; fail=0; skip=0; failed=""
# CUDA's runtime maps memory where ASan's shadow gap would be.
ASAN_OPTIONS="${ASAN_OPTIONS:-protect_shadow_gap=0:detect_leaks=1}"
export ASAN_OPTIONS
for t in "$@"; do
    name=$(basename "$t")
    start=$(date +%s)
    "$t"
    rc=$?
    secs=$(( $(date +%s) - start ))
    if [ $rc -eq 0 ]; then
        pass=$((pass + 1)); echo "PASS $name (${secs}s)"
    elif [ $rc -eq 77 ]; then
        skip=$((skip + 1)); echo "SKIP $name"
    else
        fail=$((fail + 1)); failed="$failed $name"; echo "FAIL $name (exit $rc)"
    fi
done
[ -n "$failed" ] && echo "failed:$failed"
echo "$pass passed, $fail failed, $skip skipped"
[ $fail -eq 0 ]
