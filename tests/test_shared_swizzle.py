"""The XOR swizzle of T.gemm's shared operand tiles (analysis/layout.py, SharedTile.offset2) places every
element of a tile at its own place inside its row, whatever the row's count of 16-byte chunks. Rows of 6, 10
or 12 chunks (48, 80, 96 half-precision columns: a K of 48, head dim 96) used to XOR over 8 chunks, which sent
a chunk out of its row onto another's: the GPU read wrong operands while the interpreter was right."""
from __future__ import annotations

import pytest
import torch
import tvm
import tvm.sym
from tvm import tirx

import tile_nb
import tile_nb.language as T
from tile_nb.lower.analysis.layout import SharedTile

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


_HALF_COLUMNS = (8, 16, 24, 32, 48, 64, 80, 96, 128, 192, 256)


@pytest.mark.parametrize("dtype, cols", [("float16", c) for c in _HALF_COLUMNS]
                         + [("int8", c) for c in (16, 48, 96, 128)]
                         + [("float32", c) for c in (4, 12, 24, 32)])
def test_every_element_has_its_own_place_in_its_row(dtype, cols):
    rows = 32
    buf = tirx.decl_buffer((rows, cols), dtype, scope="shared.dyn")
    tile = SharedTile(buf, (rows, cols), dtype, swizzle=True)
    analyzer = tvm.sym.Analyzer()
    for row in range(rows):
        places = {int(analyzer.simplify(tile.offset2(tirx.const(row, "int32"), tirx.const(col, "int32"))))
                  for col in range(cols)}
        assert places == set(range(row * cols, (row + 1) * cols)), (row, sorted(places))


@tile_nb.jit
def abt_mma(A, B, block_K=48):
    """C = A @ B^T on mma.sync (64 x 32 tiles, 2 warps) with shared operand tiles of block_K columns."""
    M, N, K = T.const("M, N, K")
    A: T.Tensor[[M, K], T.float16]
    B: T.Tensor[[N, K], T.float16]
    C = T.empty((M, N), T.float32)
    with T.Kernel(T.ceildiv(N, 32), T.ceildiv(M, 64), threads=64) as (bx, by):
        a = T.alloc_shared((64, block_K), T.float16)
        b = T.alloc_shared((32, block_K), T.float16)
        acc = T.alloc_fragment((64, 32), T.float32)
        T.clear(acc)
        for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=2):
            T.copy(A[by * 64, k * block_K], a)
            T.copy(B[bx * 32, k * block_K], b)
            T.gemm(a, b, acc, transpose_B=True)
        T.copy(acc, C[by * 64, bx * 32])
    return C


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("block_K", [48, 80, 96])
@pytest.mark.parametrize("M, N, K", [(70, 40, 96), (1, 1, 48), (64, 33, 200)])
def test_gemm_with_48_80_96_column_tiles_agrees_with_torch(device, block_K, M, N, K):
    torch.manual_seed(0)
    a, b = torch.randn(M, K).half(), torch.randn(N, K).half()
    c = abt_mma(a.to(device), b.to(device), block_K=block_K)
    torch.testing.assert_close(c.cpu(), a.float() @ b.float().T, atol=2e-2, rtol=2e-3)
