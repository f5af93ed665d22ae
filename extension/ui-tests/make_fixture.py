"""Write the sample kernel-view payload used by the Jest tests, from tile_nb itself.

The payload is what `tile_nb.notebook` really produces for the seed GEMM of notebooks/01_quickstart.ipynb,
shown as `%%tilekernel --shapes M=256 N=256 K=128 --cuda --lowered` would show it: `kernel_view(..., cuda=True,
lowered=True)`, then the `application/vnd.tile-nb.kernel+json`, `text/plain` and `text/html` entries of its
`_repr_mimebundle_()` (the payload is its `application/vnd.tile-nb.kernel+json`). Nothing in it is edited, so timings, register counts and the compiler's output are those
of the machine that ran this (the sections are those its tools allow: no SASS without cuobjdump/nvdisasm).

Needs the Python that has tile_nb (`pip install -e .` at the repository root) and nvcc (found on PATH or in
/usr/local/cuda/bin; compiling for sm_90a needs no GPU). Takes about 30 s on a cold compile cache.
Run from anywhere: `python extension/ui-tests/make_fixture.py`; it rewrites fixtures/gemm_payload.json next to
this file. (The browser test runs notebooks/01_quickstart.ipynb itself.)
"""

import json
import os
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
MIME = "application/vnd.tile-nb.kernel+json"

# The fixture cell: the quickstart's seed GEMM, with the options that add the compiled sections.
MAGIC_OPTIONS = "--shapes M=256 N=256 K=128 --cuda --lowered"
SHAPES = {"M": 256, "N": 256, "K": 128}
KERNEL_BODY = """\
@tile_nb.jit
def gemm(A, B, C, out_dtype: T.dtype = T.float32, block_M: int = 128, block_N: int = 128, block_K: int = 32):
    M, N, K = T.const('M, N, K')          # compile-time dims, read from the tensors at call time
    A: T.Tensor[[M, K], T.float16]         # in-body annotations: no annotation in the signature
    B: T.Tensor[[K, N], T.float16]
    C: T.Tensor[[M, N], out_dtype]
    with T.Kernel(T.ceildiv(M, block_M), T.ceildiv(N, block_N)) as (bx, by):   # threads defaults to 128
        A_shared = T.alloc_shared((block_M, block_K), A.dtype)
        B_shared = T.alloc_shared((block_K, block_N), B.dtype)
        C_local = T.alloc_fragment((block_M, block_N), out_dtype)
        T.clear(C_local)
        for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=3):
            T.copy(A[bx * block_M, k * block_K], A_shared)
            T.copy(B[k * block_K, by * block_N], B_shared)
            T.gemm(A_shared, B_shared, C_local)
        T.copy(C_local, C[bx * block_M, by * block_N])
"""
CELL_SOURCE = f"%%tilekernel {MAGIC_OPTIONS}\n{KERNEL_BODY}".rstrip("\n")


def mime_bundle() -> dict:
    """The real bundle of the GEMM's kernel view (what the `%%tilekernel` cell above displays)."""
    sys.path.insert(0, str(REPO))
    cuda_bin = Path("/usr/local/cuda/bin")
    if shutil.which("nvcc") is None and (cuda_bin / "nvcc").exists():
        os.environ["PATH"] = f"{cuda_bin}{os.pathsep}{os.environ.get('PATH', '')}"

    import tile_nb
    import tile_nb.language as T
    from tile_nb.notebook import kernel_view

    # As the magic does: line 1 stands for the magic line, so line k of the source is line k of the cell.
    source = f"# %%tilekernel {MAGIC_OPTIONS}\n{KERNEL_BODY}"
    namespace = tile_nb.run_source(source, {"tile_nb": tile_nb, "T": T}, filename="<gemm cell>")
    view = kernel_view(namespace["gemm"], (), dict(SHAPES), cuda=True, lowered=True, name="gemm")
    bundle = view._repr_mimebundle_()
    missing = {MIME, "text/plain", "text/html"} - set(bundle)
    if missing:
        raise RuntimeError(f"the kernel view's bundle lacks {sorted(missing)}")
    # A JSON round trip gives exactly what a notebook stores (and fails here if anything is not JSON).
    return json.loads(json.dumps(bundle))


def main() -> None:
    bundle = mime_bundle()
    fixtures = HERE / "fixtures"
    fixtures.mkdir(exist_ok=True)
    (fixtures / "gemm_payload.json").write_text(json.dumps(bundle[MIME], indent=1) + "\n")
    sections = ", ".join(s["id"] for s in bundle[MIME]["sections"])
    print(f"wrote fixtures/gemm_payload.json (sections: {sections})")


if __name__ == "__main__":
    main()
