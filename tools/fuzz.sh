#!/bin/sh
# tools/fuzz.sh — libFuzzer on f8's parsers of untrusted files (called by `make fuzz`).
#
#   tools/fuzz.sh [run]      build build/fuzz/<target>/fuzz with clang
#                            (-fsanitize=fuzzer,address,undefined, the library
#                            compiled CPU-only) and run it for FUZZ_SECONDS
#   tools/fuzz.sh build      build only
#   tools/fuzz.sh corpus     regenerate the checkpoint seeds in fuzz/corpus (fuzz/make_corpus.c)
#
# Targets (FUZZ_TARGET, default checkpoint), each with its seeds:
#   checkpoint  f8_checkpoint_load_memory     fuzz/fuzz_checkpoint.c  fuzz/corpus
#   shards      llm.c token shards (data.c)   fuzz/fuzz_data.c        fuzz/corpus_shards
#   text        text files (data.c)           fuzz/fuzz_data.c        fuzz/corpus_text
#   meta        f8_train's checkpoint         fuzz/fuzz_meta.c        fuzz/corpus_meta
#               metadata (train/options.c)
#   onnx        the ONNX exporter's names     fuzz/fuzz_onnx.c        fuzz/corpus_onnx
#               and shapes (src/io/onnx_*.c)
#   json        the strict JSON reader        fuzz/fuzz_json.c        fuzz/corpus_json
#               (src/io/json.c)
# Knobs: FUZZ_SECONDS (600), FUZZ_CC (clang), FUZZ_BUILD (build/fuzz),
# FUZZ_MAX_LEN (4096), FUZZ_LIB_SRC (the library's .c files; the Makefile
# passes its CPU-only list). One worker. New inputs go to
# $FUZZ_BUILD/<target>/corpus, crashes to $FUZZ_BUILD/<target>/artifacts/; the
# run log is $FUZZ_BUILD/<target>/fuzz.log. Replay anything with the
# gcc-built driver: $FUZZ_BUILD/<target>/replay FILE_OR_DIR.
set -eu
cd "$(dirname "$0")/.."

MODE=${1:-run}
TARGET=${FUZZ_TARGET:-checkpoint}
SECONDS_=${FUZZ_SECONDS:-600}
B0=${FUZZ_BUILD:-build/fuzz}
B=$B0/$TARGET
CC_FUZZ=${FUZZ_CC:-clang}
MAX_LEN=${FUZZ_MAX_LEN:-4096}
LIB_SRC=${FUZZ_LIB_SRC:-$(ls src/core/*.c src/modules/*.c src/nn/*.c src/optim/*.c src/io/*.c src/cpu/*.c src/comm/comm.c src/comm/comm_cpu.c src/comm/no_nccl.c)}
# The trainer's loaders (libf8train's sources), for the shards, text and meta targets.
TRAIN_SRC=$(ls train/*.c | grep -v '^train/main\.c$')
FLAGS="-std=c11 -g -O1 -fno-omit-frame-pointer -ffp-contract=off -D_POSIX_C_SOURCE=200809L -Iinclude -Isrc -Itrain -Ifuzz"
case "$TARGET" in
checkpoint) SRC=fuzz/fuzz_checkpoint.c; SEEDS=fuzz/corpus; DEFS="" ;;
shards) SRC="fuzz/fuzz_data.c $TRAIN_SRC"; SEEDS=fuzz/corpus_shards; DEFS="-DFUZZ_DATA_SHARDS" ;;
text) SRC="fuzz/fuzz_data.c $TRAIN_SRC"; SEEDS=fuzz/corpus_text; DEFS="-DFUZZ_DATA_TEXT" ;;
meta) SRC="fuzz/fuzz_meta.c $TRAIN_SRC"; SEEDS=fuzz/corpus_meta; DEFS="" ;;
onnx) SRC=fuzz/fuzz_onnx.c; SEEDS=fuzz/corpus_onnx; DEFS="" ;;
json) SRC=fuzz/fuzz_json.c; SEEDS=fuzz/corpus_json; DEFS="" ;;
*) echo "fuzz.sh: unknown FUZZ_TARGET '$TARGET' (checkpoint, shards, text, meta, onnx, json)" >&2; exit 2 ;;
esac
DICT=""
[ -f "fuzz/$TARGET.dict" ] && DICT="-dict=fuzz/$TARGET.dict"
mkdir -p "$B"

if [ "$MODE" = corpus ]; then
    ${CC:-cc} $FLAGS fuzz/make_corpus.c $LIB_SRC -o "$B0/make_corpus" -lm -lpthread
    mkdir -p fuzz/corpus
    "$B0/make_corpus" fuzz/corpus
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

echo "fuzz.sh: building $B/fuzz with $CC_FUZZ"
"$CC_FUZZ" $FLAGS $DEFS -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
    $SRC $LIB_SRC -o "$B/fuzz" -lm -lpthread
# The same target under the normal compiler, for replaying inputs.
${CC:-cc} $FLAGS $DEFS $SRC fuzz/replay.c fuzz/replay_main.c $LIB_SRC -o "$B/replay" -lm -lpthread
[ "$MODE" = build ] && exit 0

mkdir -p "$B/corpus" "$B/artifacts"
echo "fuzz.sh: running $TARGET for $SECONDS_ s (log: $B/fuzz.log)"
# The first directory receives new inputs; the committed seeds are read too.
set +e
ASAN_OPTIONS="detect_leaks=1:${ASAN_OPTIONS:-}" "$B/fuzz" "$B/corpus" "$SEEDS" \
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
echo "fuzz.sh: $TARGET: no crash in $SECONDS_ s"
