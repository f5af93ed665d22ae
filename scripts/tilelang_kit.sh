#!/usr/bin/env bash
# The real tilelang for the GPU machine (Python 3.12, no network), to time it beside tile_nb
# (benchmarks/vs_tilelang.py). Like the TVM kit, it travels in an ignored folder, in a call of its own (the two
# kits together exceed a call's 64 MiB).
#   bash scripts/tilelang_kit.sh make        # here (PYTHON= a Python with pip): tilelang==$TILELANG_VERSION and its dependencies, unpacked
#                                            # and packed into .tl/site.tar.xz (~38 MB)
#   source scripts/tilelang_kit.sh use       # there: unpack once into /tmp/tlsite, put it on PYTHONPATH
# torch and numpy come from the GPU machine. TVM's own kit (/tmp/devkit) must not be on PYTHONPATH beside it:
# tilelang brings its own tvm_ffi.
version=${TILELANG_VERSION:-0.1.15}
case "${1:-}" in
  make)
    set -euo pipefail
    cd "$(dirname "$0")/.."
    work=$(mktemp -d)
    platforms=(--platform manylinux_2_17_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_27_x86_64
               --platform manylinux_2_28_x86_64)
    "${PYTHON:-python3}" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 "${platforms[@]}" -d "$work/wheels" \
      "tilelang==$version" "apache-tvm-ffi>=0.1.11,<0.1.13" torch-c-dlpack-ext cloudpickle ml-dtypes psutil tqdm \
      typing-extensions "z3-solver>=4.13.0,<4.15.5"
    mkdir "$work/site"
    for wheel in "$work"/wheels/*.whl; do unzip -q -o "$wheel" -d "$work/site"; done
    rm -rf "$work"/site/z3_solver-*.data            # z3's headers and CLI: not imported
    mkdir -p .tl
    (cd "$work/site" && XZ_OPT="-9 -T2" tar -cJf - .) > .tl/site.tar.xz
    rm -rf "$work"
    grep -qx '/.tl/' .git/info/exclude 2>/dev/null || echo '/.tl/' >> .git/info/exclude
    echo "tilelang $version kit: $(du -h .tl/site.tar.xz | cut -f1) in .tl/ (carry it without .devkit)" ;;
  use)
    if [ ! -d /tmp/tlsite ]; then
      mkdir -p /tmp/tlsite && tar -xJf .tl/site.tar.xz -C /tmp/tlsite || return 1
    fi
    export PYTHONPATH="/tmp/tlsite:$PWD" PATH="/usr/local/cuda/bin:$PATH" CUDA_HOME=/usr/local/cuda \
      LD_LIBRARY_PATH="/tmp/tlsite/z3/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" PYTHONUNBUFFERED=1 ;;
  *) echo "usage: bash scripts/tilelang_kit.sh make | source scripts/tilelang_kit.sh use" >&2; return 2 2>/dev/null || exit 2 ;;
esac
