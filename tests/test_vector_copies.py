"""Per-thread loops that copy consecutive elements between a thread's registers and a global tensor or a
shared tile (`for v in T.vectorized(8): x[v] = X[row, c + v]`, tilelang's GEMV kernels) become 4-, 8- or
16-byte accesses (lower/emit/vector_copies.py); element by element wherever a chunk would not be one aligned
access. Against torch on both back ends (gpu twins) at rows and widths that are not multiples of the block,
sizes of 1, T.dynamic rows and row lengths (one kernel called at several), and a tensor whose data pointer is
not 16-byte aligned."""
from __future__ import annotations

import re

import pytest
import torch

import tile_nb
import tile_nb.language as T
from tile_nb.backend import toolchain

needs_nvcc = pytest.mark.skipif(toolchain.find_tool("nvcc") is None, reason="needs nvcc to build cubins")
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


@tile_nb.jit
def scale_rows(X, VEC: int = 8, shift: int = 0, ROWS: int = 32, dynamic: bool = False):
    """Y[r, c] = 2 X[r, c] + 1 for c in [shift, shift + W): each thread one row, VEC columns at a time through
    registers. `dynamic`: the rows N and the row length P are T.dynamic."""
    W = T.const("W")
    N, P = (T.dynamic("N"), T.dynamic("P")) if dynamic else T.const("N, P")
    X: T.Tensor[[N, P], T.float16]
    Y = T.empty((N, P), T.float16)
    with T.Kernel(T.ceildiv(N, ROWS), threads=ROWS) as bx:
        x = T.alloc_local((VEC,), T.float16)
        y = T.alloc_local((VEC,), T.float16)
        tx = T.get_thread_binding()
        row = bx * ROWS + tx
        if row < N:
            for c in T.serial(W // VEC):
                for v in T.vectorized(VEC):
                    x[v] = X[row, shift + c * VEC + v]
                for v in T.serial(VEC):
                    y[v] = x[v] * 2.0 + 1.0
                for v in T.vectorized(VEC):
                    Y[row, shift + c * VEC + v] = y[v]
    return Y


def _accesses(source: str) -> set[str]:
    return set(re.findall(r"\btnb_v(?:ld|st)_\w+", source))


@needs_nvcc
@pytest.mark.parametrize("kw, P, W, expect", [
    ({}, 64, 64, {"tnb_vld_float16x8_float16", "tnb_vst_float16x8_float16"}),
    ({"VEC": 4}, 64, 64, {"tnb_vld_float16x4_float16", "tnb_vst_float16x4_float16"}),
    ({"VEC": 2}, 64, 64, {"tnb_vld_float16x2_float16", "tnb_vst_float16x2_float16"}),
    ({"shift": 2}, 66, 64, {"tnb_vld_float16x2_float16", "tnb_vst_float16x2_float16"}),  # 4-byte aligned
    ({"shift": 1}, 65, 64, set()),                                                       # odd columns
    ({}, 60, 56, {"tnb_vld_float16x4_float16", "tnb_vst_float16x4_float16"}),  # rows of 120 bytes
])
def test_register_copies_become_vector_accesses_where_aligned(kw, P, W, expect):
    x = torch.randn(70, P).half()
    assert _accesses(scale_rows.compile(x, W=W, target="sm_90a", **kw).cuda_source) == expect


@needs_nvcc
def test_a_tensor_off_its_alignment_keeps_element_accesses():
    """X one element into its storage: its loads go element by element; Y, which the call allocates, is
    aligned and still stored 16 bytes at a time."""
    x = torch.randn(70 * 64 + 1).half()[1:].view(70, 64)
    source = scale_rows.compile(x, W=64, target="sm_90a").cuda_source
    assert _accesses(source) == {"tnb_vst_float16x8_float16"}


@needs_nvcc
def test_dynamic_row_lengths_get_vector_accesses_where_a_call_proves_them_aligned():
    """A T.dynamic row length is a multiple of 16 or not per call (a kernel each, as Triton specializes):
    16-byte accesses for the first, element by element for the second."""
    for P, expect in ((64, {"tnb_vld_float16x8_float16", "tnb_vst_float16x8_float16"}), (65, set())):
        x = torch.randn(70, P).half()
        source = scale_rows.compile(x, W=64, dynamic=True, target="sm_90a").cuda_source
        assert "int P" in source and _accesses(source) == expect


@pytest.mark.parametrize("device", DEVICES)
def test_one_kernel_with_dynamic_dims_agrees_with_torch_at_each_call(device):
    """The same kernel called at row lengths that alternate between aligned and not, and a single row."""
    for N, P in ((70, 64), (33, 65), (1, 16), (5, 24), (70, 64)):
        x = torch.randn(N, P).half()
        y = scale_rows(x.to(device), W=16, dynamic=True).cpu()
        torch.testing.assert_close(y[:, :16], (x[:, :16].float() * 2 + 1).half())


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("N, P, W, kw", [(70, 64, 64, {}), (1, 16, 16, {}), (33, 66, 64, {"shift": 2}),
                                         (5, 65, 64, {"shift": 1}), (40, 24, 16, {"VEC": 4, "shift": 8})])
def test_scale_rows_agrees_with_torch(device, N, P, W, kw):
    x = torch.randn(N, P).half()
    shift = kw.get("shift", 0)
    y = scale_rows(x.to(device), W=W, **kw).cpu()
    torch.testing.assert_close(y[:, shift:shift + W], (x[:, shift:shift + W].float() * 2 + 1).half())


@pytest.mark.parametrize("device", DEVICES)
def test_a_tensor_off_its_alignment_agrees_with_torch(device):
    """A view one element into its storage (a 2-byte aligned data pointer: the call's kernel keeps element
    accesses, `tile_nb.unaligned`)."""
    base = torch.randn(70 * 64 + 1).half().to(device)
    x = base[1:].view(70, 64)
    y = scale_rows(x, W=64).cpu()
    torch.testing.assert_close(y, (x.cpu().float() * 2 + 1).half())


@tile_nb.jit
def reverse_rows_through_shared(X, ROWS: int = 32):
    """Each thread stages its row (clamped to the last one) in a shared tile, 8 columns at a time, then writes
    2 v + 1 of the row staged by thread ROWS - 1 - tx: register <-> shared copies both ways."""
    N, W = T.const("N, W")
    X: T.Tensor[[N, W], T.float16]
    Y = T.empty((N, W), T.float16)
    with T.Kernel(T.ceildiv(N, ROWS), threads=ROWS) as bx:
        S = T.alloc_shared((ROWS, W), T.float16)
        x = T.alloc_local((8,), T.float16)
        y = T.alloc_local((8,), T.float16)
        tx = T.get_thread_binding()
        for c in T.serial(W // 8):
            for v in T.vectorized(8):
                x[v] = X[T.min(bx * ROWS + tx, N - 1), c * 8 + v]
            for v in T.vectorized(8):
                S[tx, c * 8 + v] = x[v]
        for c in T.serial(W // 8):
            for v in T.vectorized(8):
                y[v] = S[ROWS - 1 - tx, c * 8 + v]
            for v in T.serial(8):
                x[v] = y[v] * 2.0 + 1.0
            if bx * ROWS + tx < N:
                for v in T.vectorized(8):
                    Y[bx * ROWS + tx, c * 8 + v] = x[v]
    return Y


@needs_nvcc
def test_register_shared_copies_become_vector_accesses():
    source = reverse_rows_through_shared.compile(torch.randn(70, 64).half(), target="sm_90a").cuda_source
    # X -> x and S -> y loads, x -> S and x -> Y stores: each one 16-byte access
    loads, stores = source.count("tnb_vld_float16x8_float16(("), source.count("tnb_vst_float16x8_float16((")
    assert (loads, stores) == (2, 2)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("N, W", [(70, 64), (1, 8), (32, 24)])
def test_reverse_rows_through_shared_agrees_with_torch(device, N, W):
    x = torch.randn(N, W).half()
    rows = torch.arange(N)
    source = torch.clamp(rows // 32 * 32 + 31 - rows % 32, max=N - 1)
    y = reverse_rows_through_shared(x.to(device)).cpu()
    torch.testing.assert_close(y, (x[source].float() * 2 + 1).half())
