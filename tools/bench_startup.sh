#!/bin/sh
# How long a user waits for the first loss: the wall clock of
# `f8_train --steps 1` (process start, device, data, model, optimizer, the
# first step with its graph capture, and exit), for the 124M and 1.3B
# presets in FP8, with f8_train's own startup breakdown and the first
# step's time from its log. Usage: tools/bench_startup.sh [BIN...]
# (default ./build/f8_train; give several to compare builds in one call).
# Logs go to $OUT (or ./bench-logs).
set -u
out="${OUT:-bench-logs}"
mkdir -p "$out"
shard="$out/bench_shard.bin"
[ -f "$shard" ] || python3 tools/llmc_shard.py "$shard" 4000000
bins="${*:-./build/f8_train}"
printf '%-28s %-6s %9s %10s  %s\n' binary model "wall s" "step 1 s" "startup (f8_train's own)"
for model in 124M 1.3B; do
    for bin in $bins; do
        log="$out/startup_${model}_$(basename "$(dirname "$bin")")_$(basename "$bin").csv"
        txt="${log%.csv}.txt"
        rm -f "$log"
        t0=$(date +%s.%N)
        "$bin" --model "$model" --fp8 on --data "$shard" --steps 1 --val-every 0 --sample 0 --log "$log" \
            --plot "" > "$txt" 2>&1
        rc=$?
        t1=$(date +%s.%N)
        # exit 3 is "too few steps to tell whether the loss fell": expected for one step
        [ "$rc" = 0 ] || [ "$rc" = 3 ] || { echo "$bin $model: exit $rc"; tail -n 5 "$txt"; continue; }
        step1=$(awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next } { printf "%.2f", $c["ms_per_step"] / 1000 }' "$log")
        printf '%-28s %-6s %9s %10s  %s\n' "$bin" "$model" "$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')" "$step1" \
            "$(grep '^startup' "$txt" | sed 's/^startup: //')"
    done
done
