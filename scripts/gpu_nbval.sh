#!/usr/bin/env bash
# The tutorials under nbval on the lent GPU machine, every `gpu` cell required (--tile-nb-gpu=require).
#
# That machine has no Jupyter and no network, and one call carries at most 64 MiB, which the TVM kit (61 MiB) nearly
# fills. So it takes two calls on the same warm machine: the first carries .devkit and unpacks it into /tmp/devkit
# (`source .devkit/prelude.sh`, as every GPU command does); the second, within the machine's idle window, carries
# .whl (the Jupyter stack as Python 3.12 wheels, ~15 MiB, made here by `scripts/gpu_nbval.sh --download`) and runs
# this script, which finds the kit already unpacked.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ "${1:-}" == "--download" ]]; then   # on the developer machine: the wheels the GPU machine lacks
  rm -rf .whl /tmp/gpu-wheels && mkdir -p .whl
  python3 -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
    -d /tmp/gpu-wheels nbval ipykernel ipywidgets nbclient
  for wheel in /tmp/gpu-wheels/*.whl; do   # what the GPU machine's image already has stays out
    case "$(basename "$wheel" | sed 's/-[0-9].*//')" in
      attrs|coverage|iniconfig|packaging|pluggy|psutil|pygments|pytest|python_dateutil|typing_extensions|tzdata|widgetsnbextension) ;;
      *) cp "$wheel" .whl/ ;;
    esac
  done
  du -sh .whl
  exit 0
fi
[[ -d /tmp/devkit/site ]] || { echo "the TVM kit is not unpacked here: run a command with .devkit first"; exit 3; }
export PYTHONPATH="/tmp/nbenv:/tmp/devkit/site:$PWD" PATH="/usr/local/cuda/bin:$PATH" PYTHONUNBUFFERED=1
[[ -d /tmp/nbenv ]] || python3 -m pip install -q --no-index --no-deps --target /tmp/nbenv .whl/*.whl
(( $# )) || set -- notebooks/*.ipynb
python3 -m pytest -q -p no:cacheprovider -p tile_nb.testing.pytest_plugin --nbval --tile-nb-gpu=require "$@"
