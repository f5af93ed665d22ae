#!/usr/bin/env bash
# The unit tests under the other Pythons tile_nb supports (CI runs this after scripts/test.sh, which uses the
# `python3` on PATH): the oldest that pyproject.toml's requires-python admits, and Debian's system /usr/bin/python3
# (an old 3.11 patch release: an import of tile_nb once failed there only). Each gets its own virtual environment
# (.venv-py<version>, .venv-system) made by scripts/install.sh; notebooks, ruff and the difftest tier run once, in
# test.sh. A Python that is missing is an error here, not a skip: pass the interpreters as arguments to choose.
# Debian's Python is the minor version test.sh runs, so it gets the Python-facing layers only (every module
# imported, then the front end, interpreter, runtime, notebook, tilelang and torch tests: PYTHON_LAYER_TESTS);
# the lowering's and the CUDA toolkit's tests, which no patch release changes, run under the other Pythons.
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
PYTHON_LAYER_TESTS=(tests/test_layers.py tests/test_frontend.py tests/test_language.py tests/test_interp*.py
                    tests/test_runtime.py tests/test_threads.py tests/test_stale_globals.py tests/test_notebook_magic.py
                    tests/test_tilelang_run.py tests/test_tilelang_spellings.py tests/test_prim_func.py
                    tests/test_eager_ast.py tests/test_torch_ops.py tests/test_pointer_tables.py)
IMPORT_ALL='import importlib, pkgutil, tile_nb
names = [m.name for m in pkgutil.walk_packages(tile_nb.__path__, "tile_nb.")]
for name in names:
    importlib.import_module(name)
print(f"imported all {len(names)} tile_nb modules")'
logs=$(mktemp -d)
pids=()
for i in "${!venvs[@]}"; do
  py=$(TILE_NB_VENV=${venvs[$i]} bash scripts/python.sh)
  if [ "${venvs[$i]}" = .venv-system ]; then
    tests=("${PYTHON_LAYER_TESTS[@]}")
    workers=()
  else  # the whole suite, on two workers (xdist) while the system Python's short run shares the cores
    tests=(tests)
    workers=(-n 2)
  fi
  # nvcc, as in test.sh's environment: a CUDA build of torch (what pip gives where no CPU wheel lies on disk)
  # brings NVRTC, which tile_nb would otherwise prefer, and the resource tests' expectations are nvcc's.
  ( start=$(date +%s)
    rc=0
    "$py" -c "$IMPORT_ALL" || rc=$?
    TILE_NB_NO_NVRTC=1 "$py" -m pytest -p no:nbval -p no:cacheprovider -q -m "not difftest and not slow" \
      "${workers[@]}" "${tests[@]}" || rc=$?
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
