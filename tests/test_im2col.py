"""`T.im2col`: a tile of the im2col matrix of an NHWC image, so a convolution is a T.gemm (tilelang's
convolution example, with its weights and output flattened by `T.Tensor(shape, dtype, A.data)` views).
Interpreter against torch.conv2d at odd shapes, strides, dilations and paddings, sizes of 1 and a dynamic
batch; the sm_90a / sm_80 CUDA builds; the GPU (marked gpu); bad arguments at the user's line."""

import pytest
import torch

import tile_nb
import tile_nb.language as T
from tile_nb.backend import toolchain
from tile_nb.errors import DSLError

needs_nvcc = pytest.mark.skipif(toolchain.find_tool("nvcc") is None, reason="needs nvcc to build cubins")
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


@tile_nb.jit
def conv2d_nhwc(data, weight, S: int = 1, D: int = 1, P: int = 0, block_M: int = 64, block_N: int = 64,
                block_K: int = 32):
    N = T.dynamic("N")
    H, W, C, F, K = T.const("H, W, C, F, K")
    OH = (H + 2 * P - D * (K - 1) - 1) // S + 1
    OW = (W + 2 * P - D * (K - 1) - 1) // S + 1
    data: T.Tensor[[N, H, W, C], T.float16]
    weight: T.Tensor[[K, K, C, F], T.float16]
    out = T.empty((N, OH, OW, F), T.float16)
    with T.Kernel(T.ceildiv(F, block_N), T.ceildiv(N * OH * OW, block_M), threads=128) as (bx, by):
        d_s = T.alloc_shared((block_M, block_K), T.float16)
        w_s = T.alloc_shared((block_K, block_N), T.float16)
        acc = T.alloc_fragment((block_M, block_N), T.float32)
        w_flat = T.Tensor((K * K * C, F), T.float16, weight.data)
        out_flat = T.Tensor((N * OH * OW, F), T.float16, out.data)
        T.clear(acc)
        for k in T.Pipelined(T.ceildiv(K * K * C, block_K), num_stages=2):
            T.im2col(data, d_s, by, k, K, S, D, P)
            T.copy(w_flat[k * block_K, bx * block_N], w_s)
            T.gemm(d_s, w_s, acc)
        T.copy(acc, out_flat[by * block_M, bx * block_N])
    return out


def _reference(x, w, S, D, P):
    y = torch.conv2d(
        x.permute(0, 3, 1, 2).float(), w.permute(3, 2, 0, 1).float(), stride=S, padding=P, dilation=D
    )
    return y.permute(0, 2, 3, 1)


def _check(N, H, W, C, F, K, S, D, P, device):
    torch.manual_seed(N + H * 3 + C * 7 + K * 11 + S + D * 13 + P)
    x = torch.randn(N, H, W, C, dtype=torch.float16, device=device)
    w = torch.randn(K, K, C, F, dtype=torch.float16, device=device)
    y = conv2d_nhwc(x, w, S=S, D=D, P=P)
    want = _reference(x, w, S, D, P)
    assert y.shape == want.shape
    torch.testing.assert_close(y.float(), want, rtol=2e-3, atol=3e-2)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("N,H,W,C,F,K,S,D,P", [
    (2, 9, 7, 5, 13, 3, 1, 1, 1),       # odd everything, padding
    (1, 11, 6, 3, 70, 3, 2, 1, 0),      # stride 2, no padding, F past one block
    (3, 10, 9, 4, 8, 2, 1, 2, 2),       # dilation, even kernel, wide padding
    (1, 1, 1, 1, 1, 1, 1, 1, 0),        # sizes of 1
    (2, 8, 8, 16, 64, 3, 1, 1, 1),      # K * K * C = 144: several k blocks
])
def test_conv_as_gemm_matches_torch(device, N, H, W, C, F, K, S, D, P):
    _check(N, H, W, C, F, K, S, D, P, device)


@needs_nvcc
@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_im2col_builds(arch):
    x, w = torch.empty(2, 9, 7, 5, dtype=torch.float16), torch.empty(3, 3, 5, 13, dtype=torch.float16)
    k = conv2d_nhwc.compile(x, w, P=1, target=arch)
    assert k.cubin and "data_ptr" in k.cuda_source


def _kernel(src: str, name: str):
    return tile_nb.run_source(src, {"T": T, "tile_nb": tile_nb}, filename=f"<im2col-{name}>")[name]


@pytest.mark.parametrize("call,message", [
    ("T.im2col(X, s, 0, 0, 3, 0, 1, 1)", "kernel, stride and dilation must be >= 1 and pad >= 0"),
    ("T.im2col(X, s, 0, 0, 3.0, 1, 1, 1)", "T.im2col(kernel=...) must be a Python int; got 3.0"),
    ("T.im2col(s, s, 0, 0, 3, 1, 1, 1)", "img must be an NHWC tensor (4 dims)"),
    ("T.im2col(X, h, 0, 0, 3, 1, 1, 1)", "img (float16) and col (float32) must have one dtype"),
])
def test_bad_arguments_are_refused_at_the_line(call, message):
    k = _kernel(f"""
@tile_nb.jit
def bad_im2col(X):
    X: T.Tensor[[1, 4, 4, 2], T.float16]
    with T.Kernel(1, threads=128) as bx:
        s = T.alloc_shared((16, 16), T.float16)
        h = T.alloc_shared((16, 16), T.float32)
        {call}
""", "bad_im2col")
    with pytest.raises(DSLError, match="line 8") as info:
        k(torch.zeros(1, 4, 4, 2, dtype=torch.float16))
    assert message in str(info.value)


def _plan(C, arch="sm_90a"):
    from tile_nb.backend.target import resolve_target
    from tile_nb.lower.analysis.plan import make_plan

    x, w = torch.empty(2, 9, 7, C, dtype=torch.float16), torch.empty(3, 3, C, 13, dtype=torch.float16)
    return make_plan(conv2d_nhwc.specialize(x, w, P=1), resolve_target(arch))


@needs_nvcc
@pytest.mark.parametrize("C, vector", [(16, "tnb_cp_async_16("), (4, "tnb_cp_async_8("), (5, None)])
def test_the_gather_is_issued_ahead_in_the_widest_groups_its_channels_allow(C, vector):
    """The pipelined loop issues T.im2col's gather ahead like its T.copy (lower/emit/gather.py): one cp.async
    per group of channels when C is a multiple of the group (8 float16: 16 bytes; 4: 8 bytes); with 5
    channels, element by element into the stage."""
    plan = _plan(C)
    (pipeline,) = plan.summary()["pipelines"]
    assert pipeline["prefetched"] == ["d_s", "w_s"] and pipeline["in_order"] == []
    assert plan.refusal("tma").code == "tma.gather"  # TMA loads boxes: the loop stays on cp.async
    x, w = torch.empty(2, 9, 7, C, dtype=torch.float16), torch.empty(3, 3, C, 13, dtype=torch.float16)
    source = conv2d_nhwc.compile(x, w, P=1, target="sm_90a").cuda_source
    gathers = [line for line in source.splitlines() if "data_ptr[" in line and "tnb_cp_async_" in line]
    if vector is None:
        assert not gathers
    else:
        assert gathers and all(vector in line for line in gathers)


@tile_nb.jit
def rows_by_table(X, Idx):
    """Sums the 16-row blocks of X that Idx names, through a gather loop whose rows come from a variable the
    pipelined loop sets: the gather must stay in order."""
    X: T.Tensor[[64, 32], T.float16]
    Idx: T.Tensor[[5], T.int32]
    Y = T.empty((16, 32), T.float32)
    with T.Kernel(1, threads=128) as _:
        s = T.alloc_shared((16, 32), T.float16)
        acc = T.alloc_fragment((16, 32), T.float32)
        row = T.alloc_var(T.int32)
        T.clear(acc)
        for k in T.Pipelined(5, num_stages=2):
            row = Idx[k]
            for i, j in T.Parallel(16, 32):
                s[i, j] = X[row * 16 + i, j]
            for i, j in T.Parallel(16, 32):
                acc[i, j] += s[i, j]
        T.copy(acc, Y)
    return Y


def test_a_gather_whose_rows_the_loop_computes_stays_in_order():
    from tile_nb.backend.target import resolve_target
    from tile_nb.lower.analysis.plan import make_plan

    x, idx = torch.randn(64, 32).half(), torch.tensor([3, 0, 3, 1, 2], dtype=torch.int32)
    (pipeline,) = make_plan(rows_by_table.specialize(x, idx), resolve_target("sm_90a")).summary()["pipelines"]
    assert pipeline["prefetched"] == [] and pipeline["in_order"] == [
        "s is gathered in order: its indices read `row`, which the loop body writes"]


@pytest.mark.parametrize("device", DEVICES)
def test_rows_by_table_agrees_with_torch(device):
    x, idx = torch.randn(64, 32).half(), torch.tensor([3, 0, 3, 1, 2], dtype=torch.int32)
    y = rows_by_table(x.to(device), idx.to(device))
    torch.testing.assert_close(y.cpu(), sum(x[16 * int(r):16 * int(r) + 16].float() for r in idx))


def test_a_gather_whose_stages_would_not_fit_runs_in_order_and_the_plan_says_so():
    from tile_nb.backend.target import resolve_target
    from tile_nb.lower.analysis.plan import make_plan

    # a 512 x 128 im2col tile: 128 KiB, 256 KiB in two stages (with W's 8 KiB, over sm_90a's 227 KiB)
    x, w = torch.empty(2, 9, 7, 16, dtype=torch.float16), torch.empty(3, 3, 16, 13, dtype=torch.float16)
    func = conv2d_nhwc.specialize(x, w, P=1, block_M=512, block_N=16, block_K=128)
    plan = make_plan(func, resolve_target("sm_90a"))
    (pipeline,) = plan.summary()["pipelines"]
    assert pipeline["prefetched"] == ["w_s"] and plan.pool_bytes <= 227 * 1024
    assert any(n.startswith("gather loops (T.im2col) of the pipelined loops run in order: issued ahead they "
                            "would not build (the kernel needs") for n in plan.notes), plan.notes
