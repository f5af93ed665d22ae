#!/usr/bin/env bash
# The packages that the references of tilelang's examples import, for `python -m tile_nb.conformance`
# (docs/tilelang.md, "The references' own packages"), unpacked into ignored folders (.gl is ignored):
#   .gl/pydeps   for runs here, on the interpreter: einops, flash-linear-attention + fla-core 0.6.0 and
#                triton 3.9.0 (the Triton references run in Triton's interpreter, TRITON_INTERPRET=1; fla 0.3.2's
#                kernels use block pointers, which that interpreter no longer has)
#   .gl/gpudeps  for the GPU machine, which has its own Triton (3.6) and transformers: einops and
#                flash-linear-attention + fla-core 0.3.2, the version tilelang's requirements-test.txt pins (for
#                the gdn examples' references: fla 0.6 removed `head_first` and refuses Triton < 3.7.1 on Hopper;
#                not yet run there with 0.3.2). Carry it as PYDEPS (bash scripts/gpu_check.sh $OUT conformance)
#   bash scripts/conformance_deps.sh
set -euo pipefail
cd "$(dirname "$0")/.."
unpack() {  # folder, then pip requirement specifiers
  local dest=$1 work
  shift
  work=$(mktemp -d)
  "${PYTHON:-python3}" -m pip download -q --no-deps --only-binary=:all: -d "$work" "$@"
  rm -rf "$dest" && mkdir -p "$dest"
  for wheel in "$work"/*.whl; do unzip -q -o "$wheel" -d "$dest"; done
  rm -rf "$work"
  echo "$dest: $(du -sh "$dest" | cut -f1) ($*)"
}
unpack .gl/pydeps einops==0.8.2 flash-linear-attention==0.6.0 fla-core==0.6.0 triton==3.9.0
unpack .gl/gpudeps einops==0.8.2 flash-linear-attention==0.3.2 fla-core==0.3.2
