#!/usr/bin/env bash
# Installs everything mmdet_ext needs on a fresh Debian machine, then builds the plugin in place.
# Idempotent: a second run on the same machine reuses the cached mmcv wheel and takes seconds.
#
#   bash tools/install_deps.sh
#
# MMDET_EXT_CACHE (default ~/.cache/mmdet_ext) keeps the built mmcv wheel between runs.
set -euo pipefail

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache_dir=${MMDET_EXT_CACHE:-$HOME/.cache/mmdet_ext}
wheel_dir="$cache_dir/wheels"
mkdir -p "$wheel_dir"
export PIP_ROOT_USER_ACTION=ignore  # CI and fresh machines run as root; the warning is noise
pip_install() { python3 -m pip install --quiet --disable-pip-version-check "$@"; }
log() { printf '[install_deps] %s\n' "$*"; }

# 1. Native libraries for the C++ extension (OpenCV and libjpeg-turbo from Debian, found with
# pkg-config; decode_image calls libjpeg directly to refuse corrupt JPEG data; rapidjson, header-only,
# streams COCO jsons into the annotation store).
# libgl1/libglib2.0-0: the opencv-python wheel (required by mmengine) needs libGL.so.1, libgthread.
if ! pkg-config --exists opencv4 libjpeg RapidJSON || ! ldconfig -p | grep -q "libGL.so.1 "; then
  log "installing Debian libopencv-dev, libjpeg62-turbo-dev, rapidjson-dev"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends libopencv-dev libjpeg62-turbo-dev rapidjson-dev \
    pkg-config libgl1 libglib2.0-0 >/dev/null
fi

# 2. torch first, pinned, so nothing later can pull a CUDA build from the registry.
#    No torchvision: there is no CPU build of it here, and the CUDA one breaks mmengine's env probe.
pip_install "torch==2.13.0"
# One cv2 distribution only: mmengine requires opencv-python, pinned to 4.x (mmcv 2.1 predates 5.x).
pip_install "setuptools<82" wheel ninja "numpy<2.3" "opencv-python==4.11.0.86" "mmengine==0.10.7" \
  pycocotools psutil pytest hypothesis matplotlib packaging Pillow build
# lvis (also the reference for tests/test_lazy_lvis_dataset.py: mmdet's LVISV1Dataset imports it)
# and the COCO/LVIS evaluator backends, each held to the parity suite: tools/evaluators.txt.
pip_install -r "$repo_root/tools/evaluators.txt"

# 3. mmcv 2.1.0 with compiled CPU ops, built from source once and cached as a wheel.
#    Its setup.py imports pkg_resources (setuptools<82) and needs the installed torch (no isolation).
mmcv_has_ops() { python3 -c "import mmcv, mmcv.ops; assert mmcv.__version__ == '2.1.0'" 2>/dev/null; }
if ! mmcv_has_ops; then
  mmcv_wheel=$(ls "$wheel_dir"/mmcv-2.1.0-*.whl 2>/dev/null | head -n 1 || true)
  if [ -z "$mmcv_wheel" ]; then
    log "building mmcv 2.1.0 with CPU ops from source (about 10-15 min on 2 cores)"
    MMCV_WITH_OPS=1 FORCE_CUDA=0 MAX_JOBS=${MAX_JOBS:-2} python3 -m pip wheel --no-deps \
      --no-build-isolation --no-binary mmcv --wheel-dir "$wheel_dir" "mmcv==2.1.0"
    mmcv_wheel=$(ls "$wheel_dir"/mmcv-2.1.0-*.whl | head -n 1)
  fi
  # --no-deps: the wheel's cv2 requirement depends on what was installed when it was built; its
  # other requirements (addict, mmengine, numpy, packaging, Pillow, pyyaml, yapf) are installed above.
  log "installing $mmcv_wheel"
  pip_install --no-deps "$mmcv_wheel"
fi

# 4. mmdet itself (pure Python); it asserts mmcv < 2.2.
pip_install "mmdet==3.3.0"
python3 - <<'PY'
import importlib.util, sys
if importlib.util.find_spec('torchvision') is not None:
    sys.exit('torchvision is installed; remove it (pip uninstall torchvision): it breaks the Runner')
import torch
if torch.__version__.split('+')[0] != '2.13.0':
    sys.exit(f'torch {torch.__version__} found; mmdet_ext expects the local 2.13.0 CPU build')
PY

# 5. The plugin, built in place (editable) so tools/ and tests/ use this checkout. Skipped when the
#    installed mmdet_ext already is this checkout and its build is current: importing it checks the
#    compiled sources' hash (run from / so the installed package, not the cwd, is what resolves).
cd "$repo_root"
if (cd / && python3 -c "import os, sys, mmdet_ext
sys.exit(os.path.dirname(os.path.abspath(mmdet_ext.__file__)) != os.path.join('$repo_root', 'mmdet_ext'))") 2>/dev/null; then
  log "mmdet_ext is installed from this checkout and up to date"
else
  log "building mmdet_ext"
  python3 -m pip install --quiet --no-deps --no-build-isolation -e .
fi
log "done"
