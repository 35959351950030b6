#!/bin/sh
# How long a user waits for the first loss: the wall clock of
# `f8_train --steps 1` (process start, device, data, model, optimizer, the
# first step with its graph capture, and exit), for the 124M and 1.3B
# presets in FP8, with f8_train's own startup breakdown and the first
# step's time from its log. Usage: [STEPS=N] tools/bench_startup.sh [BIN...]
# (default ./build/f8_train; MODELS="..." other presets; give several to compare builds in one call,
# e.g. OLD NEW OLD NEW: each run's log is kept apart, so a binary given twice is timed twice).
# F8_FLAGS replaces the run's precision options (default "--fp8 on"; e.g. "--fp8 on --recipe block").
# With STEPS > 1 the same runs also give the steady speed (mean tokens/s of
# the steps after the fifth) and "first loss" is the wall clock less the
# later steps' times (the exit after the last step is not subtracted).
# Logs go to $OUT (or ./bench-logs).
set -u
out="${OUT:-bench-logs}"
mkdir -p "$out"
shard="$out/bench_shard.bin"
[ -f "$shard" ] || python3 tools/llmc_shard.py "$shard" 4000000
bins="${*:-./build/f8_train}"
steps="${STEPS:-1}"
printf '%-24s %-5s %11s %9s %10s  %s\n' binary model "first loss" "step 1 s" "tokens/s" "startup (f8_train's own)"
run=0
for model in ${MODELS:-124M 1.3B}; do
    for bin in $bins; do
        run=$((run + 1))
        log="$out/startup_${model}_$(basename "$(dirname "$bin")")_$(basename "$bin")_$run.csv"
        txt="${log%.csv}.txt"
        rm -f "$log"
        t0=$(date +%s.%N)
        # shellcheck disable=SC2086 # F8_FLAGS is a list of options
        "$bin" --model "$model" ${F8_FLAGS:---fp8 on} --data "$shard" --steps "$steps" --val-every 0 --sample 0 --log "$log" \
            --plot "" > "$txt" 2>&1
        rc=$?
        t1=$(date +%s.%N)
        # exit 3 is "too few steps to tell whether the loss fell": expected for one step
        [ "$rc" = 0 ] || [ "$rc" = 3 ] || { echo "$bin $model: exit $rc"; tail -n 5 "$txt"; continue; }
        # step 1's seconds, the later steps' seconds, the mean tokens/s after step 5
        set -- $(awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
            $c["step"] == 1 { s1 = $c["ms_per_step"] / 1000 } $c["step"] > 1 { rest += $c["ms_per_step"] / 1000 }
            $c["step"] > 5 { t += $c["tokens_per_s"]; k++ }
            END { printf "%.2f %.3f %s", s1, rest, k ? sprintf("%.0f", t / k) : "-" }' "$log")
        first=$(awk -v a="$t0" -v b="$t1" -v r="$2" 'BEGIN { printf "%.2f", b - a - r }')
        printf '%-24s %-5s %11s %9s %10s  %s\n' "$bin" "$model" "$first" "$1" "$3" \
            "$(grep '^startup' "$txt" | sed 's/^startup: //')"
    done
done
