#!/usr/bin/env bash
# Build mmdet_ext._C with clang, libFuzzer coverage instrumentation (-fsanitize=fuzzer-no-link)
# and AddressSanitizer + UndefinedBehaviorSanitizer into a separate copy of the repository, so
# atheris gets coverage feedback from our C++ (csrc/) and not only from Python. libtorch, OpenCV
# and libjpeg stay as they are (gcc-built, not instrumented). Then fuzz against that copy:
#
#   tools/fuzz/build_fuzz_coverage.sh [DEST]      # default DEST: /tmp/mmdet_ext-fuzzcov
#   cd DEST && LD_PRELOAD="$(clang-14 -print-file-name=libclang_rt.asan-x86_64.so) $PWD/fuzz_runtime/libfuzzer_no_main.so" \
#       ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=1 \
#       UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
#       python3 tools/fuzz/fuzz_native.py rle_from_string -max_total_time=180 SEEDS/
#
# (the script prints this command with the paths filled in). The atheris wheel from PyPI has no
# asan_with_fuzzer.so, so libFuzzer comes from clang-14's libclang_rt.fuzzer_no_main, linked
# here into DEST/fuzz_runtime/libfuzzer_no_main.so and preloaded: atheris then says "INFO: Using
# preloaded libfuzzer" and the extension's coverage counters register with that libFuzzer.
# clang's shared ASan runtime (which contains UBSan's) must come first in LD_PRELOAD because
# python3 is not built with ASan; detect_leaks=0 because CPython and torch keep allocations alive
# at exit. Needs: apt-get install clang-14 libclang-rt-14-dev.
set -euo pipefail
SRC="$(cd "$(dirname "$0")/../.." && pwd)"
DEST="${1:-/tmp/mmdet_ext-fuzzcov}"
CLANG="${CLANG:-clang-14}"
CLANGXX="${CLANGXX:-clang++-14}"
command -v "$CLANGXX" >/dev/null || { echo "needs $CLANGXX: apt-get install clang-14 libclang-rt-14-dev" >&2; exit 1; }
RTDIR="$(dirname "$("$CLANG" -print-file-name=libclang_rt.asan-x86_64.so)")"
ASAN_RT="$RTDIR/libclang_rt.asan-x86_64.so"
FUZZER_A="$RTDIR/libclang_rt.fuzzer_no_main-x86_64.a"
[ -f "$ASAN_RT" ] && [ -f "$FUZZER_A" ] || { echo "no $ASAN_RT / $FUZZER_A: apt-get install libclang-rt-14-dev" >&2; exit 1; }
mkdir -p "$DEST"
# Sources only: tracked and untracked-but-not-ignored files (no build outputs, no .so).
(cd "$SRC" && git ls-files -co --exclude-standard -z | tar --null -T - -cf -) | tar -xf - -C "$DEST"
cd "$DEST"
mkdir -p fuzz_runtime
# libFuzzer as a shared library to preload (its C++ runtime is internal to the archive).
"$CLANGXX" -shared -o fuzz_runtime/libfuzzer_no_main.so \
    -Wl,--whole-archive "$FUZZER_A" -Wl,--no-whole-archive -lpthread -ldl
# -shared-libasan: the extension leaves the ASan/UBSan runtime symbols to the preloaded runtime.
SAN="-fsanitize=fuzzer-no-link,address,undefined -shared-libasan -fno-omit-frame-pointer -fno-sanitize-recover=undefined"
CC="$CLANG" CXX="$CLANGXX" LDSHARED="$CLANGXX -shared" \
    CFLAGS="$SAN -O1 -g" CXXFLAGS="$SAN -O1 -g" LDFLAGS="$SAN" \
    MAX_JOBS="${MAX_JOBS:-1}" python3 setup.py build_ext --inplace
SO="$(ls mmdet_ext/_C*.so)"
# One 8-bit counter per instrumented edge, in the __sancov_cntrs section.
EDGES=$((16#$(readelf -SW "$SO" | awk '$2 == "__sancov_cntrs" {print $6}')))
if ! nm -u "$SO" | grep -q __sanitizer_cov_8bit_counters_init || [ "${EDGES:-0}" -eq 0 ]; then
    echo "$SO has no libFuzzer coverage instrumentation" >&2
    exit 1
fi
echo "coverage-instrumented build in $DEST/mmdet_ext: $EDGES instrumented edges"
echo "run: cd $DEST && LD_PRELOAD=\"$ASAN_RT $DEST/fuzz_runtime/libfuzzer_no_main.so\"" \
    "ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=1" \
    "UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 python3 tools/fuzz/fuzz_native.py TARGET ..."
