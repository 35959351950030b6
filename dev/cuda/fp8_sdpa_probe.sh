#!/bin/sh
# dev/cuda/fp8_sdpa_probe.sh — build fp8_sdpa_probe.cu and run its cases on
# the installed cuDNN and, where PyTorch's nvidia-cudnn wheel is present, on
# that one too (LD_LIBRARY_PATH to its lib dir), to tell an f8 fault from a
# cuDNN one. Output goes to stdout and, when LOG_DIR is set, to
# $LOG_DIR/probe_<lib>.log. Usage:
#   dev/cuda/fp8_sdpa_probe.sh [-t seconds] [-cs] CASE...   (seconds: per library)
# With no CASE, the cases that decide between the hypotheses of docs/FP8_ATTENTION.md,
# then three of the FP8 backward (flag b).
# -cs: the current-scaling forms instead (docs/FP8_ATTENTION.md, "Session 8"):
# which form of the FP8 forward with O not in FP8 cuDNN gives an engine for,
# and whether it is right, at hd 64 and 128; then cuDNN's own log (warning
# level) of its refusal of f8's form, its "Reason" lines counted. About 60 s.
set -u
here=$(cd "$(dirname "$0")" && pwd)
bin=${BIN:-/tmp/fp8_sdpa_probe}
budget=60
cs=0
while [ $# -gt 0 ]; do
    case $1 in
    -t) budget=$2; shift 2 ;;
    -cs) cs=1; shift ;;
    *) break ;;
    esac
done
if [ $# -eq 0 ] && [ $cs = 1 ]; then
    # per shape: the O8 control (the delayed graph with scale_o = the QKV scale, which
    # current scaling knows before the call), then the O-in-BF16/FP16 forms, each
    # searching every engine (e) where heuristics mode A offers none
    for s in 2,64,2,64 2,256,2,128 16,512,10,64 4,1024,16,128; do
        set -- "$@" "$s:q"
        for f in B Bd Bx BxA BxAS BA H Bi BV; do set -- "$@" "$s:${f}e"; done
    done
elif [ $# -eq 0 ]; then
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
# cuDNN's own reasons for refusing f8's current-scaling form (O bf16, scale_o by-value 1)
why() {
    t=$(mktemp)
    CUDNN_LOGLEVEL_DBG=2 CUDNN_LOGDEST_DBG=$t "$bin" 2,256,2,128:B >/dev/null 2>&1
    echo "cuDNN's log (warnings) for 2,256,2,128:B, its distinct Reason/NOT_SUPPORTED lines, counted:"
    grep -i 'reason\|not_supported\|not supported' "$t" | sed -E 's/^[[:space:]]*[wWeEiI]![[:space:]]*//' | sort | uniq -c | sort -rn |
        head -8 | cut -c1-260
    if [ ! -s "$t" ]; then
        echo "  (the log is empty: this cuDNN wrote nothing at CUDNN_LOGLEVEL_DBG=2)"
    elif ! grep -qi 'reason\|not_supported\|not supported' "$t"; then
        echo "  (no such line in its $(wc -l <"$t") lines; the last 6:)"
        tail -6 "$t" | cut -c1-260
    fi
    rm -f "$t"
}
"$bin" -selftest | tail -1 # the judge on planted outputs first (no GPU needed)
{ "$bin" -t "$budget" "$@" 2>&1; [ $cs = 1 ] && why; } | log system
# __path__, not __file__: the wheel's nvidia.cudnn may be a namespace package
wheel=$(python3 -c 'import nvidia.cudnn as m; print(list(m.__path__)[0])' 2>/dev/null)
if [ -n "$wheel" ] && [ -d "$wheel/lib" ]; then
    {
        export LD_LIBRARY_PATH="$wheel/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
        "$bin" -t "$budget" "$@" 2>&1
        [ $cs = 1 ] && why
    } | log wheel
else
    echo "no nvidia-cudnn wheel found" | log wheel
fi
