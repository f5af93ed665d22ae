"""`T.alloc_global`: a scratch tensor in global memory that the `T.Kernel`s of one body share (tilelang's
flash decoding splits the work in one kernel and combines the partial results in a second). The call
allocates it and does not return it. Interpreter against torch, sm_90a CUDA, and the GPU (marked gpu);
errors at the user's line. Also `T.copy`'s hints `disable_tma=`, `eviction_policy=`, `coalesced_width=`
(recorded, results unchanged)."""
import linecache

import pytest
import torch

import tile_nb
import tile_nb.language as T
import tile_nb.tilelang as tl
from tile_nb.errors import DSLError


@tile_nb.jit
def rowsum_split(X, split: int = 4, block: int = 16):
    """Row sums in two kernels: each of `split` blocks per row tile sums a chunk of columns into `part`, then
    a second kernel adds the chunks."""
    N = T.dynamic("N")
    D = T.const("D")
    X: T.Tensor[[N, D], T.float32]
    Y = T.empty((N,), T.float32)
    part = T.alloc_global((N, split), T.float32)
    chunk = T.ceildiv(D, split)
    with T.Kernel(T.ceildiv(N, block), split, threads=32) as (bx, s):
        acc = T.alloc_fragment((block,), T.float32)
        T.clear(acc)
        for k in T.serial(chunk):
            for i in T.Parallel(block):
                if bx * block + i < N and s * chunk + k < D:
                    acc[i] += X[bx * block + i, s * chunk + k]
        for i in T.Parallel(block):
            if bx * block + i < N:
                part[bx * block + i, s] = acc[i]
    with T.Kernel(T.ceildiv(N, block), threads=32) as bx:
        tot = T.alloc_fragment((block,), T.float32)
        T.clear(tot)
        for s in T.serial(split):
            for i in T.Parallel(block):
                if bx * block + i < N:
                    tot[i] += part[bx * block + i, s]
        for i in T.Parallel(block):
            if bx * block + i < N:
                Y[bx * block + i] = tot[i]
    return Y


def _check_rowsum(N, D, split, device):
    torch.manual_seed(N * 31 + D)
    x = torch.randn(N, D, device=device)
    y = rowsum_split(x, split=split)
    assert isinstance(y, torch.Tensor) and y.shape == (N,)      # the scratch tensor is not returned
    torch.testing.assert_close(y, x.double().sum(1).float(), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("N,D,split", [(37, 13, 4), (1, 1, 1), (1, 5, 3), (100, 64, 2)])
def test_split_and_combine_through_a_scratch_tensor(N, D, split):
    _check_rowsum(N, D, split, "cpu")


@pytest.mark.gpu
@pytest.mark.parametrize("N,D,split", [(37, 13, 4), (1, 1, 1), (1000, 257, 8)])
def test_split_and_combine_on_gpu(N, D, split):
    _check_rowsum(N, D, split, "cuda")


def test_scratch_is_the_last_parameter_and_builds_for_sm_90a():
    x = torch.randn(37, 13)
    func = rowsum_split.specialize(x)
    assert [p.name for p in func.params] == ["X", "Y", "part"]
    assert list(func.attrs["tile_nb.outputs"]) == ["Y"] and list(func.attrs["tile_nb.scratch"]) == ["part"]
    source = rowsum_split.compile(x, target="sm_90a").cuda_source
    assert source.count("part_ptr") >= 2                       # both kernels take it


@tl.jit(out_idx=[-1])
def _decode_like(batch, dim, num_split=3, block=16):
    """tilelang's flash-decoding shape of the idea: a `@T.prim_func` factory,
    scratch made before the kernels."""
    @T.prim_func
    def main(X: T.Tensor((batch, dim), T.float16), O: T.Tensor((batch,), T.float32)):
        partial = T.alloc_global([batch, num_split], T.float32)
        with T.Kernel(batch, num_split, threads=32) as (b, s):
            acc = T.alloc_fragment((1,), T.float32)
            T.clear(acc)
            for k in T.serial(T.ceildiv(dim, num_split)):
                if s * T.ceildiv(dim, num_split) + k < dim:
                    acc[0] += T.cast(X[b, s * T.ceildiv(dim, num_split) + k], T.float32)
            partial[b, s] = acc[0]
        with T.Kernel(batch, threads=32) as b:
            tot = T.alloc_fragment((1,), T.float32)
            T.clear(tot)
            for s in T.serial(num_split):
                tot[0] += partial[b, s]
            O[b] = tot[0]
    return main


@pytest.mark.parametrize("batch,dim", [(5, 17), (1, 1)])
def test_factory_form(batch, dim):
    x = torch.randn(batch, dim, dtype=torch.float16)
    out = _decode_like(batch, dim)(x)
    torch.testing.assert_close(out, x.double().sum(1).float(), atol=1e-4, rtol=1e-4)


@tile_nb.jit
def _bad(X, where: str = "inside"):
    N = T.const("N")
    X: T.Tensor[[N], T.float32]
    if where == "scope":
        T.alloc_global((N,), T.float32, scope="shared")  # error: T.alloc_global(scope=...)
    if where == "clash":
        X = T.alloc_global((N,), T.float32)  # error: already names a parameter
    with T.Kernel(1, threads=32):
        if where == "inside":
            T.alloc_global((N,), T.float32)  # error: outside `with T.Kernel
        X[0] = 1.0


@pytest.mark.parametrize(
    "where,message",
    [
        ("inside", "must be called outside `with T.Kernel"),
        ("scope", "T.alloc_global(scope=...): expected 'global'; got 'shared'"),
        ("clash", "already names a parameter or output"),
    ],
)
def test_misuse_is_refused_at_the_line(where, message):
    with pytest.raises(DSLError) as info:
        _bad(torch.zeros(4), where=where)
    err = info.value
    assert message in err.message
    assert "T.alloc_global" in linecache.getline(err.filename, err.lineno)


# -- T.copy hints --------------------------------------------------------------------------------------------
@tile_nb.jit
def _copy_hinted(X, policy: str = "evict_first", block: int = 32):
    N = T.const("N")
    X: T.Tensor[[N], T.float16]
    Y = T.empty((N,), T.float16)
    with T.Kernel(T.ceildiv(N, block), threads=32) as bx:
        s = T.alloc_shared((block,), T.float16)
        T.copy(X[bx * block], s, disable_tma=True, eviction_policy=policy)
        T.copy(s, Y[bx * block], coalesced_width=2)
    return Y


def test_copy_hints_are_recorded_and_change_nothing():
    x = torch.randn(45, dtype=torch.float16)
    torch.testing.assert_close(_copy_hinted(x), x, atol=0, rtol=0)
    hints = list(_copy_hinted.specialize(x).attrs["tile_nb.hints"])
    assert hints[0].startswith("copy(disable_tma=True, eviction_policy='evict_first')")
    assert hints[1].startswith("copy(coalesced_width=2)")
    with pytest.raises(
        DSLError, match=r"T\.copy\(eviction_policy=\.\.\.\): expected one of .* got 'evict_all'"
    ):
        _copy_hinted(x, policy="evict_all")
