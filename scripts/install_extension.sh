#!/usr/bin/env bash
# Build the JupyterLab extension (extension/, needs node >= 20.19 and npm) and install it into the environment of
# the python given as $1, where `jupyter labextension list` then shows it. The development install, beside an
# editable tile_nb (the tile_nb wheel carries the same extension itself: scripts/build_wheel.sh). The npm build is
# skipped when extension/tile_nb_labextension/ already holds a build of the same sources
# (extension/labextension_build.py, which scripts/build_wheel.sh shares), the pip install when the same sources are
# already installed there (a hash of extension/ is kept beside the installed files).
# The check runs the environment's own JupyterLab (`python -m jupyterlab.labextensions`): `python -m jupyter
# labextension` runs the first `jupyter-labextension` on PATH, which may be another environment's.
set -euo pipefail
cd "$(dirname "$0")/.."
py=${1:?usage: install_extension.sh PYTHON}
prefix=$("$py" -c 'import sys; print(sys.prefix)')
stamp="$prefix/share/jupyter/labextensions/tile-nb-labextension/.tile_nb_source_hash"
hash=$(cd extension && cat package.json package-lock.json pyproject.toml install.json tsconfig.json \
       labextension_build.py $(find src style -type f | LC_ALL=C sort) | sha256sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$hash" ]; then
  echo "JupyterLab extension: up to date"
else
  start=$(date +%s)
  "$py" extension/labextension_build.py
  "$py" -m pip install -q ./extension
  echo "$hash" > "$stamp"
  echo "JupyterLab extension: built and installed in $(( $(date +%s) - start )) s"
fi
"$py" -m jupyterlab.labextensions list 2>&1 | grep -q "tile-nb-labextension.*enabled.*OK" || {
  "$py" -m jupyterlab.labextensions list >&2; echo "tile-nb-labextension is not enabled" >&2; exit 1; }
