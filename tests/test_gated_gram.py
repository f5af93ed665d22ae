"""A gated Gram matrix per 64-row chunk (the pattern of gated delta-rule attention's "scaled dot kkt" step):
A[c] = strictly_lower((K_c * beta_c) K_c^T * safe_exp(g_i - g_j)), K_c scaled by beta in a T.Parallel loop
into a bfloat16 fragment that a wgmma T.gemm reads from registers, the mask and gate applied to the
accumulator, the result stored through a shared tile into a [B, S, H, 64] tensor. tilelang's gdn
`chunk_scaled_dot_kkt` example missed its reference on 0.06% of elements on an H100 (2026-12-07, fla
20027035); the interpreter agrees with a torch transcription. These tests pin the same operations down
against torch, on the CPU and the GPU, at a row count that is not a multiple of the chunk, one row, and a
T.dynamic row count.
"""
import pytest
import torch

import tile_nb
import tile_nb.language as T
from tile_nb.backend import toolchain

needs_nvcc = pytest.mark.skipif(toolchain.find_tool("nvcc") is None, reason="needs nvcc to build cubins")
BACKENDS = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]
CHUNK = 64


@tile_nb.jit
def gated_gram(K, Beta, G, block_D: int = 64, threads: int = 128, dynamic: bool = False):
    B, H, D = T.const("B, H, D")
    S = T.dynamic("S") if dynamic else T.const("S")
    K: T.Tensor[[B, S, H, D], T.bfloat16]
    Beta: T.Tensor[[B, S, H], T.bfloat16]
    G: T.Tensor[[B, S, H], T.float32]
    A = T.empty((B, S, H, CHUNK), T.bfloat16)
    with T.Kernel(T.ceildiv(S, CHUNK), B * H, threads=threads) as (bs, bbh):
        bb, bh = bbh // H, bbh % H
        k_s = T.alloc_shared((CHUNK, block_D), T.bfloat16)
        beta_s = T.alloc_shared((CHUNK,), T.bfloat16)
        g_s = T.alloc_shared((CHUNK,), T.float32)
        kb = T.alloc_fragment((CHUNK, block_D), T.bfloat16)
        acc = T.alloc_fragment((CHUNK, CHUNK), T.float32)
        out_s = T.alloc_shared((CHUNK, CHUNK), T.bfloat16)
        T.clear(acc)
        for i in T.Parallel(CHUNK):
            beta_s[i] = 0
            g_s[i] = 0
            if bs * CHUNK + i < S:
                beta_s[i] = Beta[bb, bs * CHUNK + i, bh]
                g_s[i] = G[bb, bs * CHUNK + i, bh]
        for d in T.Pipelined(T.ceildiv(D, block_D), num_stages=2):
            T.copy(K[bb, bs * CHUNK:(bs + 1) * CHUNK, bh, d * block_D:(d + 1) * block_D], k_s)
            for i, j in T.Parallel(CHUNK, block_D):
                kb[i, j] = k_s[i, j] * beta_s[i]
            T.gemm(kb, k_s, acc, transpose_B=True)
        for i, j in T.Parallel(CHUNK, CHUNK):
            acc[i, j] = T.if_then_else(g_s[i] - g_s[j] <= 0, acc[i, j] * T.exp(g_s[i] - g_s[j]), 0)
        for i, j in T.Parallel(CHUNK, CHUNK):
            if i <= j:
                acc[i, j] = 0
        T.copy(acc, out_s)
        T.copy(out_s, A[bb, bs * CHUNK:(bs + 1) * CHUNK, bh, :])
    return A


def _inputs(B, S, H, D, seed=0):
    g = torch.Generator().manual_seed(seed * 131 + S)
    K = torch.randn(B, S, H, D, generator=g).to(torch.bfloat16)
    Beta = torch.randn(B, S, H, generator=g).to(torch.bfloat16)
    G = torch.randn(B, S, H, generator=g)
    return K, Beta, G


def _reference(K, Beta, G):
    """(A, magnitude) in float64 from the same bfloat16 K * beta products, chunks of 64 rows (the last one
    short); the magnitude is A's with every product's absolute value, which bounds the float32 sums' error."""
    B, S, H, _ = K.shape
    kb = (K * Beta[..., None]).double()
    out, mag = (torch.zeros(B, S, H, CHUNK, dtype=torch.float64) for _ in range(2))
    for c0 in range(0, S, CHUNK):
        n = min(CHUNK, S - c0)
        g = G[:, c0:c0 + n].double().permute(0, 2, 1)
        gd = g[..., :, None] - g[..., None, :]
        gate = torch.tril(torch.where(gd <= 0, torch.exp(gd), torch.zeros_like(gd)), diagonal=-1)
        for dst, f in ((out, lambda t: t), (mag, torch.abs)):
            a = torch.einsum("bihd,bjhd->bhij", f(kb[:, c0:c0 + n]), f(K[:, c0:c0 + n].double())) * gate
            dst[:, c0:c0 + n, :, :n] = a.permute(0, 2, 1, 3)
    return out, mag


def _check(A, K, Beta, G):
    """float32 sums of exact products (each at most (D + 1) u of the magnitude, u = 2^-24, twice for the
    gate's float32 exp and product), then one rounding to bfloat16 (2^-8 relative)."""
    ref, mag = _reference(K, Beta, G)
    got = A.double().cpu()
    bound = 2.0 ** -8 * ref.abs() + 2 * (K.shape[-1] + 2) * 2.0 ** -24 * mag
    assert not torch.isnan(got).any()
    err = (got - ref).abs()
    assert bool((err <= bound).all()), f"worst error {float((err - bound).max()):.3g} over the bound"


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("B, S, H, D", [(2, 197, 3, 128), (1, 1, 1, 64), (1, 64, 2, 128)])
def test_gated_gram_agrees_with_torch(backend, B, S, H, D):
    K, Beta, G = _inputs(B, S, H, D)
    A = gated_gram(*(t.to(backend) for t in (K, Beta, G)))
    _check(A, K, Beta, G)


@pytest.mark.parametrize("backend", BACKENDS)
def test_gated_gram_with_a_dynamic_row_count(backend):
    for S in (130, 5, 64):
        K, Beta, G = _inputs(1, S, 2, 128, seed=S)
        A = gated_gram(*(t.to(backend) for t in (K, Beta, G)), dynamic=True)
        _check(A, K, Beta, G)


@needs_nvcc
def test_gated_gram_builds_for_sm_90a_on_wgmma_from_registers():
    k = gated_gram.compile(*_inputs(1, 256, 2, 128), target="sm_90a")
    assert "wgmma.mma_async" in k.ptx and "mma.sync" not in k.ptx and k.cubin
    assert "tnb_wgmma_rs_" in k.cuda_source  # A (K * beta) from registers
    assert all(r.spill_stores == 0 for r in k.resources_by_kernel.values())
