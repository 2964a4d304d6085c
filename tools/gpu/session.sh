#!/usr/bin/env bash
# Everything a lent GPU machine is for, in priority order, within a deadline, resumable:
#
#   bash tools/gpu/session.sh SECONDS        # e.g. 540 in a call of timeout_s 570
#
# Steps (each runs once: an ended step leaves a stamp in build/gpu-session/, so a second call
# on the same, still warm machine goes on with the next one; a step that would start with less
# than its minimum left is put off to that call):
#   build     OpenCV from the carried prefix, then run.sh's installs and builds (mmcv's CUDA ops
#             in the background, mmdet_ext with CUDA and nvJPEG); mmdet_ext.info
#   nvjpeg    tests/test_gpu_decode.py -s (nvJPEG against cv2, its difference printed)
#   tests     every other test file that touches CUDA or decoding, on 12 xdist workers
#   decode    benchmarks/gpu_decode.py (the bytes + nvJPEG row)
#   train     tools/gpu/train_data_path.py (Mask R-CNN R50 with DataLoader workers, stock vs adopted)
#   harness   tools/gpu/harness.py --only b,d,a (mask targets, predicted masks, resume memory)
#   sanitize  compute-sanitizer memcheck on the nvJPEG tests
#   step      tools/gpu/harness.py --only c (the model.train_step row)
# Carried (run's carry): tools/gpu/wheels (fetch_wheels.sh), build/gpu-opencv/prefix and
# build/gpu-opencv/libjpeg (build_opencv.sh run where the session prepares), .gpucarry/photos
# (a scikit-image wheel trimmed to benchmarks/photos.py's photographs), .gpucarry/rapidjson
# (Debian's rapidjson-dev headers and .pc). Logs are copied into $OUT
# (at most 8 files come back) after every step; without $OUT they stay in build/gpu-session/.
set -uo pipefail  # no -e: a failed step is recorded and the next one runs

deadline=$((SECONDS + ${1:?usage: session.sh SECONDS}))
repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$repo_root"
state=$repo_root/build/gpu-session
mkdir -p "$state"
export PYTHONUNBUFFERED=1 MAX_JOBS=${MAX_JOBS:-16}

publish() {
  [ -n "${OUT:-}" ] || return 0
  cp "$state"/*.log "$state"/steps.txt "$OUT"/ 2>/dev/null
  tar -czf "$OUT/results.tgz" -C "$state" results 2>/dev/null
}

# run_step NAME MIN_SECONDS MAX_SECONDS COMMAND...: its output appended to NAME's log.
run_step() {
  local name=$1 min=$2 max=$3 left rc start
  shift 3
  [ -f "$state/$name.done" ] && return 0
  left=$((deadline - SECONDS))
  if [ "$left" -lt "$min" ]; then
    echo "$name: put off ($left s left, needs $min)" | tee -a "$state/steps.txt"
    return 1
  fi
  start=$SECONDS
  # Its own process group, ended whole at the limit: on 2026-11-28 `timeout` ended pytest but
  # not its xdist workers, which went on loading the machine under the next steps' timings.
  # bash -c: a step may be one of the functions below (exported).
  setsid bash -c '"$@"' "$name" "$@" >>"$state/$name.log" 2>&1 &
  local pid=$!
  rm -f "$state/$name.cut"
  (sleep $((left < max ? left : max)); touch "$state/$name.cut"; kill -TERM -- "-$pid"
   sleep 5; kill -KILL -- "-$pid") >/dev/null 2>&1 &
  local watchdog=$!
  wait "$pid"
  rc=$?
  kill "$watchdog" 2>/dev/null
  [ -f "$state/$name.cut" ] && rc=124  # the limit ended it
  kill -KILL -- "-$pid" 2>/dev/null  # whatever it left running
  echo "$name: rc=$rc in $((SECONDS - start)) s ($(date +%T))" | tee -a "$state/steps.txt"
  # A failure is a result too, not repeated; a step cut off by its time limit runs again in
  # the next call (run.sh's builds carry on where they stopped).
  [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ] || touch "$state/$name.done"
  publish
  return $rc
}

build() {
  # RapidJSON (header-only, Debian's rapidjson-dev, carried in .gpucarry/rapidjson): its .pc
  # names where it lies.
  local rapidjson=$repo_root/.gpucarry/rapidjson
  sed -i "s|^prefix=.*|prefix=$rapidjson|" "$rapidjson/lib/pkgconfig/RapidJSON.pc"
  export PKG_CONFIG_PATH=$rapidjson/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
  bash tools/gpu/build_opencv.sh && source build/gpu-opencv/env.sh &&
    env | grep -E '^(PKG_CONFIG_PATH|LD_LIBRARY_PATH)=' >"$state/env.txt" &&
    MMDET_EXT_GPU_BUILD_ONLY=1 bash tools/gpu/run.sh &&
    python3 -m mmdet_ext.info && nvidia-smi
}

# The environment every later step needs (also in a second call): OpenCV's and libjpeg's
# libraries, mmengine's pkg_resources, this checkout first on the path.
with_env() {
  [ -f "$state/env.txt" ] && while read -r line; do export "${line?}"; done <"$state/env.txt"
  # shellcheck disable=SC2034  # read by build_env.sh
  wheels=$repo_root/tools/gpu/wheels
  source tools/gpu/build_env.sh
  export PYTHONPATH=$repo_root:$repo_root/tests${PYTHONPATH:+:$PYTHONPATH}
  "$@"
}

export -f build with_env
export repo_root state
mkdir -p ~/.cache/mmdet_ext/photos "$state/results"
cp -n .gpucarry/photos/*.whl ~/.cache/mmdet_ext/photos/ 2>/dev/null

gpu_test_files=(tests/test_cuda_kernels.py tests/test_resize_normalize.py
  tests/test_deferred_pixels.py tests/test_device_prefetch.py tests/test_collate.py
  tests/test_predicted_masks.py tests/test_rle_predictions.py tests/test_own_libstdcxx.py
  tests/test_decode_image.py tests/test_lazy_mask_targets.py tests/test_fused_loading.py
  tests/test_build_info.py tests/test_checkpoint_loading.py tests/test_plugin.py
  tests/test_memory_watch_hook.py tests/test_rng_state.py tests/test_sample_seeds.py
  tests/test_worker_defaults.py)
# -v: each test's outcome is in the log as it ends (a run cut off at its limit printed no
# summary on 2026-11-28); --timeout: a test that hangs fails alone (pytest-timeout is there).
pytest_args=(-v -rfEs -p no:cacheprovider --timeout 60)
r=$state/results

run_step build 200 420 build
run_step nvjpeg 40 120 with_env python3 -m pytest "${pytest_args[@]}" -s tests/test_gpu_decode.py \
  --junitxml="$r/junit_gpu_decode.xml"
run_step tests 60 200 with_env python3 -m pytest "${pytest_args[@]}" -n 12 "${gpu_test_files[@]}" \
  --junitxml="$r/junit_tests.xml"
# As on the CPU machine's run (benchmarks/results/gpu_decode.md): 2 workers, 2 pinned cores.
run_step decode 60 150 with_env python3 benchmarks/gpu_decode.py --out "$r/gpu_decode.md"
run_step train 60 150 with_env python3 tools/gpu/train_data_path.py --output "$r/train_data_path.md"
run_step harness 60 200 with_env python3 tools/gpu/harness.py --only b,d,a --repeat 5 \
  --output "$r/harness_bda.md"
run_step sanitize 40 120 with_env compute-sanitizer --tool memcheck --error-exitcode 9 \
  python3 -m pytest -q -p no:cacheprovider tests/test_gpu_decode.py -k nvjpeg
run_step step 40 90 with_env python3 tools/gpu/harness.py --only c --repeat 5 \
  --output "$r/harness_c.md"
echo "session: $((deadline - SECONDS)) s of the deadline left" | tee -a "$state/steps.txt"
publish
