"""tilelang's tensor views `T.Tensor(shape, dtype, A.data)` inside a kernel: a row-major view over a global
tensor's memory (a reshape: same dtype, at most as many elements), as tilelang's convolution example
flattens its [KH, KW, C, F] weights and [N, OH, OW, F] output into matrices for T.gemm. Interpreter
against torch at odd shapes, sizes of 1 and a dynamic dim; the sm_90a / sm_80 CUDA builds; the GPU (marked
gpu); errors at the user's line."""

import pytest
import torch
from kernels.cuda import plan

import tile_nb
import tile_nb.language as T
from tile_nb.backend import toolchain
from tile_nb.errors import DSLError

needs_nvcc = pytest.mark.skipif(toolchain.find_tool("nvcc") is None, reason="needs nvcc to build cubins")
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


@tile_nb.jit
def flat_gemm(A, W, block_M: int = 64, block_N: int = 64, block_K: int = 32, stages: int = 2):
    """out[m1, m2, :] = A[m1, m2, :] @ W, with A viewed as a [M1 * M2, K] matrix, W as [K1 * K2, N], and out
    written through a [M1 * M2, N] view."""
    M1 = T.dynamic("M1")
    M2, K, K1, K2, N = T.const("M2, K, K1, K2, N")
    A: T.Tensor[[M1, M2, K], T.float16]
    W: T.Tensor[[K1, K2, N], T.float16]
    out = T.empty((M1, M2, N), T.float16)
    with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M1 * M2, block_M), threads=128) as (bx, by):
        a_flat = T.Tensor((M1 * M2, K), T.float16, A.data)
        w_flat = T.Tensor((K1 * K2, N), T.float16, W.data)
        out_flat = T.Tensor((M1 * M2, N), T.float16, out.data)
        a_s = T.alloc_shared((block_M, block_K), T.float16)
        w_s = T.alloc_shared((block_K, block_N), T.float16)
        acc = T.alloc_fragment((block_M, block_N), T.float32)
        o_s = T.alloc_shared((block_M, block_N), T.float16)
        T.clear(acc)
        for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=stages):
            T.copy(a_flat[by * block_M, k * block_K], a_s)
            T.copy(w_flat[k * block_K, bx * block_N], w_s)
            T.gemm(a_s, w_s, acc)
        T.copy(acc, o_s)
        T.copy(o_s, out_flat[by * block_M, bx * block_N])
    return out


def _check_flat_gemm(M1, M2, K1, K2, N, device):
    torch.manual_seed(M1 * 7 + N)
    a = torch.randn(M1, M2, K1 * K2, dtype=torch.float16, device=device)
    w = torch.randn(K1, K2, N, dtype=torch.float16, device=device)
    out = flat_gemm(a, w)
    want = a.float() @ w.reshape(K1 * K2, N).float()
    assert out.shape == (M1, M2, N)
    torch.testing.assert_close(out.float(), want, rtol=2e-3, atol=2e-2)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("M1,M2,K1,K2,N", [(5, 13, 3, 19, 70), (1, 1, 1, 1, 1), (2, 64, 4, 16, 64)])
def test_views_flatten_weights_and_output(device, M1, M2, K1, K2, N):
    _check_flat_gemm(M1, M2, K1, K2, N, device)


@tile_nb.jit
def rows_plus_one(X, block: int = 16):
    """A view of fewer elements than the tensor: the first R * C elements of X, as rows of C, plus one."""
    N = T.dynamic("N")
    R, C = T.const("R, C")
    X: T.Tensor[[N], T.float32]
    with T.Kernel(R, threads=32) as r:
        rows = T.Tensor((R, C), T.float32, X.data)
        for j in T.Parallel(block):
            if j < C:
                rows[r, j] = rows[r, j] + 1.0


@pytest.mark.parametrize("device", DEVICES)
def test_view_writes_reach_the_tensor_and_stop_at_its_size(device):
    x = torch.randn(50, device=device)
    before = x.clone()
    rows_plus_one(x, R=3, C=11)
    torch.testing.assert_close(x[:33], before[:33] + 1)
    torch.testing.assert_close(x[33:], before[33:])                  # past the view: untouched


@needs_nvcc
@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_views_build(arch):
    a, w = torch.empty(5, 13, 57, dtype=torch.float16), torch.empty(3, 19, 70, dtype=torch.float16)
    k = flat_gemm.compile(a, w, target=arch)
    assert k.cubin and "W_ptr" in k.cuda_source and "out_ptr" in k.cuda_source
    assert rows_plus_one.compile(torch.empty(50), R=3, C=11, target=arch).cubin


@needs_nvcc
def test_views_load_with_cp_async_where_tma_would_be_chosen():
    """At tile-aligned shapes a parameter's copies would use TMA, whose tensor map is encoded on the host,
    outside the kernel that declares the view: a view's copies take cp.async, and the plan says why."""
    a, w = torch.empty(4, 64, 256, dtype=torch.float16), torch.empty(4, 64, 128, dtype=torch.float16)
    k = flat_gemm.compile(a, w, target="sm_90a")
    assert k.cubin and k.plan["pipeline_kind"] == "cp.async"
    assert "a_flat is a T.Tensor(shape, dtype, data) view" in k.plan["pipeline"]
    views = flat_gemm.specialize(a, w).attrs["tile_nb.views"]
    assert [[str(n) for n in x] for x in views] == [["a_flat", "A"], ["w_flat", "W"], ["out_flat", "out"]]


@tile_nb.jit
def gemm_into_view(A, B, block_M: int = 128, block_N: int = 128, block_K: int = 64):
    """A GEMM whose [M, N] result goes from the accumulator straight into a view of its [M // 2, 2, N] out."""
    M, N, K = T.const("M, N, K")
    A: T.Tensor[[M, K], T.float16]
    B: T.Tensor[[K, N], T.float16]
    out = T.empty((M // 2, 2, N), T.float16)
    with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
        flat = T.Tensor((M, N), T.float16, out.data)
        a_s = T.alloc_shared((block_M, block_K), T.float16)
        b_s = T.alloc_shared((block_K, block_N), T.float16)
        acc = T.alloc_fragment((block_M, block_N), T.float32)
        T.clear(acc)
        for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=3):
            T.copy(A[by * block_M, k * block_K], a_s)
            T.copy(B[k * block_K, bx * block_N], b_s)
            T.gemm(a_s, b_s, acc)
        T.copy(acc, flat[by * block_M, bx * block_N])
    return out


@needs_nvcc
def test_a_view_gets_no_tma_store():
    """The parameters' loads take TMA; the store into the view does not (its tensor map would be encoded on
    the host, which knows no view: TVM refused to build it before)."""
    a, b = torch.empty(512, 256, dtype=torch.float16), torch.empty(256, 512, dtype=torch.float16)
    k = gemm_into_view.compile(a, b, target="sm_90a")
    assert k.cubin and k.plan["pipeline_kind"] == "tma" and k.plan["tma_store"] is False
    asked = gemm_into_view.specialize(a, b).with_attr("tile_nb.tma_store", 1)  # the lowering option, on
    note = plan(asked).pipeline_note
    assert "no TMA store (flat is a T.Tensor(shape, dtype, data) view declared in the kernel)" in note, note


@pytest.mark.parametrize("device", DEVICES)
def test_a_gemm_into_a_view(device):
    torch.manual_seed(3)
    a = torch.randn(256, 128, dtype=torch.float16, device=device)
    b = torch.randn(128, 256, dtype=torch.float16, device=device)
    out = gemm_into_view(a, b)
    torch.testing.assert_close(out.reshape(256, 256).float(), a.float() @ b.float(), rtol=2e-3, atol=2e-2)


@needs_nvcc
def test_a_view_of_an_unaligned_tensor_is_unaligned_too():
    """The call's facts: a tensor whose data pointer is not 16-byte aligned gets no vector / async access, nor
    do its views (they share its pointer)."""
    # 2 bytes past an aligned address
    a = torch.empty(4 * 64 * 256 + 1, dtype=torch.float16)[1:].view(4, 64, 256)
    w = torch.empty(4, 64, 128, dtype=torch.float16)
    k = flat_gemm.compile(a, w, target="sm_90a")
    assumes = " ".join(map(str, k.plan["assumes"]))
    assert "A not 16-byte aligned" in assumes and "a_flat not 16-byte aligned" in assumes
    assert "w_flat not" not in assumes and k.cubin


def _kernel(src: str, name: str):
    return tile_nb.run_source(src, {"T": T, "tile_nb": tile_nb}, filename=f"<views-{name}>")[name]


@pytest.mark.parametrize(
    "line,message",
    [
        (
            "v = T.Tensor((8, 8), T.float32, X.data)",
            "the view (8, 8) has 64 elements, more than 'X' (40,) holds (40)",
        ),
        ("v = T.Tensor((4, 10), T.float16, X.data)", "a view keeps the tensor's dtype; 'X' holds float32"),
        (
            "v = T.Tensor((4, 10), T.float32, s.data)",
            "a view is over a global tensor; 's' is in shared.dyn memory",
        ),
        ("v = T.Tensor((4, 10), T.float32, 3)", "data must be a global tensor's `.data`"),
        (
            "v = T.Tensor((4, 10), T.float32, X.data, strides=(10, 1))",
            "strides= and scope= are not supported",
        ),
        ("v = T.Tensor((4, 10), T.float32, S.data)", "'S' is a T.StridedTensor"),
    ],
)
def test_bad_views_are_refused_at_the_line(line, message):
    k = _kernel(f"""
@tile_nb.jit
def bad_view(X, S):
    X: T.Tensor[[40], T.float32]
    S: T.StridedTensor[[4, 10], [20, 1], T.float32]
    with T.Kernel(1, threads=32) as bx:
        s = T.alloc_shared((40,), T.float32)
        {line}
""", "bad_view")
    with pytest.raises(DSLError, match="line 8") as info:
        k(torch.zeros(40), torch.zeros(4, 20)[:, :10])
    assert message in str(info.value)


def test_a_view_outside_a_kernel_is_refused():
    k = _kernel("""
@tile_nb.jit
def early_view(X):
    X: T.Tensor[[40], T.float32]
    v = T.Tensor((4, 10), T.float32, X.data)
    with T.Kernel(1, threads=32) as bx:
        pass
""", "early_view")
    with pytest.raises(DSLError, match="line 5") as info:
        k(torch.zeros(40))
    assert "must be made inside `with T.Kernel(...)`" in str(info.value)
