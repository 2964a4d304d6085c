#!/usr/bin/env bash
# Compile-check the CUDA build of mmdet_ext._C on a machine without a GPU: build it with
# FORCE_CUDA=1 against a CUDA build of torch (in its own venv), load the .so with that torch (it
# imports without a GPU), and check that CUDA is compiled in, that every op with a CUDA kernel in
# the sources (a TORCH_LIBRARY_IMPL(mmdet_ext, CUDA, m) block in csrc/**) is registered for the
# CUDA dispatch key, and that nvcc made device code for TORCH_CUDA_ARCH_LIST. It runs nothing on a
# GPU: that is for a GPU machine's test run.
#
#   tools/check_cuda_build.sh [both|opencv|no-opencv]     (default: both)
#
# opencv: the build as on a machine with the C++ OpenCV and libjpeg (found with pkg-config);
# no-opencv: MMDET_EXT_WITH_OPENCV=0, as on a GPU machine without them, where decode_image must
# raise NotImplementedError naming OpenCV. The builds go to a temporary directory, never into the
# checkout (its CPU build stays as it is). Exit status: non-zero when a build or a check fails.
#
# Environment: MMDET_EXT_CUDA_VENV (default /opt/mmdet_ext_cuda_venv; created when missing),
# TORCH_CUDA_ARCH_LIST (default 9.0, H100), CUDA_HOME (default: where nvcc lives), MAX_JOBS,
# KEEP=1 keeps the build directory.
set -euo pipefail
SRC="$(cd "$(dirname "$0")/.." && pwd)"
VENV="${MMDET_EXT_CUDA_VENV:-/opt/mmdet_ext_cuda_venv}"
VARIANTS="${1:-both}"
case "$VARIANTS" in
    both) VARIANTS="opencv no-opencv" ;;
    opencv | no-opencv) ;;
    *) echo "usage: $0 [both|opencv|no-opencv]" >&2; exit 2 ;;
esac
export TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0}"
log() { echo "[check_cuda_build] $*"; }

if [ ! -x "$VENV/bin/python" ]; then
    # The pip config's find-links point at the local CPU-only torch wheel: cleared for this venv.
    log "creating $VENV with a CUDA build of torch"
    python3 -m venv "$VENV"
    PIP_FIND_LINKS= PIP_CONFIG_FILE=/dev/null "$VENV/bin/pip" install torch==2.13.0 numpy ninja \
        'setuptools<82' wheel nvidia-nvjpeg
fi
PY="$VENV/bin/python"
export PATH="$VENV/bin:$PATH"  # torch's BuildExtension looks for ninja on PATH
if [ -z "${CUDA_HOME:-}" ]; then
    if ! command -v nvcc >/dev/null; then
        log "no nvcc on PATH and no CUDA_HOME: install the CUDA toolkit"
        exit 1
    fi
    # nvcc may be a wrapper script (e.g. /usr/local/bin/nvcc), so ask it where its toolkit is.
    TOP="$(nvcc --dryrun -x cu -c /dev/null -o /dev/null 2>&1 | sed -n 's/^#\$ TOP=//p')"
    CUDA_HOME="$(realpath "$TOP")"
fi
export CUDA_HOME
TORCH="$("$PY" -c 'import torch; print(torch.__version__, "CUDA", torch.version.cuda)')"
NVCC="$("$CUDA_HOME/bin/nvcc" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')"
log "torch $TORCH, nvcc $NVCC in $CUDA_HOME, TORCH_CUDA_ARCH_LIST=$TORCH_CUDA_ARCH_LIST"

WORK="$(mktemp -d /tmp/mmdet_ext-cuda-check.XXXXXX)"
if [ "${KEEP:-0}" != 1 ]; then trap 'rm -rf "$WORK"' EXIT; fi
failed=0
for variant in $VARIANTS; do
    out="$WORK/$variant"
    mkdir -p "$out"
    with_opencv=$([ "$variant" = opencv ] && echo 1 || echo 0)  # 1: no OpenCV fails the build
    log "$variant: building into $out (log: $out/build.log)"
    start=$SECONDS
    if ! (cd "$SRC" && FORCE_CUDA=1 MMDET_EXT_WITH_OPENCV="$with_opencv" MAX_JOBS="${MAX_JOBS:-2}" \
            "$PY" setup.py build_ext --build-temp "$out/temp" --build-lib "$out/lib") \
            >"$out/build.log" 2>&1; then
        tail -n 40 "$out/build.log"
        log "$variant: FAILED to build"
        failed=1
        continue
    fi
    grep '^\[mmdet_ext\]' "$out/build.log" || true
    log "$variant: built in $((SECONDS - start)) s"
    so="$(ls "$out"/lib/mmdet_ext/_C*.so)"
    if ! "$PY" - "$SRC" "$so" "$variant" "$out/build.log" <<'EOF'
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import torch

src, so, variant, build_log = Path(sys.argv[1]), sys.argv[2], sys.argv[3], Path(sys.argv[4])
problems = []


def check(ok: bool, what: str) -> None:
    print(f'  {"ok  " if ok else "FAIL"} {what}')
    if not ok:
        problems.append(what)


def cuda_ops(csrc: Path) -> dict[str, str]:
    """{op: file} for every m.impl in a TORCH_LIBRARY_IMPL(mmdet_ext, CUDA, m) block."""
    ops = {}
    for path in sorted(p for p in csrc.rglob('*') if p.suffix in ('.cu', '.cpp')):
        text = path.read_text()
        pattern = r'TORCH_LIBRARY_IMPL\(\s*mmdet_ext\s*,\s*CUDA\s*,\s*(\w+)\s*\)\s*\{'
        for block in re.finditer(pattern, text):
            depth, end = 1, block.end()
            while depth and end < len(text):
                depth += {'{': 1, '}': -1}.get(text[end], 0)
                end += 1
            body = text[block.end():end]
            for op in re.findall(rf'\b{block.group(1)}\s*\.\s*impl\(\s*"(\w+)"', body):
                ops[op] = str(path.relative_to(csrc.parent))
    return ops


spec = importlib.util.spec_from_file_location('mmdet_ext._C', so)
_C = importlib.util.module_from_spec(spec)
spec.loader.exec_module(_C)  # registers torch.ops.mmdet_ext.*
info = _C.build_info()
print(f'  loaded {Path(so).name} with torch {torch.__version__}: {info}')
check(_C.with_cuda() is True and info['with_cuda'] is True, '_C.with_cuda() is True')
check(info['cuda_version'] is not None, f'cuda_version {info["cuda_version"]}')
check(info['source_hash'] == _C.source_hash(), 'source_hash')
check(info['nvjpeg'] is True, 'built with nvJPEG (nvjpeg.h of the toolkit or the nvidia-nvjpeg wheel)')
# As mmdet_ext/ops/gpu_decode.py: the wheel's library loaded first, then found by its soname.
import ctypes  # noqa: E402
nvidia = importlib.util.find_spec('nvidia')
major = torch.version.cuda.split('.')[0]
for library in sorted(library for root in (nvidia.submodule_search_locations if nvidia else [])
                      for library in Path(root).glob(f'*/lib/libnvjpeg.so.{major}')):
    ctypes.CDLL(str(library), mode=ctypes.RTLD_GLOBAL)
    break
error = _C.nvjpeg_load_error()
check(error is None, f'nvJPEG loads with every function decode_jpegs_into calls ({error or "ok"})')

ops = cuda_ops(src / 'csrc')
if not ops:
    print('  (no CUDA kernels in csrc/ yet: nothing to check for the CUDA dispatch key)')
for op, path in ops.items():
    registered = torch._C._dispatch_has_kernel_for_dispatch_key(f'mmdet_ext::{op}', 'CUDA')
    check(registered, f'mmdet_ext::{op} has a CUDA kernel ({path})')
if ops:  # nvcc's command lines (ninja -v) in the build log, and the device code they made
    archs = sorted(set(re.findall(r'code=(sm_\w+)', build_log.read_text())))
    sections = subprocess.run(['readelf', '-SW', so], capture_output=True, text=True).stdout
    check(bool(archs) and '.nv_fatbin' in sections,
          f'device code for {archs} (TORCH_CUDA_ARCH_LIST) in the .so')

if variant == 'opencv':
    pkg = subprocess.run(['pkg-config', '--modversion', 'opencv4'], capture_output=True, text=True)
    check(info['opencv_version'] == pkg.stdout.strip(),
          f'opencv_version {info["opencv_version"]} is pkg-config\'s opencv4')
    check(info['libjpeg'] is not None, f'libjpeg {info["libjpeg"]}')
else:
    check(info['opencv_version'] is None and info['libjpeg'] is None,
          'built without OpenCV and libjpeg')
    try:
        torch.ops.mmdet_ext.decode_image(torch.zeros(4, dtype=torch.uint8), 1)
        check(False, 'decode_image raises without OpenCV')
    except NotImplementedError as err:
        check('OpenCV' in str(err) and 'apt-get install' in str(err),
              'decode_image raises NotImplementedError naming OpenCV and what to install')
    check(_C.opencv_num_threads() is None, 'opencv_num_threads() is None')
sys.exit(1 if problems else 0)
EOF
    then
        log "$variant: FAILED checks"
        failed=1
    else
        log "$variant: all checks passed"
    fi
done
exit "$failed"
