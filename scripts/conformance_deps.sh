#!/usr/bin/env bash
# The packages that the references of tilelang's examples import, for `python -m tile_nb.conformance`
# (docs/tilelang.md, "The references' own packages"), unpacked into ignored folders (.gl is ignored):
#   .gl/pydeps   for runs here, on the interpreter: einops, scipy (the Hadamard example's reference),
#                flash-linear-attention + fla-core 0.6.0 and
#                triton 3.9.0 (the Triton references run in Triton's interpreter, TRITON_INTERPRET=1; fla 0.3.2's
#                kernels use block pointers, which that interpreter no longer has)
#   .gl/gpudeps  for the GPU machine, which has its own Triton (3.6) and transformers: einops and
#                flash-linear-attention + fla-core 0.3.2, the version tilelang's requirements-test.txt pins (for
#                the references of the linear-attention and NSA examples). Carry it as PYDEPS (bash
#                scripts/gpu_check.sh $OUT conformance)
#   .gl/fla-2025-06  with FLA_GIT set: fla of June 2025 for the gdn examples only (see the end of this file)
#   [FLA_GIT=path/to/flash-linear-attention.git] bash scripts/conformance_deps.sh
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
unpack .gl/pydeps einops==0.8.2 flash-linear-attention==0.6.0 fla-core==0.6.0 triton==3.9.0 scipy==1.17.1
unpack .gl/gpudeps einops==0.8.2 flash-linear-attention==0.3.2 fla-core==0.3.2
# .gl/fla-2025-06: flash-linear-attention at 20027035 (2025-06-18), put first on the path of the gdn examples
# only (`--deps 'examples/gdn/*=.gl/fla-2025-06'`): they call fla's API of that month, which no release has
# (0.2.2 lacks recompute_w_u_fwd's g_cumsum argument; 0.3.0 added g_gamma before chunk_fwd_o's scale, so
# the scale lands in g_gamma and Triton refuses to compile), and their kernels compute fla's `safe_exp`
# (exp(x) where x <= 0, else 0), which fla removed right after this commit (356d59d7, #463). From a clone of
# github.com/fla-org/flash-linear-attention that FLA_GIT names (its git directory); skipped without it.
if [ -n "${FLA_GIT:-}" ]; then
  rm -rf .gl/fla-2025-06 && mkdir -p .gl/fla-2025-06
  git --git-dir="$FLA_GIT" archive 20027035e0446bfca0bc41c06f6aa01a7a1d19bd fla | tar -x -C .gl/fla-2025-06
  echo ".gl/fla-2025-06: $(du -sh .gl/fla-2025-06 | cut -f1) (flash-linear-attention 20027035)"
fi
