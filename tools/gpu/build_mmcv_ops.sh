#!/usr/bin/env bash
# Builds mmcv 2.1.0 with its compiled ops from the carried source and installs it, detached.
#
#   bash tools/gpu/build_mmcv_ops.sh          # start the build in the background (or find it
#                                             # running, or installed) and return
#   bash tools/gpu/build_mmcv_ops.sh --wait   # the same, then wait for it and install it
#
# Why compiled ops at all: mmdet imports mmcv.ops.roi_align at the top of its mask structures,
# so neither mmdet's models and masks nor mmdet_ext import without mmcv's _ext module, and
# BitmapMasks.crop_and_resize and Mask R-CNN need its CUDA roi_align and nms on a GPU. There is
# no cp312 mmcv 2.1.0 wheel on PyPI; mmdet 3.3 refuses mmcv >= 2.2.
# Why detached (setsid): the CUDA build takes minutes, longer than a lent machine's 10-minute
# command limit allows together with the rest; it survives the calling shell, and a second call
# finds it running and waits again.
#
# With nvcc and a CUDA torch it builds the CUDA ops for TORCH_CUDA_ARCH_LIST (default 9.0, the
# H100) with MAX_JOBS (default 16) compilers; if that build fails it builds the CPU ops, so the
# measurements that need no mmcv CUDA kernel still run (the others say why they were skipped).
# Everything lives in build/gpu-mmcv/ (git-ignored; not carried, so it stays between calls):
# build.log, the wheel, and `result` (cuda | cpu | failed).
set -euo pipefail

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
wheels=${MMDET_EXT_GPU_WHEELS:-$repo_root/tools/gpu/wheels}
work=$repo_root/build/gpu-mmcv
log_file=$work/build.log
log() { printf '[build_mmcv_ops] %s\n' "$*"; }
mmcv_has_ops() { python3 -c "import mmcv.ops" 2>/dev/null; }
building() { [ -f "$work/pid" ] && kill -0 "$(cat "$work/pid")" 2>/dev/null; }

# One wheel build: $1 = cuda | cpu. Runs inside the detached process.
build_wheel() {
  local kind=$1 src=$work/src/mmcv-2.1.0
  rm -rf "$work/src" "$work/dist" && mkdir -p "$work/src" "$work/dist"
  tar -xzf "$wheels"/mmcv-2.1.0.tar.gz -C "$work/src"
  if [ "$kind" = cuda ]; then
    export FORCE_CUDA=1 TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0}
  else
    # mmcv's setup.py compiles CUDA whenever torch sees a GPU: hide it.
    export FORCE_CUDA=0 CUDA_VISIBLE_DEVICES=
  fi
  log "building mmcv 2.1.0 with $kind ops, MAX_JOBS=${MAX_JOBS:-16} ($(date +%T))"
  # --verbose: the compiler's lines reach build.log, and with them the progress --wait shows.
  (cd "$src" && MMCV_WITH_OPS=1 MAX_JOBS=${MAX_JOBS:-16} python3 -m pip wheel --verbose \
    --no-deps --no-build-isolation --no-index -w "$work/dist" .)
}

build_detached() {
  cd "$work"
  source "$repo_root/tools/gpu/build_env.sh"  # pkg_resources for mmcv's setup.py
  local kind=cpu
  if can_build_cuda; then
    kind=cuda
  fi
  if ! build_wheel "$kind"; then
    if [ "$kind" = cpu ]; then echo failed >"$work/result"; return 1; fi
    log "the CUDA build failed (errors above); building the CPU ops instead"
    kind=cpu
    build_wheel cpu || { echo failed >"$work/result"; return 1; }
  fi
  log "done ($(date +%T)): $(ls "$work"/dist/*.whl)"
  echo "$kind" >"$work/result"
}

if [ "${1:-}" = --detached ]; then
  build_detached
  exit
fi

mkdir -p "$work"
if mmcv_has_ops; then
  log "mmcv with compiled ops is installed"
  exit 0
fi
if ! building && ! ls "$work"/dist/mmcv-*.whl >/dev/null 2>&1; then
  [ -f "$wheels"/mmcv-2.1.0.tar.gz ] ||
    { log "no $wheels/mmcv-2.1.0.tar.gz: run tools/gpu/fetch_wheels.sh where PyPI is reachable"
      exit 1; }
  rm -f "$work/result"
  setsid nohup bash "${BASH_SOURCE[0]}" --detached >"$log_file" 2>&1 </dev/null &
  echo $! >"$work/pid"
  log "started in the background (pid $!), log: $log_file"
fi
[ "${1:-}" = --wait ] || exit 0

while building; do
  # ninja prints [done/total] per compiled file (pip indents it): how far it is.
  progress=$(grep -o '^ *\[[0-9]*/[0-9]*\]' "$log_file" | tail -n 1 | tr -d ' ' || true)
  log "building ${progress:-(preparing)} ... $(date +%T)"
  sleep 30
done
if [ "$(cat "$work/result" 2>/dev/null)" = failed ] ||
   ! ls "$work"/dist/mmcv-*.whl >/dev/null 2>&1; then
  tail -n 40 "$log_file"
  log "mmcv build failed; full log: $log_file"
  exit 1
fi
python3 -m pip install --quiet --no-index --no-deps --force-reinstall "$work"/dist/mmcv-*.whl
log "installed mmcv with $(cat "$work/result") ops"
