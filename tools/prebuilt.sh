#!/bin/sh
# Build the CUDA library on one machine, link and run on another: compiling
# every .cu takes minutes, linking the tests and the trainer seconds, so on
# a GPU machine lent by the minute the library can arrive prebuilt.
#   tools/prebuilt.sh pack [BUILD]     here, after `make CUDA=1 BUILD=...`: copies
#       BUILD/libf8.a and the benchmarks' CUDA objects, debug info stripped
#       (about 8 MB), into .prebuilt/
#   tools/prebuilt.sh link TARGETS...  there, from the repository root: puts
#       them under build/ and makes TARGETS (e.g. build/f8_train
#       build/tests/test_cuda_ops) against them, never recompiling the
#       library (make -o); the C sources of the targets are compiled there
# The two machines need the same CUDA toolkit major version and the same
# tree (the library's headers are not checked against its objects).
set -eu
cmd="${1:-}"
[ $# -gt 0 ] && shift
case "$cmd" in
pack)
    b="${1:-build}"
    [ -f "$b/libf8.a" ] || { echo "prebuilt.sh: no $b/libf8.a (run make CUDA=1 BUILD=$b first)" >&2; exit 1; }
    mkdir -p .prebuilt
    strip -g -o .prebuilt/libf8.a "$b/libf8.a"
    for o in "$b"/bench/*.o; do [ -f "$o" ] && strip -g -o ".prebuilt/$(basename "$o")" "$o"; done
    du -sh .prebuilt
    ;;
link)
    [ -f .prebuilt/libf8.a ] || { echo "prebuilt.sh: no .prebuilt/libf8.a (pack it and carry .prebuilt)" >&2; exit 1; }
    mkdir -p build/bench
    cp .prebuilt/libf8.a build/
    keep="-o build/libf8.a"
    for o in .prebuilt/*.o; do
        [ -f "$o" ] || continue
        cp "$o" build/bench/
        keep="$keep -o build/bench/$(basename "$o")"
    done
    touch build/libf8.a build/bench/*.o 2>/dev/null || true
    # shellcheck disable=SC2086 # keep is a list of options
    make -j"$(nproc)" CUDA=1 $keep "$@"
    ;;
*)
    echo "usage: tools/prebuilt.sh pack [BUILD] | link TARGETS..." >&2
    exit 2
    ;;
esac
