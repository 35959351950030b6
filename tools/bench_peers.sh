#!/bin/sh
# f8 against PyTorch on one GPU, in one call: f8_train FP8 and BF16, and the
# same GPT in PyTorch (tools/peer_gpt.py) with BF16 + torch.compile and with
# torchao FP8 (tensorwise) + torch.compile, at the 124M and 1.3B presets (the
# shapes and tokens per step of tools/bench_gpt.sh). Prints one table: tokens/s,
# ms/step, MFU, peak device memory, and f8's tokens/s over each configuration's.
#
# Usage: tools/bench_peers.sh [STEPS] [WARMUP]
#   STEPS   timed steps per configuration (default 10)
#   WARMUP  steps run first and left out (default 3; f8's first captures the
#           CUDA graph, torch's first compiles)
#   MODELS="124M 1.3B" (default) picks the presets; PEER_TIMEOUT (default 240)
#   bounds each torch configuration in seconds, compile included; PEER_ARGS adds
#   options to peer_gpt.py (e.g. "--compile full"; "--device cpu --compile none"
#   tries the script out on a machine without a GPU, with MODELS=tiny).
#   F8_HEAD=1 adds f8 FP8 with the LM head in FP8 too (f8_train --fp8-head on).
#   F8_RECOMPUTE=1 adds f8 FP8 with --recompute-norm on (less memory, one more
#   norm forward per LayerNorm module in the backward).
#   F8_CONFIGS="NAME=FLAGS;NAME=FLAGS" adds f8 runs of any flags, each reported as
#   mode fp8_NAME with its speed and peak over f8 FP8's and the torchao peers'
#   (issue 30: "current=--fp8 on --recipe current;rowwise=--fp8 on --recipe rowwise";
#   issue 32: "lowmem=--fp8 on --adam-moments fp8 ..."). NAME: letters, digits, _.
#   F8_BASE="on off" (default) are f8's plain FP8 and BF16 runs; F8_BASE="" or "off"
#   leaves them out (a call short of time that needs only F8_CONFIGS' runs).
#   F8_TRAIN=PATH runs a prebuilt f8_train instead of building one (a CUDA=1
#   build from elsewhere, carried: it saves the build's minute or two).
#   The Llama: MODELS=llama-1B PEER=tools/peer_llama.py PEER_MODES=bf16,fp8,fp8_rowwise
#   (f8 on a Llama 3 shard, tools/llmc_shard.py --llama3, the peer on the same).
# tokens/s = tokens per step / the mean step time of the timed steps, for f8 and
# torch alike. Peak memory: f8's is its own allocations (the peak_mem_mib
# column of f8_train's log); torch's is torch.cuda.max_memory_allocated().
# Neither counts the CUDA context; f8's leaves out the cuBLASLt workspace.
#
# torchao comes as a wheel in .whl/ (not tracked; see tools/peer_gpt.py's
# header for the pip download line): when python3 cannot import torchao and
# .whl/ holds a torchao wheel, it is installed into /tmp/site first. Without
# it the FP8 peer reports itself skipped and the rest still runs.
# Budget: about 5-7 minutes at the defaults on an H200 (the f8 build, 4 f8
# runs, 4 torch runs of which each compiles for 30-90 s). Three files go to
# $OUT (or ./bench-logs): results.jsonl (one line per configuration, written as
# each finishes: `tools/peer_gpt.py --compare results.jsonl` prints the table
# again, also from a cut-off run), table.txt and peers_logs.tgz (every log; the
# logs are written under $WORK, default /tmp/f8_bench_peers).
set -u
steps="${1:-10}"
warm="${2:-3}"
models="${MODELS:-124M 1.3B}"
out="${OUT:-bench-logs}"
work="${WORK:-/tmp/f8_bench_peers}"
mkdir -p "$out" "$work"
res="$out/results.jsonl"
: > "$res"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -n 1
t0=$(date +%s)
bin="${F8_TRAIN:-./build/f8_train}"
if [ -z "${F8_TRAIN:-}" ]; then
    if ! make -j16 build/f8_train > "$work/build.log" 2>&1; then
        echo "f8 build failed"; tail -n 30 "$work/build.log"; exit 1
    fi
    echo "f8_train built in $(( $(date +%s) - t0 )) s"
fi
if ! python3 -c "import torchao" > /dev/null 2>&1 && ls .whl/torchao-*.whl > /dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
        .whl/*.whl > "$work/pip.log" 2>&1 && export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
python3 -c "import torch, sys; print('torch', torch.__version__, 'python', sys.version.split()[0])" 2>&1
TORCHAO_FORCE_SKIP_LOADING_SO_FILES=1 python3 -c "import torchao; print('torchao', torchao.__version__)" 2>&1 |
    grep -v "^Skipping" | tail -n 1
shard="$work/bench_shard.bin"
peer="${PEER:-tools/peer_gpt.py}"
case "$models" in llama*) shard_kind=--llama3 ;; *) shard_kind= ;; esac
python3 tools/llmc_shard.py $shard_kind "$shard" 2000000
# the extra configurations' names, and their flags by name
extra=$(printf '%s' "${F8_CONFIGS:-}" | tr ';' '\n' | sed -n 's/^ *\([A-Za-z0-9_]*\)=.*/\1/p' | tr '\n' ' ')
flags_of() { printf '%s' "${F8_CONFIGS:-}" | tr ';' '\n' | sed -n "s/^ *$1=//p" | head -n 1; }
for model in $models; do
    for fp8 in ${F8_BASE-on off} ${F8_HEAD:+head} ${F8_RECOMPUTE:+recompute} $extra; do
        log="$work/peers_${model}_f8_fp8${fp8}.csv"
        rm -f "$log"
        case "$fp8" in
            on) mode=fp8 flags="--fp8 on" ;;
            off) mode=bf16 flags="--fp8 off" ;;
            head) mode=fp8_head flags="--fp8 on --fp8-head on" ;;
            recompute) mode=fp8_recompute flags="--fp8 on --recompute-norm on" ;;
            *) mode=fp8_$fp8 flags=$(flags_of "$fp8") ;;
        esac
        "$bin" --model "$model" $flags --data "$shard" --steps $((steps + warm)) --val-every 0 \
            --sample 0 --log "$log" --plot "" --quiet > "$work/peers_${model}_f8_fp8${fp8}.txt" 2>&1
        rc=$?
        # exit 2 (the loss did not fall: random tokens, few steps) and 3 still timed every step
        if [ $rc -ne 0 ] && [ $rc -ne 2 ] && [ $rc -ne 3 ]; then
            why=$(tail -n 1 "$work/peers_${model}_f8_fp8${fp8}.txt" | tr -d '"\\' | cut -c 1-200)
            echo "{\"impl\": \"f8\", \"model\": \"$model\", \"mode\": \"$mode\", \"status\": \"failed: $why\"}" >> "$res"
            continue
        fi
        # the timed steps: after the warmup; tokens per step from step 1's row
        awk -F, -v m="$model" -v p="$mode" -v w="$warm" 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
            $c["step"] == 1 { tps = $c["tokens"] }
            $c["step"] > w { ms += $c["ms_per_step"]; u += $c["mfu"]; nu += $c["mfu"] != ""; k++; peak = $c["peak_mem_mib"] }
            END { if (!k) { printf "{\"impl\": \"f8\", \"model\": \"%s\", \"mode\": \"%s\", \"status\": \"failed: no timed steps\"}\n", m, p; exit }
                  printf "{\"impl\": \"f8\", \"model\": \"%s\", \"mode\": \"%s\", \"status\": \"ok\", \"tokens_per_step\": %d, \"ms_per_step\": %.3f, \"tokens_per_s\": %.1f, \"mfu\": %s, \"peak_mem_bytes\": %.0f, \"steps\": %d}\n",
                      m, p, tps, ms / k, tps / (ms / k / 1000), nu ? sprintf("%.4f", u / k) : "null", peak * 1048576, k }' "$log" >> "$res"
    done
    echo "f8 $model done at $(( $(date +%s) - t0 )) s"
    PYTHONUNBUFFERED=1 python3 "$peer" --model "$model" --modes "${PEER_MODES:-bf16,fp8}" --steps "$steps" --warmup "$warm" \
        --data "$shard" --timeout "${PEER_TIMEOUT:-240}" ${PEER_ARGS:-} 2> "$work/peers_${model}_torch.err" |
        tee "$work/peers_${model}_torch.txt" | grep --line-buffered '^PEER_RESULT ' | sed -u 's/^PEER_RESULT //' >> "$res"
    echo "torch $model done at $(( $(date +%s) - t0 )) s"
done
echo
python3 tools/peer_gpt.py --compare "$res" | tee "$out/table.txt"
tar czf "$out/peers_logs.tgz" -C "$work" --exclude bench_shard.bin . 2> /dev/null
