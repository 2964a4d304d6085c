#!/usr/bin/env bash
# Downloads, on a machine that reaches PyPI, what tools/gpu/run.sh installs on the GPU machine
# (which has no internet): cp312 manylinux wheels of tools/gpu/requirements.txt, mmcv 2.1.0's
# source (no cp312 wheel exists; build_mmcv_ops.sh builds it there) and setuptools 81 (mmcv's
# setup.py and mmengine import pkg_resources, which setuptools 82 dropped). No torch,
# torchvision or their nvidia-* wheels: the image has its own. nvidia-nvjpeg is in
# requirements.txt: torch does not bring it, and the build needs its nvjpeg.h.
#
#   bash tools/gpu/fetch_wheels.sh [DEST]      # DEST defaults to tools/gpu/wheels (git-ignored)
#
# The folder travels with the repository (carried as tools/gpu/wheels): a lent GPU machine takes
# at most 64 MiB per call, working tree included, so this fails above 64 MiB.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
dest=${1:-$here/wheels}
limit=$((64 * 1024 * 1024))
log() { printf '[fetch_wheels] %s\n' "$*"; }
download() {
  python3 -m pip download --quiet --disable-pip-version-check --no-deps -d "$dest" "$@"
}

mkdir -p "$dest"
# One version of each package: with two, pip's offline install refuses the folder.
rm -f "$dest"/*.whl "$dest"/*.tar.gz
target=(--only-binary=:all: --python-version 3.12 --implementation cp
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64
        --platform manylinux2014_x86_64)
download "${target[@]}" -r "$here/requirements.txt"
download "${target[@]}" "setuptools==81.0.0"
# pip prepares the sdist's metadata even with --no-deps, running its setup.py, which imports
# pkg_resources: in an isolated build env (the newest setuptools, 82+) that fails, so it runs
# with this machine's setuptools (tools/install_deps.sh pins one that has pkg_resources).
download --no-build-isolation --no-binary=:all: "mmcv==2.1.0"

size=$(du -cb "$dest"/*.whl "$dest"/*.tar.gz | tail -n 1 | cut -f1)
ls -l "$dest"
log "$(ls "$dest" | wc -l) files, $((size / 1024)) KiB in $dest"
if [ "$size" -gt "$limit" ]; then
  log "more than 64 MiB: a lent GPU machine cannot take them in one call"
  exit 1
fi
