# Shared steps of the compatibility stacks (tools/compat/<stack>.sh): sourced, never run.
# Each stack builds its own venv; the plugin is built and tested in a copy of the checkout inside
# it, because an in-place build writes mmdet_ext/_C.<abi>.so, the same name as CI's own build.

# compat_step NAME CMD...: runs CMD, prints its wall time; a failure stops the script (set -e).
compat_step() {
  local name=$1 start rc=0
  shift
  start=$(date +%s)
  printf '[compat] %s: start\n' "$name"
  "$@" || rc=$?
  printf '[compat] %s: %s s (exit %s)\n' "$name" "$(($(date +%s) - start))" "$rc"
  return "$rc"
}

# compat_copy_checkout SRC DEST: the tracked and untracked-but-not-ignored files of the checkout
# SRC, as they are in the work tree (uncommitted edits included), copied over DEST.
compat_copy_checkout() {
  local src=$1 dest=$2
  mkdir -p "$dest"
  (cd "$src" && git ls-files -z --cached --others --exclude-standard |
    while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done |
    tar --null -T - -cf -) | tar -C "$dest" -xf -
}

# compat_build_plugin PYTHON DIR: builds mmdet_ext._C in place in DIR with PYTHON's torch.
compat_build_plugin() {
  local python=$1 dir=$2
  (cd "$dir" && MAX_JOBS=${MAX_JOBS:-2} "$python" setup.py -q build_ext --inplace)
}

# compat_run_subset PYTHON DIR JUNIT TEST_FILE...: pytest on TEST_FILEs in DIR with the plugin
# from DIR first on sys.path; the JUnit XML keeps the reason of every skip and failure. Returns
# pytest's exit status.
compat_run_subset() {
  local python=$1 dir=$2 junit=$3
  shift 3
  (cd "$dir" && PYTHONPATH=$dir "$python" -m pytest -q -p no:cacheprovider -rfEs \
    --junitxml="$junit" "$@")
}
