"""float32 atomic adds of a register fragment into a global tensor go two or four neighbouring registers per
atomic on sm_90 (lower/emit/vector_atomics.py), the tile form's guard at the tensor's edge included where it
holds for whole groups; element by element wherever the group would not move as one aligned access, before
sm_90, with the option off, and from a shared tile."""
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
def add_products(A, B, L, G, col=0):
    """G[r, col + c] += (A @ B^T)[r, c] for rows r < L[0], from every CTA of the grid's second dim
    (FlashAttention backward's dQ: an MMA accumulator added with one atomic per element, the rows masked)."""
    M, N, W = T.const("M, N, W")
    A: T.Tensor[[M, 32], T.float16]
    B: T.Tensor[[N, 32], T.float16]
    L: T.Tensor[[1], T.int32]
    G: T.Tensor[[M, W], T.float32]
    with T.Kernel(T.ceildiv(M, 64), 2, threads=128) as (bx, by):
        a = T.alloc_shared((64, 32), T.float16)
        b = T.alloc_shared((N, 32), T.float16)
        acc = T.alloc_fragment((64, N), T.float32)
        T.copy(A[bx * 64, 0], a)
        T.copy(B, b)
        T.clear(acc)
        T.gemm(a, b, acc, transpose_B=True)
        for i, j in T.Parallel(64, N):
            if bx * 64 + i < L[0]:
                T.atomic_add(G[bx * 64 + i, col + j], acc[i, j])


@tile_nb.jit
def add_rows(X, G):
    """G[r, c] += X[r, c] * 2 for each of the 3 CTAs, through a fragment T.copy fills (four neighbouring
    registers a thread)."""
    M = T.const("M")
    X: T.Tensor[[M, 64], T.float32]
    G: T.Tensor[[M, 64], T.float32]
    with T.Kernel(T.ceildiv(M, 32), 3, threads=128) as (bx, by):
        frag = T.alloc_fragment((32, 64), T.float32)
        T.copy(X[bx * 32, 0], frag)
        for i, j in T.Parallel(32, 64):
            frag[i, j] = frag[i, j] * 2.0
        for i, j in T.Parallel(32, 64):
            if bx * 32 + i < M:
                T.atomic_add(G[bx * 32 + i, j], frag[i, j])


def _inputs(M=100, N=64, W=64, rows=90):
    torch.manual_seed(0)
    return (torch.randn(M, 32).half(), torch.randn(N, 32).half(), torch.tensor([rows], dtype=torch.int32),
            torch.randn(M, W))


def _atomics(source: str) -> dict[str, int]:
    calls = re.findall(r"\b(atomicAdd|tnb_atomic_add_float32x\d)\(\(", source)
    return {name: calls.count(name) for name in set(calls)}


@needs_nvcc
@pytest.mark.parametrize("arch, kw, expect", [
    ("sm_90a", {}, {"tnb_atomic_add_float32x2": 16}),  # 64x64 over 128 threads: 32 registers in pairs
    ("sm_80", {}, {"atomicAdd": 32}),
    ("sm_90a", {"W": 65}, {"atomicAdd": 32}),  # rows of an odd length: a pair may straddle two rows
    ("sm_90a", {"col": 1}, {"atomicAdd": 32}),  # the pair starts at an odd column
])
def test_pairs_of_registers_go_as_one_atomic_where_they_are_aligned(arch, kw, expect):
    col = kw.pop("col", 0)
    a, b, rows, g = _inputs(**kw)
    source = add_products.compile(a, b, rows, g, col=col, target=arch).cuda_source
    assert _atomics(source) == expect


@needs_nvcc
def test_the_option_turns_vector_atomics_off():
    a, b, rows, g = _inputs()
    with tile_nb.options(vector_atomics=False):
        source = add_products.compile(a, b, rows, g, target="sm_90a").cuda_source
    assert _atomics(source) == {"atomicAdd": 32}


@needs_nvcc
def test_four_neighbouring_registers_go_as_a_float4_atomic():
    x, g = torch.randn(70, 64), torch.randn(70, 64)
    source = add_rows.compile(x, g, target="sm_90a").cuda_source
    assert set(_atomics(source)) == {"tnb_atomic_add_float32x4"}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("M, rows, W, col",
                         [(100, 90, 64, 0), (64, 1, 64, 0), (1, 1, 66, 2), (100, 100, 65, 1)])
def test_add_products_agrees_with_torch(device, M, rows, W, col):
    a, b, lens, g = _inputs(M=M, W=W, rows=rows)
    expect = g.clone()
    expect[:rows, col:col + 64] += 2 * (a[:rows].float() @ b.float().T)
    g = g.to(device)
    add_products(a.to(device), b.to(device), lens.to(device), g, col=col)
    torch.testing.assert_close(g.cpu(), expect, atol=1e-3, rtol=1e-4)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("M", [70, 1, 32])
def test_add_rows_agrees_with_torch(device, M):
    x, g = torch.randn(M, 64), torch.randn(M, 64)
    expect = g + 6 * x
    g = g.to(device)
    add_rows(x.to(device), g)
    torch.testing.assert_close(g.cpu(), expect, atol=1e-5, rtol=1e-5)


@tile_nb.jit
def add_tiles(X, G, in_registers: bool = True, dynamic: bool = False):
    """G[r, c] += X[r, c] from each of 2 CTAs along the grid's third dim, through a 32 x 64 tile added with
    the tile form: a register fragment, or (`in_registers=False`) a shared tile (tilelang's
    `T.atomic_add(dQ[...], dq_shared)`). The tiles at the bottom and right edges of G reach past it (rows
    and columns guarded). `dynamic`: M and W are T.dynamic."""
    M, W = (T.dynamic("M"), T.dynamic("W")) if dynamic else T.const("M, W")
    X: T.Tensor[[M, W], T.float32]
    G: T.Tensor[[M, W], T.float32]
    with T.Kernel(T.ceildiv(W, 64), T.ceildiv(M, 32), 2, threads=128) as (bx, by, bz):
        if in_registers:
            tile = T.alloc_fragment((32, 64), T.float32)
        else:
            tile = T.alloc_shared((32, 64), T.float32)
        T.copy(X[by * 32, bx * 64], tile)
        T.atomic_add(G[by * 32, bx * 64], tile)


@needs_nvcc
@pytest.mark.parametrize("in_registers, arch, W, expect", [
    (True, "sm_90a", 128, "tnb_atomic_add_float32x4"),
    (True, "sm_90a", 132, "tnb_atomic_add_float32x4"),  # the right edge's guard holds for 4s
    (True, "sm_90a", 130, "tnb_atomic_add_float32x2"),  # ... for pairs only
    (True, "sm_90a", 129, "atomicAdd"),                 # rows of an odd length
    (True, "sm_80", 128, "atomicAdd"),
    (False, "sm_90a", 128, "atomicAdd"),  # a shared tile: consecutive threads on consecutive elements already
])
def test_tiles_go_in_groups_where_the_edge_guard_holds_for_the_group(in_registers, arch, W, expect):
    x = torch.randn(70, W)
    source = add_tiles.compile(x, x.clone(), in_registers=in_registers, target=arch).cuda_source
    assert set(_atomics(source)) == {expect}


@needs_nvcc
@pytest.mark.parametrize("W, expect",
                         [(128, "tnb_atomic_add_float32x4"), (129, "atomicAdd"), (130, "atomicAdd")])
def test_a_dynamic_edge_takes_groups_only_where_the_call_proves_them_whole(W, expect):
    """With W T.dynamic the guard's bound is known only as a multiple of 16 or not (per call)."""
    x = torch.randn(70, W)
    source = add_tiles.compile(x, x.clone(), dynamic=True, target="sm_90a").cuda_source
    assert "int W" in source and set(_atomics(source)) == {expect}


@pytest.mark.parametrize("device", DEVICES)
def test_one_tile_add_kernel_with_dynamic_dims_agrees_with_torch_at_each_call(device):
    for M, W in ((70, 128), (33, 129), (1, 130), (64, 64), (70, 128)):
        x, g = torch.randn(M, W), torch.randn(M, W)
        expect = g + 2 * x
        g = g.to(device)
        add_tiles(x.to(device), g, dynamic=True)
        torch.testing.assert_close(g.cpu(), expect, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("in_registers", [False, True])
@pytest.mark.parametrize("M, W", [(70, 132), (1, 130), (64, 128), (33, 129), (5, 4)])
def test_tile_adds_agree_with_torch(device, in_registers, M, W):
    x, g = torch.randn(M, W), torch.randn(M, W)
    expect = g + 2 * x
    g = g.to(device)
    add_tiles(x.to(device), g, in_registers=in_registers)
    torch.testing.assert_close(g.cpu(), expect, atol=1e-5, rtol=1e-5)
