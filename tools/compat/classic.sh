#!/usr/bin/env bash
# The classic stack, as mmdet 3.3's install guide leaves users: Python 3.11, torch 2.1.2 from the
# registry (its CUDA 12.1 build; CPU ops only without a GPU), mmcv 2.1.0 built from source with its
# ops, mmengine 0.10.7, mmdet 3.3.0. Builds (or reuses) that venv, builds the plugin against it in
# a copy of this checkout, runs the test subset (tools/compat/subset.txt), README command 1 cut to
# one epoch and pip's dry run of the plugin's wheel into the venv. Prints the time of each step.
#
#   bash tools/compat/classic.sh [deps|plugin|all]     (default all; deps: the venv only)
#
# MMDET_EXT_CACHE (default ~/.cache/mmdet_ext): the venv in venvs/classic, the mmcv wheel built
# against torch 2.1.2 in wheels/torch2.1.2/ (wheels/ itself holds the main stack's).
# COMPAT_PYTHON (default python3.11) makes the venv. Results go to venvs/classic/results/.
set -euo pipefail

COMPAT_STACK=classic
# shellcheck source=tools/compat/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

what=${1:-all}
cache_dir=${MMDET_EXT_CACHE:-$HOME/.cache/mmdet_ext}
venv="$cache_dir/venvs/classic"
wheel_dir="$cache_dir/wheels/torch2.1.2"
results="$venv/results"
py="$venv/bin/python"
mkdir -p "$wheel_dir"
export PIP_ROOT_USER_ACTION=ignore MAX_JOBS=${MAX_JOBS:-2}
# The machine's pip configuration may offer local wheels (find-links) of another torch; this venv
# takes everything from the package index, pinned by the constraints below.
unset PIP_FIND_LINKS
export PIP_CONFIG_FILE=/dev/null

build_mmcv() {
  # No GPU: mmcv builds its CPU ops. --no-build-isolation: against this venv's torch.
  # --no-cache-dir: pip's wheel cache keys a wheel built from an sdist by the sdist alone, so it
  # would hand back an mmcv compiled against another torch (undefined symbols at import).
  MMCV_WITH_OPS=1 FORCE_CUDA=0 compat_pip "$py" wheel --no-cache-dir --no-deps \
    --no-build-isolation --no-binary mmcv --wheel-dir "$wheel_dir" "mmcv==2.1.0"
}

deps() {
  compat_timed venv compat_make_venv "${COMPAT_PYTHON:-python3.11}" "$venv"
  # Every install below is held to the stack's versions: torch 2.1.2 was built against numpy 1;
  # mmengine 0.10.7 and mmcv's setup.py import pkg_resources (setuptools < 82); mmcv 2.1 predates
  # OpenCV 5; vernier's pyarrow: 26.0.1 refuses numpy 1 at import (every vernier parity test
  # failed, 2026-12-04), 21.0.0 imports with numpy 1.26 and vernier passes them.
  cat >"$venv/constraints.txt" <<'PINS'
torch==2.1.2
numpy<2
pyarrow<22
setuptools<82
opencv-python==4.11.0.86
mmengine==0.10.7
mmcv==2.1.0
mmdet==3.3.0
PINS
  export PIP_CONSTRAINT="$venv/constraints.txt"
  compat_timed torch compat_pip "$py" install --quiet "torch==2.1.2" "numpy<2"
  compat_timed tools compat_pip "$py" install --quiet "setuptools<82" wheel ninja build \
    "opencv-python==4.11.0.86" "mmengine==0.10.7" pycocotools psutil pytest hypothesis \
    matplotlib packaging Pillow
  compat_timed evaluators compat_pip "$py" install --quiet -r "$COMPAT_REPO/tools/evaluators.txt"
  if ! "$py" -c "import mmcv, mmcv.ops; assert mmcv.__version__ == '2.1.0'" 2>/dev/null; then
    if ! ls "$wheel_dir"/mmcv-2.1.0-*.whl >/dev/null 2>&1; then
      compat_timed mmcv-build build_mmcv
    fi
    compat_timed mmcv-install compat_pip "$py" install --quiet --no-deps --force-reinstall \
      "$(ls "$wheel_dir"/mmcv-2.1.0-*.whl)"
  fi
  compat_timed mmdet compat_pip "$py" install --quiet "mmdet==3.3.0"
  unset PIP_CONSTRAINT
  "$py" - <<'PY'
import importlib.util
import sys

import mmcv
import mmcv.ops  # noqa: F401  (mmdet.models needs the compiled ops)
import mmdet
import mmengine
import numpy
import torch

if importlib.util.find_spec('torchvision') is not None:
    sys.exit('torchvision is installed in the classic venv; it breaks mmengine\'s Runner')
print(f'python {sys.version.split()[0]}, torch {torch.__version__}, numpy {numpy.__version__}, '
      f'mmengine {mmengine.__version__}, mmcv {mmcv.__version__}, mmdet {mmdet.__version__}')
PY
}

plugin() {
  local src="$venv/src"
  mkdir -p "$results"
  compat_timed copy-checkout compat_copy_checkout "$src"
  compat_timed plugin-build compat_build_plugin "$py" "$src"
  (cd "$src" && PYTHONPATH="$src" "$py" -m mmdet_ext.info) | tee "$results/info.txt" || true
  compat_timed subset compat_run_subset "$py" "$src" "$results/subset.xml" \
    2>&1 | tee "$results/subset.txt" || true
  compat_timed demo-1-epoch compat_demo "$py" "$src" "$results/demo_work_dir" \
    >"$results/demo.log" 2>&1 || true
  tail -n 5 "$results/demo.log"
  compat_timed wheel compat_build_wheel "$py" "$src" "$results/dist" || true
  compat_timed dry-run compat_dry_run "$py" "$(ls "$results"/dist/mmdet_ext-*.whl)" \
    "$results/dry_run.json" 2>&1 | tee "$results/dry_run.txt" || true
}

COMPAT_TIMINGS="$cache_dir/venvs/classic-timings.tsv"
mkdir -p "$(dirname "$COMPAT_TIMINGS")"
printf '# run started %s\n' "$(date -u +%FT%TZ)" >>"$COMPAT_TIMINGS"
case "$what" in
  deps) deps ;;
  plugin) plugin ;;
  all) deps && plugin ;;
  *) echo "usage: $0 [deps|plugin|all]" >&2; exit 2 ;;
esac
compat_log "timings: $COMPAT_TIMINGS"
