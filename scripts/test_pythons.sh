#!/usr/bin/env bash
# The unit tests under the other Pythons tile_nb supports (CI runs this after scripts/test.sh, which uses the
# `python3` on PATH): the oldest that pyproject.toml's requires-python admits, and Debian's system /usr/bin/python3
# (an old 3.11 patch release: an import of tile_nb once failed there only). Each gets its own virtual environment
# (.venv-py<version>, .venv-system) made by scripts/install.sh; notebooks, ruff and the difftest tier run once, in
# test.sh. A Python that is missing is an error here, not a skip: pass the interpreters as arguments to choose.
# Usage: test_pythons.sh [PYTHON ...]
set -euo pipefail
cd "$(dirname "$0")/.."
oldest=$(sed -n 's/^requires-python = ">=\([0-9.]*\)"$/\1/p' pyproject.toml)
find_python() {  # python$1 on PATH, else pyenv's build of it
  local want=$1 found
  for found in "$(command -v "python$want" 2>/dev/null)" \
               "$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")"/versions/"$want".*/bin/"python$want"; do
    if [ -x "$found" ] && "$found" -c 'import sys; sys.exit(sys.version_info[:2] != tuple(map(int, "'"$want"'".split("."))))' \
        2>/dev/null; then
      echo "$found"
      return 0
    fi
  done
  return 1
}
if (( $# )); then
  pythons=("$@")
else
  first=$(find_python "$oldest") || { echo "test_pythons: no Python $oldest (requires-python >=$oldest) found" >&2; exit 1; }
  pythons=("$first" /usr/bin/python3)
fi
# Installs one after the other (editable installs write into this one source tree); then the test runs side by
# side, one per core (each is one single-threaded pytest process; the compile cache is safe to share: cache.py),
# each into its own log, printed whole in order when it ends.
failed=()
venvs=()
versions=()
for python in "${pythons[@]}"; do
  version=$("$python" -c 'import platform; print(platform.python_version())')
  venv=.venv-py$version
  [ "$python" = /usr/bin/python3 ] && venv=.venv-system
  echo "== Python $version ($python) in $venv: install"
  TILE_NB_PYTHON=$python TILE_NB_VENV=$venv bash scripts/install.sh
  py=$(TILE_NB_VENV=$venv bash scripts/python.sh)
  "$py" -c "import tile_nb, sys; print('import tile_nb: ok on', sys.version.split()[0])"
  venvs+=("$venv")
  versions+=("$version")
done
logs=$(mktemp -d)
pids=()
for i in "${!venvs[@]}"; do
  py=$(TILE_NB_VENV=${venvs[$i]} bash scripts/python.sh)
  # nvcc, as in test.sh's environment: a CUDA build of torch (what pip gives where no CPU wheel lies on disk)
  # brings NVRTC, which tile_nb would otherwise prefer, and the resource tests' expectations are nvcc's.
  ( start=$(date +%s)
    rc=0
    TILE_NB_NO_NVRTC=1 "$py" -m pytest -p no:nbval -p no:cacheprovider -q -m "not difftest and not slow" tests \
      || rc=$?
    echo "Python ${versions[$i]}: $(( $(date +%s) - start )) s"
    exit "$rc" ) > "$logs/$i.log" 2>&1 &
  pids+=($!)
done
for i in "${!pids[@]}"; do
  rc=0
  wait "${pids[$i]}" || rc=$?
  echo "== Python ${versions[$i]}: unit tests (exit $rc)"
  cat "$logs/$i.log"
  (( rc == 0 )) || failed+=("${versions[$i]}")
done
rm -r "$logs"
if (( ${#failed[@]} )); then
  echo "test_pythons: unit tests FAILED under Python ${failed[*]}" >&2
  exit 1
fi
