#!/usr/bin/env bash
# Build mmdet_ext._C with AddressSanitizer + UndefinedBehaviorSanitizer into a separate copy of
# the repository, so memory errors in the native parsers abort with a report instead of passing
# silently, without touching this checkout's build. Then fuzz against that copy:
#
#   tools/fuzz/build_sanitized.sh [DEST]          # default DEST: /tmp/mmdet_ext-asan
#   cd DEST && LD_PRELOAD="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libubsan.so)" \
#       ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=1 \
#       UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
#       python3 tools/fuzz/fuzz_native.py rle_from_string -max_total_time=600
#
# LD_PRELOAD is needed because python3 itself is not built with ASan; detect_leaks=0 because
# CPython and torch keep allocations alive at exit.
set -euo pipefail
SRC="$(cd "$(dirname "$0")/../.." && pwd)"
DEST="${1:-/tmp/mmdet_ext-asan}"
mkdir -p "$DEST"
# Sources only: tracked and untracked-but-not-ignored files (no build outputs, no .so).
(cd "$SRC" && git ls-files -co --exclude-standard -z | tar --null -T - -cf -) | tar -xf - -C "$DEST"
cd "$DEST"
SAN="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"
CFLAGS="$SAN -O1 -g" CXXFLAGS="$SAN -O1 -g" LDFLAGS="$SAN" \
    python3 setup.py build_ext --inplace
echo "sanitized build in $DEST/mmdet_ext"
