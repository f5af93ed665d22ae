"""Pointer tables (language/pointers.py): `A_ptrs: T.Tensor([G], T.ptr)` holds `tensor.data_ptr()`s and the
kernel makes each group's tensors with `T.make_tensor(A_ptrs[g], shape, dtype)`, as tilelang's pointer-table
grouped GEMM does. Interpreter against torch at odd shapes, sizes of 1 and a dynamic table length; the
interpreter's checks of the addresses (no live tensor, misaligned, past the tensor's memory); the sm_90a /
sm_80 builds; the GPU (marked gpu); errors at the user's line."""

import math

import pytest
import torch

import tile_nb
import tile_nb.language as T
from tile_nb.backend import toolchain
from tile_nb.errors import AnnotationError, DSLError, TileNBError

needs_nvcc = pytest.mark.skipif(toolchain.find_tool("nvcc") is None, reason="needs nvcc to build cubins")
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


@tile_nb.jit
def grouped_gemm(A_ptrs, B_ptrs, C_ptrs, tile_starts, max_M: int, K: int, N: int,
                 block_M: int = 32, block_N: int = 32, block_K: int = 32):
    """C_g = A_g @ B_g for each group g, every A_g [max_M, K] (its first M_g rows used), B_g [K, N] and C_g
    [max_M, N] passed by address; block row bx belongs to the last group whose first tile is <= bx."""
    G, tiles = T.const("G, tiles")
    A_ptrs: T.Tensor([G], T.ptr)
    B_ptrs: T.Tensor([G], T.ptr)
    C_ptrs: T.Tensor([G], T.ptr)
    tile_starts: T.Tensor([G], T.int32)
    with T.Kernel(tiles, T.ceildiv(N, block_N), threads=128) as (bx, by):
        a_s = T.alloc_shared((block_M, block_K), T.float16)
        b_s = T.alloc_shared((block_K, block_N), T.float16)
        acc = T.alloc_fragment((block_M, block_N), T.float32)
        g = T.alloc_var(T.int32)
        g = 0
        for i in T.serial(G):
            if bx >= tile_starts[i]:
                g = i
        A = T.make_tensor(A_ptrs[g], (max_M, K), T.float16)
        B = T.make_tensor(B_ptrs[g], (K, N), T.float16)
        C = T.make_tensor(C_ptrs[g], (max_M, N), T.float16)
        m0 = (bx - tile_starts[g]) * block_M
        T.clear(acc)
        for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=2):
            T.copy(A[m0, k * block_K], a_s)
            T.copy(B[k * block_K, by * block_N], b_s)
            T.gemm(a_s, b_s, acc)
        T.copy(acc, C[m0, by * block_N])


def table(tensors, device):
    return torch.tensor([t.data_ptr() for t in tensors], dtype=torch.int64, device=device)


def _check_grouped_gemm(sizes, K, N, device, block_M=32, **blocks):
    torch.manual_seed(sum(sizes) + K + N)
    max_M = max(sizes)
    As = [torch.randn(max_M, K, dtype=torch.float16, device=device) for _ in sizes]
    Bs = [torch.randn(K, N, dtype=torch.float16, device=device) for _ in sizes]
    Cs = [torch.full((max_M, N), 7.0, dtype=torch.float16, device=device) for _ in sizes]
    tiles = [math.ceil(m / block_M) for m in sizes]
    starts = torch.tensor([sum(tiles[:i]) for i in range(len(sizes))], dtype=torch.int32, device=device)
    grouped_gemm(table(As, device), table(Bs, device), table(Cs, device), starts, max_M=max_M, K=K, N=N,
                 tiles=sum(tiles), block_M=block_M, **blocks)
    for g, (a, b, c, m) in enumerate(zip(As, Bs, Cs, sizes, strict=True)):
        want = a[:m].float() @ b.float()
        torch.testing.assert_close(c[:m].float(), want, rtol=2e-3, atol=2e-2, msg=f"group {g}")
        rows_written = min(max_M, tiles[g] * block_M)  # a group's last tile writes its padding rows too
        assert (c[rows_written:] == 7.0).all(), f"group {g}: rows past its tiles were written"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("sizes,K,N", [([16, 33, 1], 40, 50), ([1], 1, 1), ([64, 5], 96, 33)])
def test_grouped_gemm_through_pointer_tables(device, sizes, K, N):
    _check_grouped_gemm(sizes, K, N, device)


@pytest.mark.gpu
def test_grouped_gemm_through_pointer_tables_at_wgmma_tiles():
    """Tiles where the sm_90a lowering picks wgmma (the copies stay cp.async: tensor maps are encoded on the
    host, which never sees the tables' tensors)."""
    _check_grouped_gemm([64, 200, 129], 256, 384, "cuda", block_M=64, block_N=128, block_K=64)


@tile_nb.jit
def scale_each(ptrs, lengths, block: int = 64):
    """x_g[:lengths[g]] *= g + 1 for every float32 tensor x_g of the table; the table's length is dynamic."""
    G = T.dynamic("G")
    ptrs: T.Tensor([G], T.ptr)
    lengths: T.Tensor([G], T.int32)
    with T.Kernel(G, threads=64) as g:
        x = T.make_tensor(ptrs[g], (block,), T.float32)
        for i in T.Parallel(block):
            if i < lengths[g]:
                x[i] = x[i] * (g + 1)


@pytest.mark.parametrize("device", DEVICES)
def test_a_dynamic_table_length_and_views_of_one_tensor(device):
    """Two entries are views into one tensor (at 16-byte multiples); one table length serves every call."""
    base = torch.randn(200, device=device)
    for parts in ([base[:64], base[64:128]], [base[:64], base[64:128], base[132:196]], [base[4:68]]):
        before = base.clone()
        lengths = torch.tensor([64, 3, 50][:len(parts)], dtype=torch.int32, device=device)
        scale_each(table(parts, device), lengths)
        want = before.clone()
        for g, p in enumerate(parts):
            start = p.data_ptr() // 4 - base.data_ptr() // 4
            want[start:start + int(lengths[g])] *= g + 1
        torch.testing.assert_close(base, want)


def test_tensors_without_memory_are_passed_over():
    """Live tensors with no real memory (torch.compile's fake and functional tensors, left by an earlier
    compile in the process) do not stop the interpreter's search for an address."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch._subclasses.functional_tensor import FunctionalTensor, FunctionalTensorMode

    with FakeTensorMode():
        fake = torch.empty(64)
    with FunctionalTensorMode():
        functional = FunctionalTensor.to_functional(torch.randn(4))
    x = torch.randn(64)
    want = x * 1
    scale_each(table([x], "cpu"), torch.tensor([64], dtype=torch.int32))
    torch.testing.assert_close(x, want)
    assert fake.shape == (64,) and functional.shape == (4,)


def _bad_call(ptrs) -> str:
    with pytest.raises(TileNBError) as info:
        scale_each(ptrs, torch.ones(len(ptrs), dtype=torch.int32))
    assert "x = T.make_tensor(ptrs[g], (block,), T.float32)" in str(info.value)  # the user's line
    return str(info.value)


def test_the_interpreter_checks_each_address():
    x = torch.randn(100)
    # not the memory of any live tensor
    message = _bad_call(torch.tensor([x.data_ptr(), 16], dtype=torch.int64))
    assert "'x' is made from the address 0x10, which is not in the memory of any live torch tensor" in message
    # not 16-byte aligned (the GPU code's vector accesses would fault)
    assert "not 16-byte aligned" in _bad_call(torch.tensor([x[1:].data_ptr()], dtype=torch.int64))
    # the (64,) tensor runs past the 100 floats of x when it starts at x[40]
    message = _bad_call(torch.tensor([x[40:].data_ptr()], dtype=torch.int64))
    assert "'x' (64,) torch.float32 needs 256 bytes" in message and "has 240 bytes left" in message


@needs_nvcc
@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_pointer_tables_build(arch):
    sizes, K, N = [64, 200, 129], 256, 384
    As = [torch.empty(200, K, dtype=torch.float16) for _ in sizes]
    starts = torch.zeros(3, dtype=torch.int32)
    ptrs = table(As, "cpu")
    k = grouped_gemm.compile(ptrs, ptrs, ptrs, starts, max_M=200, K=K, N=N, tiles=9, block_M=64, block_N=128,
                             block_K=64, target=arch)
    assert k.cubin
    # each address is loaded from its table in the kernel, and read through
    assert "(void*)A_ptrs_ptr[" in k.cuda_source and "((half*)A_address)" in k.cuda_source
    assert k.plan["pipeline_kind"] == "cp.async"
    if arch == "sm_90a":
        assert "A is made in the kernel from an address in A_ptrs" in k.plan["pipeline"]
        assert "wgmma" in k.cuda_source


def _kernel(src: str, name: str):
    return tile_nb.run_source(src, {"T": T, "tile_nb": tile_nb}, filename=f"<pointers-{name}>")[name]


@pytest.mark.parametrize(
    "before,inside,message",
    [
        ("X = T.make_tensor(ptrs[0], (8,), T.float32)", "pass",
         "T.make_tensor(table[i], shape, dtype) makes a tensor from an address loaded in the kernel"),
        ("", "X = T.make_tensor(lengths[0], (8,), T.float32)",
         "T.make_tensor takes a `T.ptr` parameter or an element of a pointer table"),
        ("", "X = T.make_tensor(ptrs[0], (8,), T.tfloat32)", "a pointer table's tensors hold plain dtypes"),
        ("", "X = T.make_tensor(ptrs[0], (8,), T.int4)", "T.make_tensor dtype: tile_nb has no int4 values"),
    ],
)
def test_bad_tables_are_refused_at_the_line(before, inside, message):
    k = _kernel(f"""
@tile_nb.jit
def bad_table(ptrs, lengths):
    ptrs: T.Tensor([2], T.ptr)
    lengths: T.Tensor([2], T.int32)
    {before}
    with T.Kernel(1, threads=32) as bx:
        {inside}
""", "bad_table")
    with pytest.raises(DSLError, match=f"line {6 if before else 8}") as info:
        k(torch.zeros(2, dtype=torch.int64), torch.zeros(2, dtype=torch.int32))
    assert message in str(info.value)


def test_a_strided_table_is_refused():
    with pytest.raises(AnnotationError, match=r"a table of pointers is a contiguous T.Tensor\(shape, T.ptr"):
        T.StridedTensor((4,), (2,), T.ptr)
    assert repr(T.Tensor((4,), T.ptr)) == "T.Tensor[[4], T.ptr]"
