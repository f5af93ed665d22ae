#!/usr/bin/env bash
# The browser test (extension/ui-tests/): JupyterLab installed the README's way (`tutorials.sh --lab` runs the same
# install), Debian's Chromium driven by Playwright, the quickstart run in it; refreshes docs/jupyterlab-view.png.
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
bash scripts/install.sh lab
py=$(bash scripts/python.sh)
(cd extension && [ -d node_modules/playwright-core ] || npm ci --no-audit --no-fund --loglevel=error)
CHROMIUM="$chromium" "$py" extension/ui-tests/run.py "$@"
echo "browser test total: $(( $(date +%s) - start )) s"
