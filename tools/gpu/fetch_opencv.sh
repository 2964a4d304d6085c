#!/usr/bin/env bash
# Downloads, on a machine that reaches PyPI and Debian's apt, what tools/gpu/build_opencv.sh
# builds the C++ OpenCV and provides libjpeg from on the GPU machine (no internet, no apt):
#   opencv-src.tar.gz  OpenCV 4.11.0's source, from PyPI's opencv-python-headless 4.11.0.86
#                      sdist, trimmed to what core, imgproc and imgcodecs need to build.
#   libjpeg.tar.gz     Debian bookworm's libjpeg62-turbo + libjpeg62-turbo-dev 1:2.1.5-2 (amd64),
#                      unpacked: the libjpeg Debian's own OpenCV links.
#
#   bash tools/gpu/fetch_opencv.sh [DEST]      # DEST defaults to .gpu (git-excluded)
#
# Downloads stay in build/gpu-fetch/ (git-ignored), checked against pinned SHA-256s, so a rerun
# reuses them (the sdist is 91 MB). With the same tar and gzip, the archives are byte-identical
# on every run (sorted, fixed owners and times). DEST travels with the repository (a lent GPU
# machine: carry .gpu, within its 64 MiB per call, wheels and working tree included), so this
# fails above 16 MiB.
set -euo pipefail

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
dest=${1:-$repo_root/.gpu}
cache=$repo_root/build/gpu-fetch
limit=$((16 * 1024 * 1024))
log() { printf '[fetch_opencv] %s\n' "$*"; }

opencv_pkg=opencv-python-headless
opencv_pkg_version=4.11.0.86
opencv_version=4.11.0
sdist=$cache/$opencv_pkg-$opencv_pkg_version.tar.gz
sdist_sha256=996eb282ca4b43ec6a3972414de0e2331f5d9cda2b41091a49739c19fb843798
jpeg_version=1:2.1.5-2
# A list, not a map: unpacked in this order, so the shared folders' times do not vary.
debs=(libjpeg62-turbo libjpeg62-turbo-dev)
declare -A deb_sha256=(
  [libjpeg62-turbo]=95ec30140789a342add8f8371ed018924de51b539056522b66f207b25cba9cad
  [libjpeg62-turbo-dev]=10485411f751c24472c43b28fe24ab6389fedb027d496bbc2c831496f750ab01
)
# apt-get download's file names: the epoch's ':' is written %3a.
deb_file() { printf '%s/%s_%s_amd64.deb' "$cache" "$1" "${jpeg_version/:/%3a}"; }

for tool in python3 apt-get apt-cache dpkg-deb sha256sum tar gzip; do
  command -v "$tool" >/dev/null || { log "$tool is missing"; exit 1; }
done
# True when $1 is already downloaded with SHA-256 $2; a wrong or partial copy is removed.
cached() {
  [ -f "$1" ] || return 1
  [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$2" ] && return 0
  log "$(basename "$1") has the wrong SHA-256: removed"
  rm -f "$1"
  return 1
}
# Writes directory $2/$3 as $1, byte-identical on every run: sorted, root-owned, no gzip name or
# time, and times clamped to the newest file's (directories emptied here would get today's).
pack() {
  local stamp
  stamp=$(find "$2/$3" -type f -printf '%T@\n' | sort -n | tail -n 1)
  tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@${stamp%.*}" --clamp-mtime \
    -C "$2" -cf - "$3" | gzip -9n >"$1.partial"
  mv "$1.partial" "$1"
}

mkdir -p "$cache" "$dest"
work=$(mktemp -d "$cache/stage.XXXXXX")
trap 'rm -rf "$work"' EXIT

# 1. The sdist. --no-binary for this package only: with :all:, pip would also build the sdist's
# build requirements (numpy) from source, as it prepares the sdist's metadata (it always does,
# even with --no-deps; --no-build-isolation would need scikit-build installed here).
if ! cached "$sdist" "$sdist_sha256"; then
  log "downloading $opencv_pkg==$opencv_pkg_version's sdist"
  python3 -m pip download --quiet --disable-pip-version-check --no-deps \
    --no-binary "$opencv_pkg" -d "$cache" "$opencv_pkg==$opencv_pkg_version"
  cached "$sdist" "$sdist_sha256" || { log "no $sdist with the pinned SHA-256"; exit 1; }
fi

# 2. Trim it. OpenCV's top CMakeLists.txt adds doc/ and data/ (their CMakeLists.txt only),
# cmake/ includes platforms/linux's flags and installs platforms/scripts' files; 3rdparty/ keeps
# the codecs build_opencv.sh builds from source (zlib, PNG, TIFF, WebP, JPEG 2000). Each
# module's test, perf, doc and misc (bindings) are not built there.
src_top=$opencv_pkg-$opencv_pkg_version/opencv
keep=(CMakeLists.txt COPYRIGHT LICENSE README.md cmake include platforms/linux platforms/scripts
      doc/CMakeLists.txt data/CMakeLists.txt 3rdparty/readme.txt
      3rdparty/{zlib,libpng,libtiff,libwebp,openjpeg} modules/{core,imgproc,imgcodecs})
opencv_dir=opencv-$opencv_version
mkdir -p "$work/$opencv_dir"
tar -xzf "$sdist" -C "$work/$opencv_dir" --strip-components=2 "${keep[@]/#/$src_top/}"
rm -rf "$work/$opencv_dir"/modules/*/{test,perf,doc,misc}
pack "$dest/opencv-src.tar.gz" "$work" "$opencv_dir"

# 3. libjpeg. apt checks the packages against the archive's signed index; the SHA-256 pins the
# exact files. The index is refreshed only when it does not list this version.
for pkg in "${debs[@]}"; do
  cached "$(deb_file "$pkg")" "${deb_sha256[$pkg]}" && continue
  if ! apt-cache show "$pkg:amd64=$jpeg_version" >/dev/null 2>&1; then
    log "apt does not list $pkg $jpeg_version: apt-get update"
    apt-get -qq update
  fi
  log "downloading $pkg $jpeg_version"
  # Sandbox user root: apt's own user (_apt) may not write into the checkout; only as root
  # does apt drop to it, and then warns and downloads as root anyway.
  (cd "$cache" && apt-get -qq -o APT::Sandbox::User=root download "$pkg:amd64=$jpeg_version")
  cached "$(deb_file "$pkg")" "${deb_sha256[$pkg]}" || { log "no $pkg with the pinned SHA-256"; exit 1; }
done
# Both into one tree, as installed. Not carried: the static library (nothing links it, and it
# is the largest file) and lintian's overrides (Debian's package checks).
jpeg_dir=libjpeg62-turbo
for pkg in "${debs[@]}"; do
  dpkg-deb -x "$(deb_file "$pkg")" "$work/$jpeg_dir"
done
rm -rf "$work/$jpeg_dir/usr/lib/x86_64-linux-gnu/libjpeg.a" "$work/$jpeg_dir/usr/share/lintian"
pack "$dest/libjpeg.tar.gz" "$work" "$jpeg_dir"

size=$(du -cb "$dest/opencv-src.tar.gz" "$dest/libjpeg.tar.gz" | tail -n 1 | cut -f1)
ls -l "$dest/opencv-src.tar.gz" "$dest/libjpeg.tar.gz"
log "$((size / 1024)) KiB in $dest"
if [ "$size" -gt "$limit" ]; then
  log "more than 16 MiB: too much to carry to a lent GPU machine next to the wheels"
  exit 1
fi
