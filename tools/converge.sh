#!/bin/sh
# FP8 against BF16 on the same data: the 50M preset trained for STEPS steps
# (default 1000) on the embedded corpus, once with FP8 and once without, then
# both loss curves overlaid in one SVG. Prints the final validation losses and
# their relative difference. Usage: tools/converge.sh [STEPS]
set -u
steps="${1:-1000}"
out="${OUT:-converge-logs}"
mkdir -p "$out"
for fp8 in on off; do
    ./build/f8_train --model 50M --fp8 "$fp8" --steps "$steps" --val-every 100 --val-batches 16 --sample 200 \
        --log "$out/converge_fp8${fp8}.csv" --plot "" > "$out/converge_fp8${fp8}.txt" 2>&1
    echo "fp8 $fp8: exit $?"; tail -n 6 "$out/converge_fp8${fp8}.txt"
done
cp "$out/converge_fp8on.csv" "$out/FP8.csv"
cp "$out/converge_fp8off.csv" "$out/BF16.csv"
./build/f8_train plot "$out/fp8_vs_bf16.svg" "$out/FP8.csv" "$out/BF16.csv"
awk -F, 'FNR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
    $c["val_loss"] != "" { last[FILENAME] = $c["val_loss"] }
    END { a = last[ARGV[1]]; b = last[ARGV[2]];
          printf "final val loss: FP8 %.4f, BF16 %.4f, difference %.2f%%\n", a, b, 100 * (a - b) / b }' \
    "$out/FP8.csv" "$out/BF16.csv"
