#!/usr/bin/env bash
# The browser test (extension/ui-tests/): tile_nb installed the pip way, from its wheel, into a fresh virtual
# environment; Debian's Chromium driven by Playwright through the quickstart; refreshes docs/jupyterlab-view.png.
# 1. scripts/build_wheel.sh: sdist and wheel into dist/ (the one npm build of the extension in CI), the wheel built
#    from the sdist with no node on PATH.
# 2. build/wheel-venv, made afresh: torch's CPU build first (a bare `torch` requirement pulls GBs of CUDA packages),
#    then `pip install 'dist/tile_nb-*.whl[lab]'`; `jupyter labextension list` there must show the extension enabled
#    and OK, owned by the tile_nb package, both as the environment's own command and through an activated PATH.
# 3. extension/ui-tests/run.py run by that environment's python (JupyterLab, the kernel and tile_nb all from it).
# 4. tests/foreign_jupyter.sh: the README's `tutorials.sh --lab` (into .venv) with a foreign Jupyter first on PATH.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
chromium=${CHROMIUM:-/usr/bin/chromium}
if [ ! -x "$chromium" ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "installing Debian's chromium (never a downloaded browser build)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    echo "the browser test needs Chromium: apt-get install chromium (or CHROMIUM=/path/to/chromium)" >&2
    exit 1
  fi
fi
bash scripts/build_wheel.sh
wheel=$(ls dist/tile_nb-*.whl)
step=$(date +%s)
venv=build/wheel-venv
rm -rf "$venv"
"${TILE_NB_PYTHON:-python3}" -m venv "$venv"
venv=$(cd "$venv" && pwd)
wpy=$venv/bin/python
"$wpy" -m pip install -q torch==2.13.0
"$wpy" -m pip install -q "$wheel[lab]"
labextensions_show_tile_nb() {  # COMMAND...: its `labextension list` shows the extension enabled, OK, from tile_nb
  local extensions
  extensions=$("$@" 2>&1) || true
  grep -q "tile-nb-labextension.*enabled.*OK.*(python, tile_nb)" <<<"$extensions" || {
    echo "$extensions" >&2; echo "wheel install: tile-nb-labextension is not enabled (from: $*)" >&2; exit 1; }
}
labextensions_show_tile_nb "$wpy" -m jupyterlab.labextensions list
labextensions_show_tile_nb env PATH="$venv/bin:$PATH" python -m jupyter labextension list  # as when activated
echo "wheel install (fresh venv, torch CPU + $(basename "$wheel")[lab]), extension enabled: $(( $(date +%s) - step )) s"
(cd extension && [ -d node_modules/playwright-core ] || npm ci --no-audit --no-fund --loglevel=error)
CHROMIUM="$chromium" "$wpy" extension/ui-tests/run.py "$@"
bash tests/foreign_jupyter.sh
echo "browser test total: $(( $(date +%s) - start )) s"
