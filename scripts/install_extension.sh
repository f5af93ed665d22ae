#!/usr/bin/env bash
# Build the JupyterLab extension (extension/, needs node >= 20.19 and npm) and install it into the environment of
# the python given as $1, where `jupyter labextension list` then shows it. Skipped when the same sources are
# already installed there (a hash of extension/ is kept beside the installed files).
set -euo pipefail
cd "$(dirname "$0")/.."
py=${1:?usage: install_extension.sh PYTHON}
prefix=$("$py" -c 'import sys; print(sys.prefix)')
stamp="$prefix/share/jupyter/labextensions/tile-nb-labextension/.tile_nb_source_hash"
hash=$(cd extension && cat package.json package-lock.json pyproject.toml install.json tsconfig.json \
       $(find src style -type f | sort) | sha256sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$hash" ]; then
  echo "JupyterLab extension: up to date"
else
  command -v npm >/dev/null || { echo "the JupyterLab extension needs node >= 20.19 and npm" >&2; exit 1; }
  start=$(date +%s)
  (cd extension && [ -d node_modules/@jupyter/builder ] || npm ci --no-audit --no-fund --loglevel=error)
  (cd extension && npm run --silent build:prod)
  "$py" -m pip install -q ./extension
  echo "$hash" > "$stamp"
  echo "JupyterLab extension: built and installed in $(( $(date +%s) - start )) s"
fi
"$py" -m jupyter labextension list 2>&1 | grep -q "tile-nb-labextension.*enabled.*OK" || {
  "$py" -m jupyter labextension list >&2; echo "tile-nb-labextension is not enabled" >&2; exit 1; }
