#!/usr/bin/env bash
# The maintained-fork stack (issue 28, matrix column b): Python 3.11, torch 2.13.0 (local CPU
# wheel), onedl-mmengine 0.10.12, onedl-mmcv 2.3.6 built from its sdist with CPU ops,
# onedl-mmdetection 3.5.1, in its own venv; then the plugin built in a copy of this checkout,
# a subset of the suite, README command 1 cut to one epoch, and a dry-run install of our wheel.
#
#   bash tools/compat/fork.sh                  # every step
#   bash tools/compat/fork.sh plugin subset    # only the named steps (venv already built)
#
# Steps: venv torch mmengine mmcv mmdet tools plugin subset demo dryrun; each prints its wall
# time. mmcv builds onedl-mmcv once (about 15-40 min on 2 cores), later runs take the cached wheel.
# FORK_VENV (default ~/.cache/mmdet_ext/venvs/fork); the onedl-mmcv wheel is cached in
# ~/.cache/mmdet_ext/wheels/onedl/ (not beside CI's upstream mmcv wheel). MAX_JOBS (default 2).
# Never touches the system python3.
set -euo pipefail

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=tools/compat/lib.sh
source "$repo_root/tools/compat/lib.sh"
cache_dir=${MMDET_EXT_CACHE:-$HOME/.cache/mmdet_ext}
venv=${FORK_VENV:-$cache_dir/venvs/fork}
wheel_dir=$cache_dir/wheels/onedl
src=$venv/src
results=$venv/results
py=$venv/bin/python
export PIP_ROOT_USER_ACTION=ignore PIP_DISABLE_PIP_VERSION_CHECK=1
export MAX_JOBS=${MAX_JOBS:-2}
pip_install() { "$py" -m pip install --quiet "$@"; }

step_venv() {
  compat_make_venv python3.11 "$venv"
  "$py" -c 'import sys; assert sys.version_info[:2] == (3, 11), sys.version'
}

# Exactly torch==2.13.0: pip's find-links holds the local CPU wheel; nothing else is pulled.
step_torch() { pip_install "torch==2.13.0"; }

# onedl-mmcv's setup.py compiles its ops against the installed torch (no build isolation), and
# its build-system wants setuptools>=80 and packaging>=24.2.
step_mmengine() {
  pip_install "setuptools>=80" wheel ninja "packaging>=24.2" "onedl-mmengine==0.10.12"
}

step_mmcv() {
  local wheel
  wheel=$(ls "$wheel_dir"/onedl_mmcv-2.3.6-*.whl 2>/dev/null | head -n 1 || true)
  if [ -z "$wheel" ]; then
    mkdir -p "$wheel_dir"
    FORCE_CUDA=0 "$py" -m pip wheel --no-deps --no-build-isolation --no-binary onedl-mmcv \
      --wheel-dir "$wheel_dir" "onedl-mmcv==2.3.6"
    wheel=$(ls "$wheel_dir"/onedl_mmcv-2.3.6-*.whl | head -n 1)
  fi
  pip_install "$wheel"
}

step_mmdet() {
  pip_install "onedl-mmdetection==3.5.1"
  "$py" -c 'import mmcv.ops, mmdet, mmengine; print("mmengine", mmengine.__version__,
"mmcv", mmcv.__version__, "mmdet", mmdet.__version__)'
}

step_tools() {
  pip_install pycocotools psutil pytest hypothesis build
  pip_install -r "$repo_root/tools/evaluators.txt"
  if "$py" -c 'import torchvision' 2>/dev/null; then
    echo 'torchvision is installed in the fork venv; it breaks the Runner' >&2
    return 1
  fi
  "$py" -m pip list --format=freeze > "$venv/pip-freeze.txt"
}

step_plugin() {
  compat_copy_checkout "$src"
  compat_build_plugin "$py" "$src"
}

step_subset() {
  mkdir -p "$results"
  compat_run_subset "$py" "$src" "$results/subset.xml" 2>&1 | tee "$results/subset.log"
}

step_demo() {
  mkdir -p "$results"
  compat_demo "$py" "$src" "$results/demo" 2>&1 | tee "$results/demo.log"
}

# Our wheel into the fork venv, dry run: the report must replace no installed distribution.
step_dryrun() {
  mkdir -p "$results"
  compat_build_wheel "$py" "$src" "$src/dist"
  compat_dry_run "$py" "$src"/dist/*.whl "$results/dryrun.json"
}

steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(venv torch mmengine mmcv mmdet tools plugin subset demo dryrun)
export COMPAT_STACK=fork COMPAT_TIMINGS=$cache_dir/venvs/fork-timings.tsv
failed=()
for s in "${steps[@]}"; do
  case $s in
    subset | demo | dryrun) compat_timed "$s" "step_$s" || failed+=("$s") ;;  # checks: go on
    *) compat_timed "$s" "step_$s" ;;  # the environment: nothing after it can run without it
  esac
done
if [ ${#failed[@]} -gt 0 ]; then
  printf '[compat] failed: %s\n' "${failed[*]}"
  exit 1
fi
