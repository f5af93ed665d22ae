#!/usr/bin/env bash
# The README's `bash scripts/tutorials.sh --lab` with another Jupyter earlier on PATH (issue 34: a conda base, or an
# activated virtualenv that has JupyterLab): fake `jupyter`, `jupyter-lab`, `jupyter-labextension` and
# `jupyter-server` that print "foreign" and fail come first on PATH. The install's extension check and JupyterLab
# itself must be the environment's own: the real install (scripts/install.sh lab) runs, then `jupyter lab --version`
# (no server start), whose answer must be the environment's JupyterLab version.
# scripts/browser_test.sh runs this after scripts/build_wheel.sh built the extension, so it runs no npm build.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
fake=$(mktemp -d)
trap 'rm -rf "$fake"' EXIT
for name in jupyter jupyter-lab jupyter-labextension jupyter-server; do
  printf '#!/bin/sh\necho "foreign %s $*"\nexit 1\n' "$name" >"$fake/$name"
  chmod +x "$fake/$name"
done
fail() { echo "$out" >&2; echo "foreign_jupyter: FAILED: $*" >&2; exit 1; }
out=$(PATH="$fake:$PATH" bash scripts/tutorials.sh --lab --version 2>&1) || fail "tutorials.sh --lab --version exited $?"
! grep -q foreign <<<"$out" || fail "a jupyter command ran from PATH ($fake) instead of the environment"
want=$("$(bash scripts/python.sh)" -c 'import jupyterlab; print(jupyterlab.__version__)')
[ "$(tail -n 1 <<<"$out")" = "$want" ] || fail "the last line is not the environment's JupyterLab version $want"
echo "foreign Jupyter first on PATH: tutorials.sh --lab ran the environment's JupyterLab $want" \
     "($(( $(date +%s) - start )) s, install included)"
