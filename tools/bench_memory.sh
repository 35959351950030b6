#!/bin/sh
# The memory options on one GPU (issue 32), in one call: llama-8B trained in
# FP8 with FP8 AdamW moments and per-block recompute, then the 1.3B GPT as is,
# with --recompute-blocks on (its losses must be bitwise the run's without)
# and with FP8 moments at a smaller microbatch; the 124M GPT without and with
# --recompute-blocks (bitwise the same losses, the recompute's cost). Each run prints its memory
# plan; the table gives tokens/s, MFU and peak memory over the timed steps.
#
# Usage: tools/bench_memory.sh [WARMUP]   (steps left out of the timing, default 3)
#   F8_TRAIN=PATH  a prebuilt f8_train (default ./build/f8_train, which must exist)
#   RUNS="l8b g13m g13 g13rb g124 g124rb"  which runs, in this order (default all)
#   L8B_STEPS (default 50), G13_STEPS (default 8) steps per run (124M: G13_STEPS);
#   L8B_LIMIT (default 150), G_LIMIT (default 60) seconds per run
# Logs and results.txt go to $OUT (default ./bench-logs). Budget on an H200:
# about 2 minutes (8B: model creation, 50 steps of 8,192 tokens; 1.3B: three
# starts of about 15 s and 8 steps of 65,536 tokens).
set -u
warm="${1:-3}"
out="${OUT:-bench-logs}"
bin="${F8_TRAIN:-./build/f8_train}"
runs="${RUNS:-l8b g13m g13 g13rb g124 g124rb}"
gl="${G_LIMIT:-60}"
mkdir -p "$out"
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -n 1
shard=/tmp/f8_bench_memory_shard.bin
[ -f "$shard" ] || python3 tools/llmc_shard.py "$shard" 2000000
res="$out/results.txt"
: > "$res"
for r in $runs; do
    case "$r" in
        l8b) lim="${L8B_LIMIT:-150}" steps="${L8B_STEPS:-50}"
             flags="--model llama-8B --adam-moments fp8 --recompute-blocks on --batch 4 --grad-accum 1" ;;
        g13) lim=$gl steps="${G13_STEPS:-8}" flags="--model 1.3B" ;;
        g13rb) lim=$gl steps="${G13_STEPS:-8}" flags="--model 1.3B --recompute-blocks on" ;;
        g13m) lim=$gl steps="${G13_STEPS:-8}" flags="--model 1.3B --adam-moments fp8 --batch 2 --grad-accum 32" ;;
        g124) lim=$gl steps="${G13_STEPS:-8}" flags="--model 124M" ;;
        g124rb) lim=$gl steps="${G13_STEPS:-8}" flags="--model 124M --recompute-blocks on" ;;
        *) echo "unknown run $r"; continue ;;
    esac
    # shellcheck disable=SC2086 # flags is a list of options
    timeout "$lim" "$bin" $flags --data "$shard" --steps "$steps" --val-every 0 --sample 0 --log "$out/$r.csv" \
        --plot "" > "$out/$r.txt" 2>&1
    rc=$?
    echo "$r (rc $rc, $(( $(date +%s) - t0 )) s): $flags" | tee -a "$res"
    grep -m 1 "memory plan" "$out/$r.txt" | tee -a "$res"
    [ -f "$out/$r.csv" ] || { tail -n 3 "$out/$r.txt" | tee -a "$res"; continue; }
    awk -F, -v w="$warm" 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
        $c["step"] == 1 { tps = $c["tokens"] }
        $c["step"] > w { ms += $c["ms_per_step"]; u += $c["mfu"]; k++ }
        { peak = $c["peak_mem_mib"]; last = $c["train_loss"]; n = $c["step"] }
        END { if (k) printf "  %d steps, timed %d: %.1f tokens/s, MFU %.4f, peak %.2f GiB, loss at step %d %s\n",
                  n, k, tps / (ms / k / 1000), u / k, peak / 1024, n, last }' "$out/$r.csv" | tee -a "$res"
done
# --recompute-blocks must not change a bit: every step's loss and gradient norm (%.9g) as without
for m in g13 g124; do
    [ -f "$out/$m.csv" ] && [ -f "$out/${m}rb.csv" ] || continue
    cut -d, -f1,3,6 "$out/$m.csv" > "$out/$m.cut"
    cut -d, -f1,3,6 "$out/${m}rb.csv" > "$out/${m}rb.cut"
    [ "$(wc -l < "$out/$m.cut")" -gt 1 ] || { echo "$m: no steps logged, nothing to compare" | tee -a "$res"; continue; }
    if cmp -s "$out/$m.cut" "$out/${m}rb.cut"; then
        echo "$m --recompute-blocks on: losses and gradient norms bitwise those of off" | tee -a "$res"
    else
        echo "$m --recompute-blocks on: DIFFERS from off" | tee -a "$res"
        paste -d' ' "$out/$m.cut" "$out/${m}rb.cut" | tee -a "$res"
    fi
done
