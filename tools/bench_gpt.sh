#!/bin/sh
# GPT trainer benchmarks on the GPU: tokens/s and MFU of f8_train for the
# GPT-2 124M and the 1.3B configurations, FP8 and BF16, with the GPT-2
# vocabulary. The data is an llm.c-format shard written here (the embedded
# corpus' bytes as token ids), so no download is needed; only speed is
# measured. Usage: tools/bench_gpt.sh [STEPS] [ACCUM...] (default 20 steps;
# the first 5, which include the graph capture, are left out of the mean).
# ACCUM: microbatches per optimizer step, one run per value (default: the
# presets' own, 1 at 124M, 8 at 1.3B). With more, the optimizer step and the FP8 weight casts
# (first microbatch only) are spread over more tokens, as in real training,
# where a step holds 0.5M tokens (GPT-2) and not one microbatch. peak GiB: the
# high point of f8's own device allocations (f8_train's peak_mem_mib).
# tools/bench_peers.sh puts these runs beside PyTorch's (BF16 and torchao FP8).
set -u
steps="${1:-20}"
[ $# -gt 0 ] && shift
accums="${*:-preset}"
bin=./build/f8_train
out="${OUT:-bench-logs}"
mkdir -p "$out"
shard="$out/bench_shard.bin"
python3 tools/llmc_shard.py "$shard" 4000000
printf '%-6s %-5s %6s %12s %8s %10s %9s\n' model prec accum "tokens/s" MFU "ms/step" "peak GiB"
for accum in $accums; do
for model in 124M 1.3B; do
    for fp8 in on off; do
        log="$out/bench_${model}_fp8${fp8}_a${accum}.csv"
        rm -f "$log"
        txt="$out/bench_${model}_fp8${fp8}_a${accum}.txt"
        acc_opt=""
        [ "$accum" = preset ] || acc_opt="--grad-accum $accum"
        if ! $bin --model "$model" --fp8 "$fp8" $acc_opt --data "$shard" --steps "$steps" --val-every 0 \
            --sample 0 --log "$log" --plot "" --quiet > "$txt" 2>&1; then
            echo "$model fp8 $fp8 accum $accum: FAILED"; tail -n 5 "$txt"; continue
        fi
        # mean of tokens/s, mfu and ms/step over the steps after the fifth; f8's peak memory (its allocations)
        awk -F, -v m="$model" -v p="$fp8" -v a="$accum" 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
            $c["step"] > 5 { t += $c["tokens_per_s"]; u += $c["mfu"]; ms += $c["ms_per_step"]; k++; g = $c["peak_mem_mib"] / 1024 }
            END { if (k) printf "%-6s %-5s %6s %12.0f %7.1f%% %10.1f %9.2f\n", m, (p == "on" ? "FP8" : "BF16"), a, t / k, 100 * u / k, ms / k, g }' "$log"
    done
done
done
