#!/bin/sh
# The FP8 recipes against BF16 on the same data (issue 15): the 50M preset
# for STEPS steps (default 1000) with BF16 and with each recipe, on the
# embedded corpus and on a real text read in place (default
# ../shared/data/tinyshakespeare.txt), final validation losses and their
# difference to BF16; then the 1.3B tokens/s of each (a speed run on an
# llm.c-format shard written here, as tools/bench_gpt.sh does), also with
# FP8 telemetry on (--fp8-report) to measure its overhead. A recipe the
# build refuses (F8_ERR_UNSUPPORTED) is reported as such; rowwise is
# torchao's "rowwise" (E4M3, power-of-two scales, one scale per row),
# rowwise_with_gw_hp the same with the weight gradient in high precision.
# Usage: tools/compare_recipes.sh [STEPS] [TEXT]   (logs in $OUT, default
# compare-logs). Runs on the GPU (f8_train picks CUDA when there is one).
set -u
steps="${1:-1000}"
text="${2:-../shared/data/tinyshakespeare.txt}"
bin="${BIN:-./build/f8_train}"
out="${OUT:-compare-logs}"
speed_steps="${SPEED_STEPS:-20}"
mkdir -p "$out"
runs="bf16 delayed current block rowwise rowwise_with_gw_hp"

# last non-empty val_loss of a log
final_val() {
    awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
        $c["val_loss"] != "" { v = $c["val_loss"] } END { if (v != "") print v; else print "nan" }' "$1"
}

# one run: $1 name, $2 data tag, remaining: data options
train_run() {
    name="$1"; tag="$2"; shift 2
    case "$name" in
        bf16) prec="--fp8 off" ;;
        *) prec="--fp8 on --recipe $name" ;;
    esac
    log="$out/${tag}_${name}.csv"
    rm -f "$log"
    if $bin --model 50M $prec "$@" --steps "$steps" --val-every 100 --val-batches 16 --sample 0 \
        --log "$log" --plot "" --quiet > "$out/${tag}_${name}.txt" 2>&1; then
        final_val "$log"
    else
        echo "failed"
    fi
}

for tag in corpus text; do
    if [ "$tag" = text ] && [ ! -r "$text" ]; then
        echo "no text at $text: skipping the real-text comparison"
        continue
    fi
    echo "== 50M, $steps steps, data: $([ "$tag" = text ] && echo "$text" || echo "embedded corpus")"
    printf '%-8s %12s %10s\n' run val_loss "vs BF16"
    base=""
    for r in $runs; do
        if [ "$tag" = text ]; then v=$(train_run "$r" "$tag" --text "$text"); else v=$(train_run "$r" "$tag"); fi
        [ "$r" = bf16 ] && base="$v"
        case "$v" in
            failed|nan) printf '%-8s %12s %10s   (%s)\n' "$r" "$v" "-" "$(tail -n 1 "$out/${tag}_${r}.txt")" ;;
            *) awk -v r="$r" -v v="$v" -v b="$base" 'BEGIN {
                   d = (b != "" && b != "nan" && b != "failed") ? sprintf("%+.2f%%", 100 * (v - b) / b) : "-"
                   printf "%-8s %12.4f %10s\n", r, v, d }' ;;
        esac
    done
done

echo "== 1.3B speed, $speed_steps steps (the first 5 left out)"
shard="$out/speed_shard.bin"
python3 tools/llmc_shard.py "$shard" 4000000 > /dev/null
printf '%-8s %12s %8s %10s\n' run "tokens/s" MFU "ms/step"
# delayed+tel and current+tel: the same with FP8 telemetry (--fp8-report), for its overhead
for r in $runs delayed+tel current+tel; do
    case "$r" in
        bf16) prec="--fp8 off" ;;
        *+tel) prec="--fp8 on --recipe ${r%+tel} --fp8-report" ;;
        *) prec="--fp8 on --recipe $r" ;;
    esac
    log="$out/speed_${r}.csv"
    rm -f "$log"
    if ! $bin --model 1.3B $prec --data "$shard" --steps "$speed_steps" --val-every 0 --sample 0 \
        --log "$log" --plot "" --quiet > "$out/speed_${r}.txt" 2>&1; then
        printf '%-8s %12s   (%s)\n' "$r" failed "$(tail -n 1 "$out/speed_${r}.txt")"
        continue
    fi
    awk -F, -v r="$r" 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
        $c["step"] > 5 { t += $c["tokens_per_s"]; u += $c["mfu"]; ms += $c["ms_per_step"]; k++ }
        END { if (k) printf "%-8s %12.0f %7.1f%% %10.1f\n", r, t / k, 100 * u / k, ms / k }' "$log"
done
