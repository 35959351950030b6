#!/bin/sh
# Where a GPT training step spends its GPU time: runs f8_train eagerly (no
# graph) for 2 steps under Nsight Compute, timing every kernel, and prints
# the kernels of the second step grouped by name, largest total first.
# Usage: tools/profile_gpt.sh MODEL FP8(on|off) [ncu path]; EXTRA="..." adds
# f8_train options (e.g. EXTRA="--grad-accum 1" to profile one 1.3B
# microbatch per step). ncu runs at the GPU's own clocks (--clock-control
# none), so kernel times compare with graphed steps. Needs a built
# ./build/f8_train and ncu; logs go to $OUT (or ./profile-logs).
set -u
model="${1:-124M}"; fp8="${2:-on}"
ncu="${3:-$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -n 1)}"
out="${OUT:-profile-logs}"
mkdir -p "$out"
shard="$out/profile_shard.bin"
[ -f "$shard" ] || python3 tools/llmc_shard.py "$shard" 1000000
csv="$out/ncu_${model}_fp8${fp8}.csv"
# shellcheck disable=SC2086 # EXTRA is a list of options
"$ncu" --metrics gpu__time_duration.sum --clock-control none --csv --print-units base \
    ./build/f8_train --model "$model" --fp8 "$fp8" --graph off --data "$shard" --steps 2 ${EXTRA:-} \
    --val-every 0 --sample 0 --log "" --plot "" --quiet > "$csv" 2> "$out/ncu_${model}_fp8${fp8}.err"
echo "ncu exit $? ($model fp8 $fp8)"
python3 - "$csv" <<'PY'
import csv, sys, collections
rows = []
with open(sys.argv[1]) as f:
    lines = [l for l in f if l.startswith('"')]
for r in csv.DictReader(lines):
    if r.get("Metric Name") == "gpu__time_duration.sum":
        rows.append((int(r["ID"]), r["Kernel Name"], float(r["Metric Value"].replace(",", ""))))
rows.sort()
# a step ends with the optimizer's last kernel: the second step is what lies
# between the two adamw_finalize launches (init and warm-up fall before)
ends = [i for i, r in enumerate(rows) if r[1].startswith("adamw_finalize")]
if len(ends) < 2:
    sys.exit("no second step found among %d kernel rows" % len(rows))
step = rows[ends[-2] + 1:ends[-1] + 1]
tot = collections.defaultdict(lambda: [0.0, 0])
for _, name, ns in step:
    key = name.split("(")[0][:90]
    tot[key][0] += ns
    tot[key][1] += 1
all_ns = sum(v[0] for v in tot.values())
print(f"step 2: {len(step)} kernels, GPU time {all_ns/1e6:.2f} ms")
for k, (ns, n) in sorted(tot.items(), key=lambda kv: -kv[1][0])[:40]:
    print(f"{ns/1e6:9.3f} ms {100*ns/all_ns:5.1f}% {n:5d}x  {k}")
PY
