#!/bin/sh
# The memory plan of an f8_train run on CUDA, worked out on a machine without a GPU.
#
# Usage: tools/memory_plan.sh [f8_train options...]      e.g. --model 1.3B --adam-moments fp8
#   F8_TRAIN=PATH   the f8_train to ask (default ./build/f8_train)
#   DATA=PATH       a token shard (default: a small synthetic GPT-2-vocabulary one, made once in /tmp)
#
# Why it works: the plan (train/memplan.c) is the library's own accounting
# of probe models of one and two blocks, and every byte it counts (module
# parameters, workspaces, saved state, the per-call workspace, attention's
# saved state, the step's buffers) is laid out by backend-independent code;
# only the ctx's own bytes (a few MiB, "other") differ between backends. So
# the CPU backend in BF16 (CUDA's default dtype) plans what CUDA plans: the
# 1.3B preset's 28.50 GiB here is the 28.50 GiB its H100 run planned and
# held (bench/RESULTS.md, issue 32). f8_train plans before it makes the
# model and refuses a plan over --memory-limit, printing it; a limit of
# 1 KiB makes every run print its plan and stop, allocating nothing big
# (the probes: one and two blocks and the head, briefly).
set -u
bin="${F8_TRAIN:-./build/f8_train}"
data="${DATA:-/tmp/f8_memory_plan_shard.bin}"
here=$(dirname "$0")
[ -x "$bin" ] || { echo "memory_plan.sh: no $bin (make first, or set F8_TRAIN)" >&2; exit 2; }
[ -f "$data" ] || python3 "$here/llmc_shard.py" "$data" 200000 || exit 2
out=$("$bin" --backend cpu --dtype bf16 --data "$data" --val-every 0 --sample 0 --log "" --plot "" "$@" \
    --memory-limit 0.000001 2>&1)
plan=$(printf '%s\n' "$out" | sed -n 's/.*the run needs about \([0-9.]* [GM]iB\) (\(.*\)), more than .*/\2/p')
if [ -z "$plan" ]; then
    printf '%s\n' "$out" | tail -n 3 >&2
    echo "memory_plan.sh: f8_train printed no plan (see above)" >&2
    exit 1
fi
echo "memory plan: $plan"
fixes=$(printf '%s\n' "$out" | sed -n 's/.*options that would help: \(.*\)/\1/p')
[ -n "$fixes" ] && echo "options that would lower it: $fixes"
exit 0
