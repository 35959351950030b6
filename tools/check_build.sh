#!/bin/sh
# tools/check_build.sh — the build's promises, checked by doing them (.ci/run
# runs it; issue 13, defects 10 and 11):
#   1. CUDA defaults to 1 only where the GPU code can run: with an nvcc on PATH
#      (a stand-in here) it is 1 exactly when a GPU is visible; CUDA=0 and
#      CUDA=1 on the command line are obeyed.
#   2. `make install` into a temporary PREFIX (f8.h and its topic headers
#      include/f8/*.h), then the README's pkg-config
#      lines on examples/example_linear.c: the plain link needs libf8.so.0 (the
#      library's SONAME) and runs; the --static link needs no libf8 and runs.
# Uses the build as configured (CUDA=... may be passed through: sh
# tools/check_build.sh CUDA=1). Exits non-zero on the first broken promise.
set -eu
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "check_build: $*" >&2; exit 1; }

mkdir "$tmp/bin"
printf '#!/bin/sh\nexit 0\n' >"$tmp/bin/nvcc"
chmod +x "$tmp/bin/nvcc"
gpu=0
{ [ -e /dev/nvidia0 ] || nvidia-smi -L >/dev/null 2>&1; } && gpu=1
got=$(PATH="$tmp/bin:$PATH" make -s config | sed -n 's/^CUDA=//p')
[ "$got" = "$gpu" ] || fail "with nvcc on PATH and GPU visible = $gpu, CUDA defaults to '$got'"
[ "$(PATH="$tmp/bin:$PATH" make -s config CUDA=0 | sed -n 's/^CUDA=//p')" = 0 ] || fail "CUDA=0 not obeyed"
[ "$(make -s config CUDA=1 | sed -n 's/^CUDA=//p')" = 1 ] || fail "CUDA=1 not obeyed"
echo "check_build: CUDA defaults to $got (GPU visible: $gpu); CUDA=0 and CUDA=1 obeyed"

make -s "$@" install PREFIX="$tmp/prefix" >/dev/null
lib="$tmp/prefix/lib"
for h in include/f8/*.h; do
    [ -f "$tmp/prefix/include/f8/$(basename "$h")" ] || fail "make install left out the topic header $h"
done
readelf -d "$lib/libf8.so.0.1.0" | grep -q 'SONAME.*\[libf8\.so\.0\]' || fail "libf8.so has no SONAME libf8.so.0"
[ -L "$lib/libf8.so.0" ] && [ -L "$lib/libf8.so" ] || fail "libf8.so.0 / libf8.so links missing"
export PKG_CONFIG_PATH="$lib/pkgconfig"
${CC:-cc} examples/example_linear.c $(pkg-config --cflags --libs f8) -o "$tmp/shared"
readelf -d "$tmp/shared" | grep -q 'NEEDED.*\[libf8\.so\.0\]' || fail "the plain link does not load libf8.so.0"
"$tmp/shared" >/dev/null || fail "the shared-linked example does not run"
${CC:-cc} examples/example_linear.c $(pkg-config --cflags --libs --static f8) -o "$tmp/static"
if readelf -d "$tmp/static" | grep -q 'libf8'; then fail "the --static link still loads libf8.so"; fi
"$tmp/static" >/dev/null || fail "the static-linked example does not run"
echo "check_build: install + pkg-config: shared link loads libf8.so.0 and runs; --static link has no libf8 and runs"
