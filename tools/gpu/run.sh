#!/usr/bin/env bash
# The GPU measurements in one command, from the repository root of a machine with a GPU:
#
#   bash tools/gpu/run.sh [harness options: --repeat N, --output FILE, --smoke]
#
# 1. installs, offline, the carried wheels (tools/gpu/wheels, made by fetch_wheels.sh) of what
#    the machine lacks: only the ones not installed at the pinned version;
# 2. starts building mmcv 2.1.0's compiled ops, detached (build_mmcv_ops.sh);
# 3. builds mmdet_ext in place meanwhile, with its CUDA sources when torch is a CUDA build and
#    CUDA_HOME has nvcc (setup.py's own test), then waits for mmcv and installs it;
# 4. runs tools/gpu/harness.py: one table on stdout, and benchmarks/results/gpu.md on CUDA.
#
# Every step skips what is already done, so after an interruption (a 10-minute command limit,
# say) running it again carries on: the mmcv build goes on in the background meanwhile.
set -euo pipefail

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$repo_root"
wheels=${MMDET_EXT_GPU_WHEELS:-$repo_root/tools/gpu/wheels}
export MMDET_EXT_GPU_WHEELS=$wheels PIP_ROOT_USER_ACTION=ignore PYTHONUNBUFFERED=1
log() { printf '[gpu] %s\n' "$*"; }
SECONDS=0

# 1. Carried wheels. --no-deps: mmengine and mmcv ask for opencv-python, and the GPU image's
# opencv-python-headless provides the same cv2; everything else they need is in
# requirements.txt or already in the image.
missing=$(python3 - tools/gpu/requirements.txt <<'PY'
import sys
from importlib import metadata

for line in open(sys.argv[1]):
    requirement = line.split('#')[0].strip()
    if not requirement:
        continue
    name, _, version = requirement.partition('==')
    try:
        if metadata.version(name) == version:
            continue
    except metadata.PackageNotFoundError:
        pass
    print(requirement)
PY
)
if [ -n "$missing" ]; then
  [ -d "$wheels" ] ||
    { log "no $wheels: run tools/gpu/fetch_wheels.sh where PyPI is reachable"; exit 1; }
  log "installing from $wheels: $(echo $missing)"
  # shellcheck disable=SC2086  # one argument per requirement
  python3 -m pip install --quiet --no-index --no-deps --find-links "$wheels" $missing
fi
source tools/gpu/build_env.sh  # pkg_resources for mmengine and mmcv's setup.py

# 2. mmcv with compiled ops (mmdet and mmdet_ext import mmcv.ops), in the background.
bash tools/gpu/build_mmcv_ops.sh

# 3. mmdet_ext, in place (editable), so the harness measures this checkout; then mmcv.
# setup.py decides whether to compile CUDA (mmdet_ext/_build_choice.py), as everywhere else.
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0}
log "building mmdet_ext: $(python3 mmdet_ext/_build_choice.py)"
python3 -m pip install --quiet --no-deps --no-build-isolation -e .
bash tools/gpu/build_mmcv_ops.sh --wait
log "installs and builds took ${SECONDS} s"
# MMDET_EXT_GPU_BUILD_ONLY=1: stop here (a session that runs the tests before the measurements).
[ "${MMDET_EXT_GPU_BUILD_ONLY:-0}" = 1 ] && exit 0

# 4. The measurements.
python3 tools/gpu/harness.py "$@"
log "total ${SECONDS} s"
