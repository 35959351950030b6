#!/bin/sh
# dev/cuda/fp8_sdpa_probe.sh — build fp8_sdpa_probe.cu and run its cases on
# the installed cuDNN and, where PyTorch's nvidia-cudnn wheel is present, on
# that one too (LD_LIBRARY_PATH to its lib dir), to tell an f8 fault from a
# cuDNN one. Output goes to stdout and, when LOG_DIR is set, to
# $LOG_DIR/probe_<lib>.log. Usage:
#   dev/cuda/fp8_sdpa_probe.sh [-t seconds] CASE...   (seconds: per library)
# With no CASE, the cases that decide between the hypotheses of docs/FP8_ATTENTION.md,
# then three of the FP8 backward (flag b).
set -u
here=$(cd "$(dirname "$0")" && pwd)
bin=${BIN:-/tmp/fp8_sdpa_probe}
budget=60
if [ "${1:-}" = "-t" ]; then budget=$2; shift 2; fi
if [ $# -eq 0 ]; then
    set -- 2,64,2,64 16,512,10,64 16,512,5,128 16,512,10,64:p 16,512,10,64:i 16,512,10,64:s \
        1,512,33,64 1,512,34,64 1,128,132,64 1,128,264,64 8,512,8,64 16,512,10,64:F 16,512,10,64:n \
        16,512,10,64:f 16,512,10,64:1 2,2048,16,128 2,256,2,128:b 16,512,5,128:b 16,512,10,64:b
fi
if ! nvcc -O2 -std=c++17 -Xcompiler -fopenmp -Wno-deprecated-declarations -o "$bin" "$here/fp8_sdpa_probe.cu" \
    -lcudnn -lgomp; then
    [ -x "$here/fp8_sdpa_probe.bin" ] || exit 2
    echo "nvcc failed here: running the binary built beside the source"
    bin=$here/fp8_sdpa_probe.bin
fi
log() { if [ -n "${LOG_DIR:-}" ]; then tee "$LOG_DIR/probe_$1.log"; else cat; fi; }
"$bin" -selftest | tail -1 # the judge on planted outputs first (no GPU needed)
"$bin" -t "$budget" "$@" 2>&1 | log system
# __path__, not __file__: the wheel's nvidia.cudnn may be a namespace package
wheel=$(python3 -c 'import nvidia.cudnn as m; print(list(m.__path__)[0])' 2>/dev/null)
if [ -n "$wheel" ] && [ -d "$wheel/lib" ]; then
    LD_LIBRARY_PATH="$wheel/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$bin" -t "$budget" "$@" 2>&1 | log wheel
else
    echo "no nvidia-cudnn wheel found" | log wheel
fi
