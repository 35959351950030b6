#!/bin/sh
# tools/fuzz.sh — fuzz the checkpoint loader (or, FUZZ_TARGET=onnx, the ONNX
# exporter's names and shapes: fuzz/fuzz_onnx.c) with libFuzzer (`make fuzz`).
#
#   tools/fuzz.sh [run]      build build/fuzz/fuzz_checkpoint with clang
#                            (-fsanitize=fuzzer,address,undefined, the library
#                            compiled CPU-only) and run it for FUZZ_SECONDS
#   tools/fuzz.sh build      build only
#   tools/fuzz.sh corpus     regenerate the seeds in fuzz/corpus (fuzz/make_corpus.c)
#
# Knobs: FUZZ_TARGET (checkpoint | onnx), FUZZ_SECONDS (600), FUZZ_CC (clang), FUZZ_BUILD (build/fuzz),
# FUZZ_MAX_LEN (4096), FUZZ_LIB_SRC (the library's .c files; the Makefile
# passes its CPU-only list). One worker. New inputs go to $FUZZ_BUILD/corpus_$TARGET,
# crashes to $FUZZ_BUILD/artifacts/; the run log is $FUZZ_BUILD/fuzz.log.
# Replay anything with the gcc-built driver: $FUZZ_BUILD/replay_$TARGET FILE_OR_DIR.
set -eu
cd "$(dirname "$0")/.."

MODE=${1:-run}
TARGET=${FUZZ_TARGET:-checkpoint}
case $TARGET in
checkpoint) SEEDS=fuzz/corpus; DICT="-dict=fuzz/checkpoint.dict" ;;
onnx) SEEDS=fuzz/corpus_onnx; DICT="" ;;
*) echo "fuzz.sh: FUZZ_TARGET must be checkpoint or onnx" >&2; exit 1 ;;
esac
SECONDS_=${FUZZ_SECONDS:-600}
B=${FUZZ_BUILD:-build/fuzz}
CC_FUZZ=${FUZZ_CC:-clang}
MAX_LEN=${FUZZ_MAX_LEN:-4096}
LIB_SRC=${FUZZ_LIB_SRC:-$(ls src/*.c src/cpu/*.c src/modules/*.c)}
FLAGS="-std=c11 -g -O1 -fno-omit-frame-pointer -ffp-contract=off -D_POSIX_C_SOURCE=200809L -Iinclude -Isrc"
mkdir -p "$B"

if [ "$MODE" = corpus ]; then
    ${CC:-cc} $FLAGS fuzz/make_corpus.c $LIB_SRC -o "$B/make_corpus" -lm -lpthread
    mkdir -p fuzz/corpus
    "$B/make_corpus" fuzz/corpus
    echo "fuzz.sh: $(ls fuzz/corpus | wc -l) seeds in fuzz/corpus"
    exit 0
fi

# clang with libFuzzer; installed with apt-get when missing (root or sudo).
if ! command -v "$CC_FUZZ" >/dev/null 2>&1; then
    echo "fuzz.sh: $CC_FUZZ not found; installing clang with apt-get"
    if [ "$(id -u)" = 0 ]; then SUDO=""
    elif command -v sudo >/dev/null 2>&1; then SUDO="sudo"
    else echo "fuzz.sh: clang is missing and there is neither root nor sudo to install it" >&2; exit 1
    fi
    $SUDO apt-get update
    $SUDO apt-get install -y clang
    CC_FUZZ=clang
fi

echo "fuzz.sh: building $B/fuzz_$TARGET with $CC_FUZZ"
"$CC_FUZZ" $FLAGS -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
    fuzz/fuzz_$TARGET.c $LIB_SRC -o "$B/fuzz_$TARGET" -lm -lpthread
# The same target under the normal compiler, for replaying inputs.
${CC:-cc} $FLAGS fuzz/fuzz_$TARGET.c fuzz/replay_main.c $LIB_SRC -o "$B/replay_$TARGET" -lm -lpthread
[ "$MODE" = build ] && exit 0

mkdir -p "$B/corpus_$TARGET" "$B/artifacts"
echo "fuzz.sh: running for $SECONDS_ s (log: $B/fuzz.log)"
# The first directory receives new inputs; fuzz/corpus is read as seeds.
set +e
ASAN_OPTIONS="detect_leaks=1:${ASAN_OPTIONS:-}" "$B/fuzz_$TARGET" "$B/corpus_$TARGET" $SEEDS \
    $DICT -max_total_time="$SECONDS_" -max_len="$MAX_LEN" -timeout=10 \
    -rss_limit_mb=2048 -artifact_prefix="$B/artifacts/" -print_final_stats=1 >"$B/fuzz.log" 2>&1
rc=$?
set -e
grep -E "^#[0-9]+" "$B/fuzz.log" | tail -n 1
grep -E "^Done|^stat::" "$B/fuzz.log" || true
if [ $rc -ne 0 ]; then
    echo "fuzz.sh: the fuzzer stopped with $rc; the input is in $B/artifacts/:" >&2
    ls "$B/artifacts" >&2
    tail -n 40 "$B/fuzz.log" >&2
    exit $rc
fi
echo "fuzz.sh: no crash in $SECONDS_ s"
