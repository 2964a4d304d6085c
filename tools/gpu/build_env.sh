# Sourced by run.sh and build_mmcv_ops.sh (which set repo_root and wheels): what building and
# importing mmcv / mmdet_ext needs from this machine.

# Whether CUDA code can be compiled here: a CUDA build of torch and nvcc.
can_build_cuda() {
  command -v nvcc >/dev/null && python3 -c "import torch, sys; sys.exit(not torch.version.cuda)"
}

# `import pkg_resources`: setuptools 82 dropped it, and both mmcv 2.1.0's setup.py and
# mmengine 0.10.7 (is_installed, get_installed_path: how `mmdet::` config paths are found)
# import it. When the machine's setuptools lacks it, the carried setuptools 81 is unpacked into
# a private folder (git-ignored build/) put first on PYTHONPATH; the machine's stays installed.
if ! python3 -c "import pkg_resources" 2>/dev/null; then
  private_setuptools=$repo_root/build/gpu-setuptools
  if [ ! -d "$private_setuptools/pkg_resources" ]; then
    python3 -m pip install --quiet --no-index --no-deps --target "$private_setuptools" \
      "$wheels"/setuptools-*.whl
  fi
  export PYTHONPATH=$private_setuptools${PYTHONPATH:+:$PYTHONPATH}
fi

# The compiler. The GPU image's default C++ compiler (/opt/gcc/bin/g++, seen 2026-11-25) links
# libstdc++ statically: an extension built with it carries a second libstdc++, and its error
# messages crash the process (mmdet_ext/_own_libstdcxx.py; setup.py refuses such a build). The
# distribution's gcc links the shared libstdc++ that torch uses; nvcc takes CC as its host compiler.
if [ -x /usr/bin/g++ ] && [ -x /usr/bin/gcc ]; then
  export CC=/usr/bin/gcc CXX=/usr/bin/g++
fi
