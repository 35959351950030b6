#!/bin/sh
# Where a GPT training step spends its GPU time: runs f8_train eagerly (no
# graph) for 2 steps under Nsight Compute, timing every kernel, and prints
# the kernels of the second step grouped by name, largest total first.
# Usage: tools/profile_gpt.sh MODEL FP8(on|off) [ncu path]. Needs a built
# ./build/f8_train, numpy and ncu; logs go to $OUT (or ./profile-logs).
set -u
model="${1:-124M}"; fp8="${2:-on}"
ncu="${3:-$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -n 1)}"
out="${OUT:-profile-logs}"
mkdir -p "$out"
shard="$out/profile_shard.bin"
[ -f "$shard" ] || python3 - "$shard" <<'PY'
import sys
import numpy as np
n = 1_000_000
toks = np.random.default_rng(1).integers(0, 50257, n, dtype=np.uint16)
hdr = np.zeros(256, dtype='<i4')
hdr[:3] = (20240520, 1, n)
with open(sys.argv[1], 'wb') as f:
    f.write(hdr.tobytes())
    f.write(toks.astype('<u2').tobytes())
PY
csv="$out/ncu_${model}_fp8${fp8}.csv"
"$ncu" --metrics gpu__time_duration.sum --csv --print-units base \
    ./build/f8_train --model "$model" --fp8 "$fp8" --graph off --data "$shard" --steps 2 \
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
if not rows:
    sys.exit("no kernel rows")
rows.sort()
# the second step: kernels after the last AdamW-like kernel of step 1 are
# hard to find by name, so take the second half of the launches after init
half = rows[len(rows) // 2:]
tot = collections.defaultdict(lambda: [0.0, 0])
for _, name, ns in half:
    key = name.split("(")[0][:90]
    tot[key][0] += ns
    tot[key][1] += 1
all_ns = sum(v[0] for v in tot.values())
print(f"kernels {len(half)}  GPU time {all_ns/1e6:.2f} ms (second half of {len(rows)} launches)")
for k, (ns, n) in sorted(tot.items(), key=lambda kv: -kv[1][0])[:40]:
    print(f"{ns/1e6:9.3f} ms {100*ns/all_ns:5.1f}% {n:5d}x  {k}")
PY
