"""`T.copy(acc[:rows, :], smem)`: part of a register fragment stored to memory (tilelang's decode kernels
store the valid heads of an accumulator this way). Each register stores only if its element lies in the
region, at its place in the region. Before, such a copy was refused, and a region of one row (`acc[0:1, :]`,
whose unit dim the copy drops) passed the whole-fragment check and had every row of the fragment store into
that one row: a race on the GPU. Interpreter against torch, the guard in the CUDA source, and the GPU (marked
gpu). A load into part of a register fragment is still refused by the lowering."""
import re

import pytest
import torch

import tile_nb
import tile_nb.language as T


@tile_nb.jit
def head_rows(Q, K, rows: int = 5, block_H: int = 64, block_N: int = 64, D: int = 64):
    """O[h, n] = Q[h] . K[n], `rows` rows of Q per CTA in a 64-row gemm tile: only the first `rows` rows of
    the accumulator are stored."""
    H, N = T.const('H, N')
    Q: T.Tensor[[H, D], T.float16]
    K: T.Tensor[[N, D], T.float16]
    O = T.empty((H, N), T.float32)
    with T.Kernel(T.ceildiv(H, rows), T.ceildiv(N, block_N), threads=128) as (bx, by):
        Q_s = T.alloc_shared((block_H, D), T.float16)
        K_s = T.alloc_shared((block_N, D), T.float16)
        O_s = T.alloc_shared((rows, block_N), T.float32)
        acc = T.alloc_fragment((block_H, block_N), T.float32)
        T.clear(Q_s)
        T.copy(Q[bx * rows:(bx + 1) * rows, :], Q_s[:rows, :])
        T.copy(K[by * block_N, 0], K_s)
        T.clear(acc)
        T.gemm(Q_s, K_s, acc, transpose_B=True)
        T.copy(acc[:rows, :], O_s)
        T.copy(O_s, O[bx * rows, by * block_N])
    return O


CASES = [(10, 70, 5), (7, 64, 1), (3, 130, 4), (1, 1, 1)]


def _inputs(H, N, device):
    g = torch.Generator().manual_seed(H * 1000 + N)
    q = torch.randn(H, 64, generator=g).half()
    k = torch.randn(N, 64, generator=g).half()
    return q.to(device), k.to(device)


def _check(H, N, rows, device):
    q, k = _inputs(H, N, device)
    o = head_rows(q, k, rows=rows)
    torch.testing.assert_close(o.cpu(), q.cpu().float() @ k.cpu().float().T, atol=1e-3, rtol=1e-3)


@pytest.mark.parametrize("H,N,rows", CASES)
def test_part_of_an_accumulator_stored_on_the_interpreter(H, N, rows):
    _check(H, N, rows, "cpu")


@pytest.mark.gpu
@pytest.mark.parametrize("H,N,rows", CASES)
def test_part_of_an_accumulator_stored_on_gpu(H, N, rows):
    _check(H, N, rows, "cuda")


@pytest.mark.parametrize("rows", [5, 1])
def test_only_the_regions_rows_store(rows):
    q, k = _inputs(10, 70, "cpu")
    source = head_rows.compile(q, k, rows=rows, target="sm_90a").cuda_source
    kernel = source[source.rindex("head_rows_kernel("):]
    stores = kernel[kernel.rindex("wgmma"):]
    row = r"\(\(\(\(\(int\)threadIdx.x\) >> 5\) \* 16\) \+ \(\(\(\(int\)threadIdx.x\) & 31\) >> 2\)\)"
    guards = re.findall(r"if \(" + row + r"(?: \+ 8\))? < (\d+)\)", stores)
    assert guards and set(guards) == {str(rows)}, stores[:1500]     # every register store asks for its row
