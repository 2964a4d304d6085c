#!/usr/bin/env bash
# Builds, offline, the C++ OpenCV (core, imgproc, imgcodecs) and provides the libjpeg that
# mmdet_ext's image decoders need, on a machine without them and without apt or internet (the
# lent GPU machine). Run from anywhere, with bash (not sourced), then source the env file it writes:
#
#   bash tools/gpu/build_opencv.sh && source build/gpu-opencv/env.sh
#   python3 -m pip install --no-deps --no-build-isolation -e .
#
# env.sh exports PKG_CONFIG_PATH (opencv4.pc, libjpeg.pc: what setup.py asks pkg-config for) and
# LD_LIBRARY_PATH (the libraries are not in the loader's default paths, and mmdet_ext's _C.so
# has no rpath to them).
#
# Inputs, carried as files (MMDET_EXT_GPU_DIR, default .gpu/, git-excluded), written by
# tools/gpu/fetch_opencv.sh where PyPI and Debian's apt are reachable:
#   opencv-src.tar.gz  OpenCV 4.11.0's source (from PyPI's opencv-python-headless 4.11.0.86 sdist)
#                      trimmed to what these three modules need: modules/{core,imgproc,imgcodecs}
#                      without tests, cmake/, include/, licence, and the bundled codecs
#                      3rdparty/{zlib,libpng,libtiff,libwebp,openjpeg}.
#   libjpeg.tar.gz     Debian bookworm's libjpeg62-turbo + libjpeg62-turbo-dev 1:2.1.5-2 (amd64),
#                      `dpkg -x`: the libjpeg Debian's OpenCV links, so OpenCV and mmdet_ext's
#                      strict JPEG decoder share one libjpeg, as with the packages on Debian.
# Output, all under build/gpu-opencv/ (git-ignored): src/, libjpeg/, cmake-build/, prefix/, env.sh.
# Each step is skipped when already done, so re-running is cheap. OPENCV_JOBS: ninja's -j (8).
if [[ "${BASH_SOURCE[0]}" != "$0" ]]; then
  # Sourced, `set -e` would end the caller's shell on any error: refuse instead.
  echo "run it with bash, then: source build/gpu-opencv/env.sh" >&2
  return 1
fi
set -euo pipefail

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
carried=${MMDET_EXT_GPU_DIR:-$repo_root/.gpu}
out=$repo_root/build/gpu-opencv
src=$out/src
jpeg=$out/libjpeg
cmake_build=$out/cmake-build
prefix=$out/prefix
log() { printf '[opencv] %s\n' "$*"; }
SECONDS=0

# The carried libjpeg is an amd64 build; anything else needs its own.
[ "$(uname -m)" = x86_64 ] || { log "the carried libjpeg is for x86-64, not $(uname -m)"; exit 1; }
for tool in cmake ninja pkg-config; do
  command -v "$tool" >/dev/null || { log "$tool is missing"; exit 1; }
done
mkdir -p "$out"

# 1. libjpeg: unpack, then point its .pc at where it now lies. Debian's .pc says /usr and leaves
# the multiarch jconfig.h (include/x86_64-linux-gnu/) to the compiler's default search path,
# which a relocated copy is not on: both include dirs go into Cflags.
if [ ! -f "$jpeg/.unpacked" ]; then
  [ -f "$carried/libjpeg.tar.gz" ] || { log "no $carried/libjpeg.tar.gz"; exit 1; }
  rm -rf "$jpeg" && mkdir -p "$jpeg"
  tar -xzf "$carried/libjpeg.tar.gz" -C "$jpeg" --strip-components=1
  touch "$jpeg/.unpacked"
fi
jpeg_inc=$jpeg/usr/include
jpeg_lib=$jpeg/usr/lib/x86_64-linux-gnu
jpeg_pc=$jpeg_lib/pkgconfig/libjpeg.pc
# Rewritten every run (cheap), so a moved checkout gets correct paths.
sed -i -e "s|^prefix=.*|prefix=$jpeg/usr|" \
  -e 's|^exec_prefix=.*|exec_prefix=${prefix}|' \
  -e 's|^libdir=.*|libdir=${prefix}/lib/x86_64-linux-gnu|' \
  -e 's|^includedir=.*|includedir=${prefix}/include|' \
  -e 's|^Cflags:.*|Cflags: -I${includedir} -I${includedir}/x86_64-linux-gnu|' "$jpeg_pc"

# 2. OpenCV's source (not needed where prefix/ was built elsewhere and carried: see step 3).
if [ ! -f "$prefix/.installed" ] && [ ! -f "$src/CMakeLists.txt" ]; then
  [ -f "$carried/opencv-src.tar.gz" ] || { log "no $carried/opencv-src.tar.gz"; exit 1; }
  rm -rf "$src" && mkdir -p "$src"
  tar -xzf "$carried/opencv-src.tar.gz" -C "$src" --strip-components=1
fi

# 3. Configure, build, install: skipped once installed (the stamp is written last).
if [ ! -f "$prefix/.installed" ]; then
  # Only the three modules. JPEG from the carried libjpeg62 (its multiarch jconfig.h dir via
  # the compiler flags: OpenCV and its libtiff add only JPEG_INCLUDE_DIR). PNG, TIFF, WebP and
  # JPEG 2000 from the bundled sources (carried): mmdet_ext reads all of these
  # (mmdet_ext/io/image_formats.py), as Debian's OpenCV does, and its loading tests decode each.
  # Everything that would download (IPP, ITT's binaries, ADE...), find optional system
  # libraries, or build what we do not need is off: the machine is offline, and the result must
  # not depend on what else it has installed.
  # OPENCV_VCSVERSION: else OpenCV runs `git describe` and reports the enclosing repository's.
  # CPU_DISPATCH: OpenCV's x86-64 default less AVX512_SKX. A build on the GPU machine (gcc 13.3)
  # stopped at modules/core's matmul.avx512_skx.cpp (the error was not kept); the AVX2 variants
  # serve AVX-512 CPUs too. The baseline stays OpenCV's default.
  version=$(sed -n 's/^#define CV_VERSION_\(MAJOR\|MINOR\|REVISION\) *\([0-9]*\).*/\2/p' \
    "$src/modules/core/include/opencv2/core/version.hpp" | paste -sd.)
  cmake_args=(
    -DCMAKE_BUILD_TYPE=Release -DOPENCV_VCSVERSION="$version"
    -DCPU_DISPATCH="SSE4_1;SSE4_2;AVX;FP16;AVX2"
    -DCMAKE_INSTALL_PREFIX="$prefix" -DCMAKE_INSTALL_LIBDIR=lib
    -DBUILD_LIST=core,imgproc,imgcodecs
    -DBUILD_SHARED_LIBS=ON -DOPENCV_GENERATE_PKGCONFIG=ON
    -DWITH_JPEG=ON -DBUILD_JPEG=OFF
    -DJPEG_INCLUDE_DIR="$jpeg_inc" -DJPEG_LIBRARY="$jpeg_lib/libjpeg.so"
    -DCMAKE_C_FLAGS="-I$jpeg_inc/x86_64-linux-gnu"
    -DCMAKE_CXX_FLAGS="-I$jpeg_inc/x86_64-linux-gnu"
    -DWITH_PNG=ON -DBUILD_PNG=ON -DBUILD_ZLIB=ON -DWITH_ZLIB_NG=OFF -DWITH_SPNG=OFF
    -DWITH_TIFF=ON -DBUILD_TIFF=ON -DWITH_WEBP=ON -DBUILD_WEBP=ON
    -DWITH_OPENJPEG=ON -DBUILD_OPENJPEG=ON -DWITH_JASPER=OFF -DWITH_OPENEXR=OFF
    -DWITH_AVIF=OFF -DWITH_JPEGXL=OFF -DWITH_IMGCODEC_GIF=OFF -DWITH_GDAL=OFF -DWITH_GDCM=OFF
    -DWITH_IPP=OFF -DWITH_ITT=OFF -DWITH_OPENCL=OFF -DWITH_TBB=OFF -DWITH_OPENMP=OFF
    -DWITH_LAPACK=OFF -DWITH_EIGEN=OFF -DWITH_PROTOBUF=OFF -DWITH_FLATBUFFERS=OFF
    -DWITH_ADE=OFF -DWITH_QUIRC=OFF -DWITH_OPENVX=OFF -DWITH_VULKAN=OFF
    -DWITH_CUDA=OFF -DWITH_CUDNN=OFF -DWITH_NVCUVID=OFF -DWITH_NVCUVENC=OFF
    -DWITH_FFMPEG=OFF -DWITH_GSTREAMER=OFF -DWITH_V4L=OFF -DWITH_1394=OFF -DWITH_OBSENSOR=OFF
    -DWITH_GTK=OFF -DWITH_QT=OFF -DWITH_OPENGL=OFF -DWITH_VTK=OFF -DWITH_VA=OFF
    -DWITH_VA_INTEL=OFF -DWITH_WAYLAND=OFF
    -DBUILD_TESTS=OFF -DBUILD_PERF_TESTS=OFF -DBUILD_EXAMPLES=OFF -DBUILD_DOCS=OFF
    -DBUILD_opencv_apps=OFF -DBUILD_JAVA=OFF -DBUILD_opencv_python2=OFF
    -DBUILD_opencv_python3=OFF -DBUILD_opencv_js=OFF -DINSTALL_C_EXAMPLES=OFF
    -DINSTALL_PYTHON_EXAMPLES=OFF -DINSTALL_TESTS=OFF
  )
  # A build folder configured with other arguments (an earlier version of this script) is
  # configured again: else its cache, AVX-512 variants included, would be built as it is.
  args_file=$cmake_build/mmdet_ext_cmake_args.txt
  args_now=$(printf '%s\n' "${cmake_args[@]}")
  if [ ! -f "$cmake_build/build.ninja" ] || [ ! -f "$args_file" ] ||
     [ "$(<"$args_file")" != "$args_now" ]; then
    log "configuring (log: $out/cmake.log)"
    rm -f "$args_file"
    cmake -S "$src" -B "$cmake_build" -G Ninja "${cmake_args[@]}" >"$out/cmake.log" 2>&1 ||
      { tail -40 "$out/cmake.log"; log "cmake failed"; exit 1; }
    # Offline, a download fails (or, on a machine online, would fetch something unchecked):
    # OpenCV logs each attempt in CMakeDownloadLog.txt, whose lines are all comments otherwise.
    if grep -v '^#' "$cmake_build/CMakeDownloadLog.txt" 2>/dev/null | grep -q .; then
      cat "$cmake_build/CMakeDownloadLog.txt"
      log "configure tried to download something (above): turn that feature off"
      rm -f "$cmake_build/build.ninja"
      exit 1
    fi
    grep -E '^-- +(Baseline|Dispatched code generation|ZLib|JPEG|PNG|TIFF|WEBP|JPEG 2000|To be built):' \
      "$out/cmake.log" || true
    printf '%s\n' "$args_now" >"$args_file"
  fi
  log "building with ninja -j ${OPENCV_JOBS:-8}"
  ninja -C "$cmake_build" -j "${OPENCV_JOBS:-8}" >"$out/ninja.log" 2>&1 ||
    { tail -40 "$out/ninja.log"; log "build failed (log: $out/ninja.log)"; exit 1; }
  ninja -C "$cmake_build" install >"$out/install.log" 2>&1 ||
    { tail -20 "$out/install.log"; log "install failed"; exit 1; }
  touch "$prefix/.installed"
  log "built and installed into $prefix in ${SECONDS} s"
else
  log "already installed in $prefix"
fi

opencv_pc_dir=$(dirname "$(find "$prefix" -name opencv4.pc | head -1)")
# A prefix built on another machine (the 2-core CI-class machine, carried as
# build/gpu-opencv/{prefix,libjpeg}: no OpenCV build on the GPU machine's clock) names that
# machine's path: point its .pc at where it lies now (the other paths are relative to it).
sed -i "s|^prefix=.*|prefix=$prefix|" "$opencv_pc_dir/opencv4.pc"
opencv_lib=$(dirname "$(find "$prefix" -name 'libopencv_core.so' | head -1)")

# 4. The caller's environment: prepended (ours first, before any system copy), each only once.
cat >"$out/env.sh" <<EOF
# Written by tools/gpu/build_opencv.sh: source it before building or importing mmdet_ext.
_mmdet_ext_prepend() {
  case ":\${!1:-}:" in *":\$2:"*) ;; *) export "\$1=\$2\${!1:+:\${!1}}" ;; esac
}
_mmdet_ext_prepend PKG_CONFIG_PATH "$jpeg_lib/pkgconfig"
_mmdet_ext_prepend PKG_CONFIG_PATH "$opencv_pc_dir"
_mmdet_ext_prepend LD_LIBRARY_PATH "$jpeg_lib"
_mmdet_ext_prepend LD_LIBRARY_PATH "$opencv_lib"
unset -f _mmdet_ext_prepend
EOF
# Checks that pkg-config, restricted to these two folders, finds both.
PKG_CONFIG_LIBDIR="$opencv_pc_dir:$jpeg_lib/pkgconfig" pkg-config --exists opencv4 libjpeg ||
  { log "pkg-config finds no opencv4 + libjpeg in $opencv_pc_dir, $jpeg_lib/pkgconfig"; exit 1; }
log "opencv4 $(PKG_CONFIG_LIBDIR="$opencv_pc_dir" pkg-config --modversion opencv4)," \
  "libjpeg $(PKG_CONFIG_LIBDIR="$jpeg_lib/pkgconfig" pkg-config --modversion libjpeg);" \
  "now: source $out/env.sh"
