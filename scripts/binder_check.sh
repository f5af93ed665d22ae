#!/usr/bin/env bash
# The mybinder.org install reproduced from the binder/ files alone, then every tutorial executed headless with no GPU
# visible, with the peak memory of each run (scripts/binder_run.py prints the table; mybinder.org gives 1 GB).
#
# repo2docker (what mybinder.org runs) takes Python from binder/runtime.txt, runs `pip install -r
# binder/requirements.txt`, then binder/postBuild in the repository root. Here: a fresh virtual environment
# (build/binder/venv), a copy of the repository's files (build/binder/repo: postBuild installs from it and deletes
# extension/node_modules there), the same two steps, then the notebooks of the copy run by the environment's python
# with CUDA_VISIBLE_DEVICES="", no PYTHONPATH (tile_nb comes from the install, not from the checkout) and an empty
# compile cache.
# mybinder.org has no CUDA toolkit either: run as root, the notebooks run in a private mount namespace where the
# toolkit (nvcc, ptxas, the CUDA headers) is hidden, so a cell that needs it fails here as it would there.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
work=build/binder
rm -rf "$work"
mkdir -p "$work/repo"
# The files a clone has (tracked, plus new files git does not ignore), as they are in this working tree.
git ls-files -z --cached --others --exclude-standard | tar --null -T - -cf - | tar -xf - -C "$work/repo"

want=$(sed -n 's/^python-//p' binder/runtime.txt)
python=$(command -v "python$want" || command -v python3)
have=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
[ "$have" = "$want" ] || echo "NOTE: binder/runtime.txt asks for Python $want; this machine has $have"
"$python" -m venv "$work/venv"
venv=$(cd "$work/venv" && pwd)
export PATH="$venv/bin:$PATH" VIRTUAL_ENV="$venv"
# An index this machine cannot reach (download.pytorch.org from a sandbox with a local wheel of the same torch)
# should cost seconds, not pip's default minutes of retries.
export PIP_TIMEOUT=${PIP_TIMEOUT:-10} PIP_RETRIES=${PIP_RETRIES:-1}
(cd "$work/repo" && pip install -q -r binder/requirements.txt 2>&1 | { grep -v -e '^WARNING: Retrying' -e \
  '^WARNING: Location' || true; } && ./binder/postBuild >/dev/null)
echo "binder install (requirements.txt + postBuild, fresh venv): $(( $(date +%s) - start )) s"

# A new binder session starts with an empty compile cache: no cubin or resources from earlier runs on this machine.
run=(env -u PYTHONPATH CUDA_VISIBLE_DEVICES= TILE_NB_CACHE_DIR="$PWD/$work/cache" python scripts/binder_run.py
     notebooks/*.ipynb)
# Inside the mount namespace: empty every CUDA toolkit folder, and replace any nvcc / ptxas on PATH by /dev/null
# (not executable, so not found); then check that tile_nb finds no toolkit.
hide='for d in /usr/local/cuda-* /opt/cuda; do [ -d "$d" ] && mount -t tmpfs none "$(readlink -f "$d")"; done
for t in nvcc ptxas; do p=$(command -v "$t") && mount --bind /dev/null "$p"; done
python -c "from tile_nb.backend import toolchain as t; assert t.cuda_home() is None and t.find_tool(\"nvcc\") is None"
echo "CUDA toolkit hidden (private mount namespace), as on mybinder.org"
exec "$@"'
cd "$work/repo"
quiet() { grep -v 'Kernel is running over TCP without encryption' || true; }  # each kernel start says so
if [ "$(id -u)" = 0 ] && unshare -m true 2>/dev/null; then
  env -u CUDA_HOME -u CUDA_PATH unshare -m bash -c "$hide" hide "${run[@]}" 2>&1 | quiet
else
  echo "NOTE: the CUDA toolkit stays visible here (hiding it needs root for a private mount namespace);" \
       "mybinder.org has none"
  "${run[@]}" 2>&1 | quiet
fi
echo "binder check total: $(( $(date +%s) - start )) s"
