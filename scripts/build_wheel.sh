#!/usr/bin/env bash
# Build tile_nb's sdist and wheel into dist/ (git ignores it): the wheel carries the prebuilt JupyterLab extension
# under share/jupyter/labextensions/tile-nb-labextension (hatch_build.py, docs/packaging.md), so
# `pip install 'dist/tile_nb-<version>-py3-none-any.whl[lab]'` needs no node.
# Building needs node >= 20.19 and npm when the extension's sources changed since its last build (the sdist build
# runs npm then); the wheel is then built from the sdist with no node on PATH, which checks that the sdist alone
# builds a working wheel. Prints the wheel's size and contents.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
py=$(bash scripts/python.sh --create)
# (from /: the repository's build/ folder would pass for the `build` package)
(cd / && "$py" -c "import build") 2>/dev/null || "$py" -m pip install -q build
rm -rf dist
"$py" -m build --sdist --outdir dist . | grep -v '^\* ' || true
sdist=$(ls dist/tile_nb-*.tar.gz)
[ -f "$sdist" ] || { echo "build_wheel: no sdist in dist/" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
tar -xzf "$sdist" -C "$tmp"
mkdir "$tmp/empty-path"
# PATH holds nothing: no node, no npm (the build front end runs pip and the backend through absolute paths).
PATH="$tmp/empty-path" "$py" -m build --wheel --outdir "$PWD/dist" "$tmp"/tile_nb-*/ | grep -v '^\* ' || true
wheel=$(ls dist/tile_nb-*.whl)
"$py" - "$wheel" "$sdist" <<'PY'
import collections, os, sys, zipfile
wheel, sdist = sys.argv[1:]
names = zipfile.ZipFile(wheel).namelist()
lab = [n for n in names if "/share/jupyter/labextensions/" in n]
if not any(n.endswith("/tile-nb-labextension/package.json") for n in lab):
    sys.exit(f"build_wheel: {wheel} lacks share/jupyter/labextensions/tile-nb-labextension/package.json")
print(f"{wheel}: {os.path.getsize(wheel) / 1e6:.2f} MB, {len(names)} files; "
      f"{sdist}: {os.path.getsize(sdist) / 1e6:.2f} MB")
tops = collections.Counter(n.split("/")[0] for n in names)
print("  top level: " + ", ".join(f"{t}/ ({c} files)" for t, c in sorted(tops.items())))
print(f"  labextension ({len(lab)} files):")
for n in lab:
    print("    " + n.split("/share/jupyter/labextensions/")[1])
PY
echo "build_wheel: $(( $(date +%s) - start )) s"
