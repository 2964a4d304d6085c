# Shared steps of the compatibility stacks (tools/compat/<stack>.sh): copy the checkout, build the
# plugin in place in the copy, run the test subset, README command 1 cut to one epoch, the wheel and
# pip's dry run of it. Sourced, not run. Every function takes the stack venv's python as its first
# argument, so nothing here touches the system python.
#
# Why a copy: an in-place build writes mmdet_ext/_C.cpython-311-x86_64-linux-gnu.so, the same name
# the main stack's build has in the checkout; building another torch's extension there would
# overwrite it.

COMPAT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
COMPAT_REPO=$(cd "$COMPAT_DIR/../.." && pwd)
COMPAT_SUBSET_FILE="$COMPAT_DIR/subset.txt"

compat_log() { printf '[compat %s] %s\n' "${COMPAT_STACK:-?}" "$*" >&2; }

# compat_timed NAME CMD...: runs CMD, prints and appends "NAME<TAB>seconds<TAB>exit status" to
# $COMPAT_TIMINGS (when set). Returns CMD's status.
compat_timed() {
  local name=$1 start status errexit=${-//[^e]/}
  shift
  start=$(date +%s)
  compat_log "step '$name' started"
  set +e
  "$@"
  status=$?
  [ -n "$errexit" ] && set -e
  local elapsed=$(($(date +%s) - start))
  compat_log "step '$name' took ${elapsed}s (exit status $status)"
  if [ -n "${COMPAT_TIMINGS:-}" ]; then
    printf '%s\t%s\t%s\n' "$name" "$elapsed" "$status" >>"$COMPAT_TIMINGS"
  fi
  return "$status"
}

# compat_make_venv PYTHON VENV: creates VENV with PYTHON unless it is there already.
compat_make_venv() {
  local python=$1 venv=$2
  if [ ! -x "$venv/bin/python" ]; then
    "$python" -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --upgrade pip
  fi
}

# compat_pip PY ARGS...: pip of the venv whose python is PY; quiet, no version check.
compat_pip() {
  local py=$1
  shift
  "$py" -m pip --disable-pip-version-check "$@"
}

# compat_copy_checkout DEST: the checkout's tracked files and its untracked, not ignored ones (so
# uncommitted work is tested too) copied to DEST. Earlier copies' build outputs are kept (ninja
# then recompiles only what changed); every other file of an earlier copy is removed first.
compat_copy_checkout() {
  local dest=$1
  mkdir -p "$dest"
  find "$dest" -mindepth 1 -maxdepth 1 ! -name build ! -name mmdet_ext -exec rm -rf {} +
  if [ -d "$dest/mmdet_ext" ]; then
    find "$dest/mmdet_ext" -mindepth 1 ! -name '_C.*.so' ! -name '_build_config.json' \
      -exec rm -rf {} + 2>/dev/null || true
  fi
  (cd "$COMPAT_REPO" && git ls-files -z --cached --others --exclude-standard |
    xargs -0 -I{} sh -c 'test -e "{}" && printf "%s\0" "{}"' |
    tar --null -T - -cf -) | tar -xf - -C "$dest"
}

# compat_build_plugin PY SRC: builds mmdet_ext._C in place in SRC against PY's torch, CPU only.
compat_build_plugin() {
  local py=$1 src=$2
  (cd "$src" && FORCE_CUDA=0 MAX_JOBS=${MAX_JOBS:-2} "$py" setup.py build_ext --inplace)
}

# compat_subset: the test files of the subset (tools/compat/subset.txt, comments stripped).
compat_subset() { sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$COMPAT_SUBSET_FILE"; }

# compat_run_subset PY SRC REPORT_XML: runs the subset in SRC with PY; pytest's junit xml to
# REPORT_XML, its summary (with the reason of every skip and failure) to stdout.
compat_run_subset() {
  local py=$1 src=$2 report=$3
  # shellcheck disable=SC2046
  (cd "$src" && PYTHONPATH="$src" "$py" -m pytest -q -rfEs -p no:cacheprovider \
    --junitxml="$report" $(compat_subset))
}

# compat_demo PY SRC WORK_DIR: README command 1 cut to one epoch.
compat_demo() {
  local py=$1 src=$2 work_dir=$3
  (cd "$src" && PYTHONPATH="$src" "$py" tools/make_toy_coco.py &&
    PYTHONPATH="$src" "$py" tools/train.py configs/mask-rcnn_r18_fpn_toy-coco.py \
      --work-dir "$work_dir" --cfg-options train_cfg.max_epochs=1)
}

# compat_build_wheel PY SRC OUT_DIR: the plugin's wheel, built in SRC against PY's torch.
compat_build_wheel() {
  local py=$1 src=$2 out=$3
  rm -rf "$out"
  (cd "$src" && FORCE_CUDA=0 MAX_JOBS=${MAX_JOBS:-2} "$py" -m build --no-isolation --wheel \
    --outdir "$out")
}

# compat_dry_run PY WHEEL REPORT_JSON: pip's install report of WHEEL into PY's venv, then a
# summary: what pip would install and which installed distributions that would replace. Fails
# when it would replace any.
compat_dry_run() (
  py=$1 wheel=$2 report=$3
  # From the report's folder, and -I for the check: `python -m` puts the cwd on sys.path, and a
  # checkout's mmdet_ext.egg-info there would pass for an installed mmdet_ext.
  cd "$(dirname "$report")"
  compat_pip "$py" install --dry-run --quiet --report "$report" "$wheel"
  "$py" -I - "$report" <<'PY'
import importlib.metadata
import json
import sys

install = json.load(open(sys.argv[1]))['install']
would = [(item['metadata']['name'], item['metadata']['version']) for item in install]
replaced = []
for name, version in would:
    try:
        installed = importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        continue
    replaced.append(f'{name} {installed} -> {version}')
print('would install:', ', '.join(f'{n}-{v}' for n, v in would) or 'nothing')
print('would replace:', ', '.join(replaced) or 'nothing')
sys.exit(1 if replaced else 0)
PY
)
