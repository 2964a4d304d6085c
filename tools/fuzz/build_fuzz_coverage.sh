#!/usr/bin/env bash
# Build mmdet_ext._C with clang, libFuzzer coverage instrumentation (-fsanitize=fuzzer-no-link)
# and AddressSanitizer + UndefinedBehaviorSanitizer into a separate copy of the repository, so
# atheris gets coverage feedback from our C++ (csrc/) and not only from Python. libtorch, OpenCV
# and libjpeg stay as they are (gcc-built, not instrumented). Then fuzz against that copy:
#
#   tools/fuzz/build_fuzz_coverage.sh [DEST]      # default DEST: /tmp/mmdet_ext-fuzzcov
#   cd DEST && LD_PRELOAD=$PWD/fuzz_runtime/asan_with_fuzzer.so \
#       ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=1 \
#       UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
#       python3 tools/fuzz/fuzz_native.py rle_from_string -max_total_time=180 SEEDS/
#
# The atheris wheel from PyPI has no asan_with_fuzzer.so (atheris' way to fuzz native extensions),
# so this script makes one the way atheris' own build does: clang-14's static ASan runtime (which
# holds UBSan's; without its .preinit_array object, not allowed in a shared library) and
# libFuzzer (libclang_rt.fuzzer_no_main) linked into DEST/fuzz_runtime/asan_with_fuzzer.so.
# Preloaded, it is the process' ASan runtime (python3 is not built with ASan) and its libFuzzer:
# atheris says "INFO: Using preloaded libfuzzer" and the extension's coverage counters register
# with it. (Preloading clang's libclang_rt.asan-x86_64.so and a separate libFuzzer does not work:
# the ASan library's weak __sanitizer_cov_* stubs win, and atheris warns that coverage is broken.)
# detect_leaks=0 because CPython and torch keep allocations alive at exit.
# Needs: apt-get install clang-14 libclang-rt-14-dev.
set -euo pipefail
SRC="$(cd "$(dirname "$0")/../.." && pwd)"
DEST="${1:-/tmp/mmdet_ext-fuzzcov}"
CLANG="${CLANG:-clang-14}"
CLANGXX="${CLANGXX:-clang++-14}"
command -v "$CLANGXX" >/dev/null || { echo "needs $CLANGXX: apt-get install clang-14 libclang-rt-14-dev" >&2; exit 1; }
RTDIR="$(dirname "$("$CLANG" -print-file-name=libclang_rt.asan-x86_64.a)")"
for lib in asan asan_cxx fuzzer_no_main; do
    [ -f "$RTDIR/libclang_rt.$lib-x86_64.a" ] || { echo "no $RTDIR/libclang_rt.$lib-x86_64.a: apt-get install libclang-rt-14-dev" >&2; exit 1; }
done
mkdir -p "$DEST"
# Sources only: tracked and untracked-but-not-ignored files (no build outputs, no .so).
(cd "$SRC" && git ls-files -co --exclude-standard -z | tar --null -T - -cf -) | tar -xf - -C "$DEST"
cd "$DEST"
mkdir -p fuzz_runtime
# ASan (+ UBSan) runtime and libFuzzer in one library to preload (libFuzzer's C++ runtime is
# internal to its archive; its strong __sanitizer_cov_* definitions replace ASan's weak stubs).
cp "$RTDIR/libclang_rt.asan-x86_64.a" fuzz_runtime/asan_no_preinit.a
ar d fuzz_runtime/asan_no_preinit.a asan_preinit.cpp.o
"$CLANGXX" -shared -o fuzz_runtime/asan_with_fuzzer.so -Wl,--whole-archive fuzz_runtime/asan_no_preinit.a \
    "$RTDIR/libclang_rt.asan_cxx-x86_64.a" "$RTDIR/libclang_rt.fuzzer_no_main-x86_64.a" \
    -Wl,--no-whole-archive -lpthread -ldl -lrt -lm
# A shared object built with -fsanitize=address leaves the runtime's symbols undefined: the
# preloaded library provides them.
SAN="-fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"
CC="$CLANG" CXX="$CLANGXX" LDSHARED="$CLANGXX -shared" \
    CFLAGS="$SAN -O1 -g" CXXFLAGS="$SAN -O1 -g" LDFLAGS="$SAN" \
    MAX_JOBS="${MAX_JOBS:-1}" python3 setup.py build_ext --inplace
SO="$(ls mmdet_ext/_C*.so)"
# One 8-bit counter per instrumented edge, in the __sancov_cntrs section.
EDGES=$((16#$(readelf -SW "$SO" | awk '$2 == "__sancov_cntrs" {print $6}')))
if ! nm -u "$SO" | grep __sanitizer_cov_8bit_counters_init >/dev/null || [ "${EDGES:-0}" -eq 0 ]; then
    echo "$SO has no libFuzzer coverage instrumentation" >&2
    exit 1
fi
echo "coverage-instrumented build in $DEST/mmdet_ext: $EDGES instrumented edges"
echo "run: cd $DEST && LD_PRELOAD=$DEST/fuzz_runtime/asan_with_fuzzer.so" \
    "ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=1" \
    "UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 python3 tools/fuzz/fuzz_native.py TARGET ..."
