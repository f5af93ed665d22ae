"""Reference kernels (tests/kernels/reference.py) against torch, on the CPU interpreter and (marked gpu) on
CUDA, at shapes that are not multiples of the tiles, on random inputs."""
import math

import pytest
import torch
from kernels import reference as ref
from kernels.compare import rel_err, seeded

BACKENDS = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_gelu(backend):
    X = torch.randn(1000, generator=seeded(0)).half().to(backend)
    Y = torch.full_like(X, float("nan"))
    ref.gelu_tanh(X, Y)
    assert rel_err(Y, torch.nn.functional.gelu(X.float(), approximate="tanh")) < 2e-3


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", [(10, 64), (37, 100)])
def test_softmax(backend, shape):
    X = (torch.randn(*shape, generator=seeded(1)) * 3).to(backend)
    Y = torch.full_like(X, float("nan"))
    ref.softmax(X, Y)
    assert rel_err(Y, torch.softmax(X.double(), dim=1)) < 1e-5


@pytest.mark.parametrize("backend", BACKENDS)
def test_rms_norm(backend):
    X = torch.randn(30, 96, generator=seeded(2)).half().to(backend)
    W = torch.randn(96, generator=seeded(3)).half().to(backend)
    Y = torch.full_like(X, float("nan"))
    ref.rms_norm(X, W, Y)
    x = X.double()
    expected = x * torch.rsqrt((x * x).mean(dim=1, keepdim=True) + 1e-6) * W.double()
    assert rel_err(Y, expected) < 2e-3


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("causal", [False, True])
def test_flash_attention(backend, causal):
    b, h, s, d = 1, 2, 100, 64
    Q, K, V = (torch.randn(b, h, s, d, generator=seeded(4 + i)).half().to(backend) for i in range(3))
    O = torch.full_like(Q, float("nan"))
    ref.flash_attention(Q, K, V, O, causal=causal)
    q, k, v = Q.double(), K.double(), V.double()
    scores = q @ k.transpose(-1, -2) / math.sqrt(d)
    if causal:
        scores = scores.masked_fill(
            torch.ones(s, s, dtype=torch.bool, device=scores.device).triu(1), float("-inf")
        )
    expected = torch.softmax(scores, dim=-1) @ v
    assert rel_err(O, expected) < 5e-3


@pytest.mark.parametrize("backend", BACKENDS)
def test_dequant_gemm(backend):
    m, n, k = 100, 70, 90
    A = torch.randn(m, k, generator=seeded(8)).half().to(backend)
    Bq = torch.randint(-128, 127, (k, n), generator=seeded(9), dtype=torch.int8).to(backend)
    S = (torch.rand(n, generator=seeded(10)) * 0.02 + 0.01).half().to(backend)
    C = torch.full((m, n), float("nan"), device=backend)
    ref.dequant_gemm(A, Bq, S, C)
    expected = A.double() @ (Bq.double() * S.double()[None, :])
    assert rel_err(C, expected) < 2e-3


@pytest.mark.parametrize("backend", BACKENDS)
def test_column_sums_with_atomics(backend):
    X = torch.randn(70, 48, generator=seeded(11)).to(backend)
    out = torch.zeros(48, device=backend)
    ref.column_sums(X, out)
    assert rel_err(out, X.double().sum(dim=0)) < 1e-5


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("block_M", [64, 128])
def test_flash_attention_head_dim_128_on_wgmma(causal, block_M):
    """Head dim 128 on sm_90a: Q K^T reads Q and K from 64-column panels (their 256-byte rows
    are wider than one swizzle atom), P V a [block_N, 128] V tile; both on wgmma, the row
    statistics shared by both layouts."""
    b, h, s, d = 1, 2, 200, 128
    Q, K, V = (torch.randn(b, h, s, d, generator=seeded(20 + i)).half().cuda() for i in range(3))
    O = torch.full_like(Q, float("nan"))
    kernel = ref.flash_attention.compile(Q, K, V, O, causal=causal, block_M=block_M, block_N=64)
    if kernel.arch == "sm_90a":
        assert [m["kind"] for m in kernel.plan["mma"]] == ["wgmma", "wgmma"]
    ref.flash_attention(Q, K, V, O, causal=causal, block_M=block_M, block_N=64)
    expected = torch.nn.functional.scaled_dot_product_attention(
        Q.double(), K.double(), V.double(), is_causal=causal
    )
    assert rel_err(O, expected) < 5e-3


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("d,block_N,s", [(64, 128, 200), (128, 128, 333), (128, 128, 128), (128, 128, 129),
                                         (128, 64, 1), (64, 64, 4096)])
def test_flash_attention_two_warpgroups_with_tma(causal, d, block_N, s):
    """threads=256 over a 128-row Q tile: two consumer warpgroups, K and V by TMA from a producer warpgroup
    (or from the first consumer thread where two CTAs share an SM), P in registers (wgmma's register form);
    sequence lengths off the tiles, a single row, and a long one."""
    b, h = 2, 3
    Q, K, V = (torch.randn(b, h, s, d, generator=seeded(30 + i)).half().cuda() for i in range(3))
    O = torch.full_like(Q, float("nan"))
    cfg = dict(causal=causal, block_M=128, block_N=block_N, threads=256)
    kernel = ref.flash_attention.compile(Q, K, V, O, **cfg)
    # a producer where one CTA fills the SM's shared memory (tile_nb/lower/tma.py)
    if kernel.arch == "sm_90a":
        producer = d == 128 and block_N == 128
        assert kernel.plan["pipeline_kind"] == "tma", kernel.plan["pipeline"]
        assert kernel.plan["producer_warp"] == producer, kernel.plan["pipeline"]
        assert kernel.plan["softmax_overlap"] == producer, kernel.plan["pipeline"]
    ref.flash_attention(Q, K, V, O, **cfg)
    expected = torch.nn.functional.scaled_dot_product_attention(
        Q.double(), K.double(), V.double(), is_causal=causal
    )
    assert rel_err(O, expected) < 5e-3


@pytest.mark.gpu
@pytest.mark.parametrize("d,block_N", [(64, 128), (128, 128)])
@pytest.mark.parametrize("s", [333, 2048])
def test_causal_flash_attention_launched_heaviest_first(d, block_N, s):
    """`tile_nb.heavy_first` = 1 (the default since this test first ran): the grid runs in groups of heads,
    each from its longest causal loops down, with two CTAs per SM kept by the launch bounds (head dim 64, TMA
    without a producer warp) and with a producer warpgroup (head dim 128)."""
    from tile_nb.runtime import compile as rt_compile

    Q, K, V = (torch.randn(2, 3, s, d, generator=seeded(70 + i)).half().cuda() for i in range(3))
    O = torch.full_like(Q, float("nan"))
    cfg = dict(causal=True, block_M=128, block_N=block_N, threads=256)
    kernel = rt_compile(
        ref.flash_attention.specialize(Q, K, V, O, **cfg).with_attr("tile_nb.heavy_first", 1), None
    )
    if kernel.arch == "sm_90a":
        assert any("heaviest first" in n for n in kernel.plan["notes"]), kernel.plan["notes"]
    kernel(Q, K, V, O)
    expected = torch.nn.functional.scaled_dot_product_attention(
        Q.double(), K.double(), V.double(), is_causal=True
    )
    assert rel_err(O, expected) < 5e-3


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("d,stages", [(64, 2), (64, 3), (128, 2)])
@pytest.mark.parametrize("s", [1, 333, 2048])
def test_flash_attention_tma_without_a_producer_warp(causal, d, stages, s):
    """`tile_nb.producer_warp` = 0: K and V by TMA, issued by the first consumer thread at the top of each
    iteration (no producer warp, so head dim 64 keeps two CTAs per SM); both
    T.gemm wait for their own tiles."""
    from tile_nb.runtime import compile as rt_compile

    Q, K, V = (torch.randn(2, 3, s, d, generator=seeded(90 + i)).half().cuda() for i in range(3))
    O = torch.full_like(Q, float("nan"))
    cfg = dict(causal=causal, block_M=128, block_N=128, threads=256, num_stages=stages)
    kernel = rt_compile(
        ref.flash_attention.specialize(Q, K, V, O, **cfg).with_attr("tile_nb.producer_warp", 0), None
    )
    if kernel.arch == "sm_90a":
        assert kernel.plan["pipeline_kind"] == "tma" and kernel.plan["producer_warp"] is False, \
            kernel.plan["pipeline"]
    kernel(Q, K, V, O)
    expected = torch.nn.functional.scaled_dot_product_attention(
        Q.double(), K.double(), V.double(), is_causal=causal
    )
    assert rel_err(O, expected) < 5e-3


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True])
def test_softmax_mma_overlap_agrees_with_the_in_order_loop(causal):
    """The overlapped schedule (tile_nb/lower/tma.py: Overlap) reorders issue and waits, not arithmetic: its
    output matches the in-order loop's to fp16 rounding, for one KV block (the peeled iteration only), two,
    and many. (Not bit for bit: the PTX holds the same arithmetic, but ptxas fuses multiply-adds of the peeled
    and the looped softmax differently; seen on the H200: one element 1 ulp apart at S = 200.)"""
    import tile_nb
    from tile_nb.runtime import compile as rt_compile

    in_order = tile_nb.jit(ref.flash_attention.fn)
    for s in (100, 200, 1000):
        Q, K, V = (torch.randn(1, 4, s, 128, generator=seeded(40 + i)).half().cuda() for i in range(3))
        cfg = dict(causal=causal, block_M=128, block_N=128, threads=256)
        O, O_in_order = torch.full_like(Q, float("nan")), torch.full_like(Q, float("nan"))
        ref.flash_attention(Q, K, V, O, **cfg)
        assert ref.flash_attention.compile(Q, K, V, O, **cfg).plan["softmax_overlap"] is True
        kernel = rt_compile(
            in_order.specialize(Q, K, V, O_in_order, **cfg).with_attr("tile_nb.softmax_overlap", 0), None
        )
        assert kernel.plan["softmax_overlap"] is False
        kernel(Q, K, V, O_in_order)
        torch.testing.assert_close(
            O.float(), O_in_order.float(), rtol=2e-3, atol=1e-4, msg=lambda m, s=s: f"S={s}: {m}"
        )


@pytest.mark.gpu
@pytest.mark.parametrize("d,block_N", [(64, 64), (128, 64), (64, 128)])
@pytest.mark.parametrize("causal", [False, True])
def test_three_consumer_warpgroups_with_the_overlap(d, block_N, causal):
    """192-row tiles over 384 threads (three consumer warpgroups, a producer warpgroup: 512 launched): the
    overlap with setmaxnreg 24 / 160, where ptxas reports fewer entry registers at head dim 64 (106) than the
    128 a 512-thread launch allows; 192x128 at head dim 64 is FlashAttention-3's configuration. Sequence
    lengths off the tiles, one block, and many."""
    cfg = dict(causal=causal, block_M=192, block_N=block_N, threads=384)
    for s in (1, 333, 2048):
        Q, K, V = (torch.randn(1, 3, s, d, generator=seeded(50 + i)).half().cuda() for i in range(3))
        O = torch.full_like(Q, float("nan"))
        kernel = ref.flash_attention.compile(Q, K, V, O, **cfg)
        if kernel.arch == "sm_90a":
            assert "setmaxnreg 24 / 160" in kernel.plan["pipeline"], kernel.plan["pipeline"]
        ref.flash_attention(Q, K, V, O, **cfg)
        expected = torch.nn.functional.scaled_dot_product_attention(
            Q.double(), K.double(), V.double(), is_causal=causal
        )
        assert rel_err(O, expected) < 5e-3, s
