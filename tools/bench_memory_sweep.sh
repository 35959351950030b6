#!/bin/sh
# 1.3B FP8 over --recompute-blocks N x --adam-moments x microbatch x the free savings (issue 32):
# where between the preset's speed and the least memory a run meets the
# target (peak <= 0.8x torchao's, tokens/s >= 0.95x the preset's). The
# preset runs first: every run's tokens/s is relative to it. Each run prints
# its memory plan (with the activations of a block kept and recomputed, to
# pick N between the grid's points); runs of the same moments and microbatch
# must have bitwise the same losses and gradient norms whatever N.
#
# Usage: tools/bench_memory_sweep.sh [WARMUP]   (steps left out of the timing, default 3)
#   F8_TRAIN=PATH   a prebuilt f8_train (default ./build/f8_train, which must exist)
#   GRID="N:MOMENTS:HALF[:FLAGS] ..."  the runs after the preset; HALF 1 = half the preset's microbatch
#                   with twice the microbatches (the same tokens a step); FLAGS, joined by +: norm
#                   (--recompute-norm on), act (--recompute-act on), proj (--recompute-proj-input on),
#                   wt (--weight-transpose-per-call on): the savings that change no bits (the losses of
#                   a run with them are compared with the first run of its moments and microbatch: they
#                   must be equal); hc (--head-chunk 2048: the LM head and its loss in passes of 2048
#                   tokens) sums the head's weight gradient in another order, so its losses differ.
#                   GRID=full: N in 0 6 12 18 24 x fp32, fp8 x preset, half (20 runs, about 9 minutes on
#                   an H200: two calls, GRID given in halves). Default: the points near the target by the
#                   memory plan (tools/memory_plan.sh works it out without a GPU; the plan of each is
#                   in the README's memory section, "1.3B within 0.8x"). FP8 moments, then: half the
#                   microbatch alone (15.45 GiB: over, but its cost is the price of the rest); half
#                   with wt (14.34 GiB), wt+act (13.59), wt+act+proj (13.41), all four (13.04): each
#                   under 14.71; the preset microbatch with all four (17.52: the savings' own cost)
#                   and with N 12 as well (14.42: under, at 11 blocks' forward again).
#   STEPS (default 12) steps a run, LIMIT (default 60) seconds a run (cut off: timed over the steps logged)
#   TORCHAO_GIB (default 18.39: torchao's 1.3B FP8 peak, bench/RESULTS.md) for the 0.8x line
# Budget on an H200: 9 runs of about 25 s (a start of about 15 s, 12 steps of 65,536 tokens), so
# about 4 minutes. Logs and results.txt go to $OUT (default ./bench-logs).
# Beside torchao on the same card: OUT=$OUT/sweep sh tools/bench_memory_sweep.sh, then in the same
# session OUT=$OUT/peers MODELS=1.3B PEER_MODES=fp8 F8_TRAIN=./build/f8_train sh tools/bench_peers.sh
# (its torchao FP8 row's peak is the 0.8x line's base; TORCHAO_GIB reruns the verdicts against it).
set -u
warm="${1:-3}"
out="${OUT:-bench-logs}"
bin="${F8_TRAIN:-./build/f8_train}"
steps="${STEPS:-12}"
lim="${LIMIT:-60}"
torchao="${TORCHAO_GIB:-18.39}"
batch=8 accum=8 # the 1.3B preset's (train/options.c); half: 4 x 16
grid="${GRID:-0:fp8:0 0:fp8:1 0:fp8:1:wt 0:fp8:1:wt+act 0:fp8:1:wt+act+proj 0:fp8:1:wt+act+norm+proj 0:fp8:0:wt+act+norm+proj 12:fp8:0:wt+act+norm+proj}"
if [ "$grid" = full ]; then
    grid=""
    for h in 0 1; do for mo in fp32 fp8; do for n in 0 6 12 18 24; do grid="$grid $n:$mo:$h"; done; done; done
fi
mkdir -p "$out"
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -n 1
shard=/tmp/f8_bench_memory_shard.bin # tools/bench_memory.sh's data
[ -f "$shard" ] || python3 tools/llmc_shard.py "$shard" 2000000
res="$out/results.txt"
rm -f "$out"/ref_*.cut
printf "%-26s %-3s %-5s %-7s %10s %7s %9s %9s  %s\n" run N moments batch tokens/s vs-base peak-GiB plan-GiB target \
    | tee "$res"
base_tps=""
for spec in base $grid; do
    if [ "$spec" = base ]; then
        n=0 mo=fp32 h=0 extra="" name=base
    else
        n="${spec%%:*}" rest="${spec#*:}"
        mo="${rest%%:*}" rest="${rest#*:}"
        h="${rest%%:*}" extra="${rest#"$h"}" extra="${extra#:}"
        name="n${n}_${mo}_h${h}${extra:+_$(echo "$extra" | tr + _)}"
    fi
    b=$batch a=$accum
    [ "$h" = 1 ] && b=$((batch / 2)) a=$((accum * 2))
    flags="--model 1.3B --recompute-blocks $n --adam-moments $mo --batch $b --grad-accum $a"
    for f in $(echo "$extra" | tr + ' '); do
        case $f in
        norm) flags="$flags --recompute-norm on" ;;
        act) flags="$flags --recompute-act on" ;;
        proj) flags="$flags --recompute-proj-input on" ;;
        wt) flags="$flags --weight-transpose-per-call on" ;;
        hc) flags="$flags --head-chunk 2048" ;;
        *) echo "bench_memory_sweep.sh: unknown flag '$f' in '$spec' (norm, act, proj, wt, hc)" >&2; exit 2 ;;
        esac
    done
    # shellcheck disable=SC2086 # flags is a list of options
    timeout "$lim" "$bin" $flags --data "$shard" --steps "$steps" --val-every 0 --sample 0 --log "$out/$name.csv" \
        --plot "" > "$out/$name.txt" 2>&1
    rc=$?
    plan=$(grep -m 1 "memory plan" "$out/$name.txt")
    echo "$name (rc $rc, $(( $(date +%s) - t0 )) s): $flags" >> "$res"
    echo "  $plan" >> "$res"
    planned=$(echo "$plan" | sed -n 's/.*: \([0-9.]*\) \([GM]\)iB; activations.*/\1 \2/p' |
        awk '{ printf "%.2f", $2 == "M" ? $1 / 1024 : $1 }')
    # tokens/s over the timed steps (tokens a step over their mean time), and the allocation peak
    line=$(awk -F, -v w="$warm" 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
        $c["step"] == 1 { tok = $c["tokens"] } # cumulative: step 1 holds one step of them
        { peak = $c["peak_mem_mib"] }
        $c["step"] > w { ms += $c["ms_per_step"]; k++ }
        END { if (k) printf "%.1f %.2f", tok / (ms / k / 1000), peak / 1024 }' "$out/$name.csv" 2>/dev/null)
    if [ -z "$line" ]; then
        printf "%-26s %-3s %-5s %-7s failed (rc %s): %s\n" "$name" "$n" "$mo" "${b}x$a" "$rc" \
            "$(tail -n 1 "$out/$name.txt")" | tee -a "$res"
        continue
    fi
    tps="${line% *}" peak="${line#* }"
    [ "$name" = base ] && base_tps=$tps
    # a run cut off by LIMIT (rc 124) is timed over the steps it logged
    echo "$tps ${base_tps:-0} $peak $torchao" | awk '{ rel = $2 > 0 ? $1 / $2 : -1; mem = $3 <= 0.8 * $4;
        fast = rel >= 0.95; printf "%s %s\n", rel < 0 ? "?" : sprintf("%.3f", rel),
        mem && fast ? "MEETS" : mem ? "memory-only" : fast ? "speed-only" : "neither" }' > "$out/$name.rel"
    read -r rel verdict < "$out/$name.rel"
    printf "%-26s %-3s %-5s %-7s %10s %7s %9s %9s  %s\n" "$name" "$n" "$mo" "${b}x$a" "$tps" "$rel" "$peak" \
        "${planned:-?}" "$verdict" | tee -a "$res"
    # bitwise across N: step, loss and gradient norm as the first run of these moments and microbatch
    cut -d, -f1,3,6 "$out/$name.csv" > "$out/$name.cut"
    ref="$out/ref_${mo}_h$h.cut"
    if [ ! -f "$ref" ]; then
        cp "$out/$name.cut" "$ref"
    elif cmp -s "$ref" "$out/$name.cut"; then
        echo "  losses and gradient norms bitwise those of the first $mo, half $h run" | tee -a "$res"
    else
        echo "  losses DIFFER from the first $mo, half $h run" | tee -a "$res"
    fi
done
echo "0.8x torchao's peak: $(echo "$torchao" | awk '{ printf "%.2f", 0.8 * $1 }') GiB; total $(( $(date +%s) - t0 )) s" \
    | tee -a "$res"
