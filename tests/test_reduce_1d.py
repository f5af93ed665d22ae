"""`T.reduce_max / sum / min` of a 1-d tile along dim 0 into a one-element destination (tilelang
issues 1690 and 1719): `T.reduce_max(x, m, dim=0)` with `x` of shape [N] and `m` of shape [1] (or [1,
1]). Refused at elaboration before ("gives [], but the destination is [1]"); now the one value fills
the one element. Fragment, shared and local operands, clear=False, N of 1, odd N and N above the
thread count, rows of a dynamic row count; on the interpreter and (marked gpu) on CUDA, against torch;
sm_90a and sm_80 builds through nvcc."""
import pytest
import torch

import tile_nb
import tile_nb.language as T
from tile_nb.errors import DSLError

BACKENDS = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


def _alloc(scope, shape, dtype):
    return {"fragment": T.alloc_fragment, "shared": T.alloc_shared, "local": T.alloc_local}[scope](
        shape, dtype
    )


@tile_nb.jit
def row_reduce_1d(A, Out, kind: str = "max", src_scope: str = "fragment", dst_scope: str = "fragment",
                  threads: int = 128, clear: bool = True, dst_shape=(1,)):
    R = T.dynamic("R")
    N = T.const("N")
    A: T.Tensor[[R, N], T.float32]
    Out: T.Tensor[[R], T.float32]
    with T.Kernel(R, threads=threads) as r:
        x = _alloc(src_scope, (N,), T.float32)
        m = _alloc(dst_scope, dst_shape, T.float32)
        T.copy(A[r, 0:N], x)
        if not clear:
            T.copy(Out[r:r + 1], m)
        reduce = {"max": T.reduce_max, "sum": T.reduce_sum, "min": T.reduce_min}[kind]
        reduce(x, m, dim=0, clear=clear)
        T.copy(m, Out[r:r + 1])


def _reference(a, out0, kind, clear):
    a = a.double().cpu()
    red = {"max": a.amax(1), "sum": a.sum(1), "min": a.amin(1)}[kind]
    if clear:
        return red
    old = out0.double().cpu()
    return {"max": torch.maximum(red, old), "sum": red + old, "min": torch.minimum(red, old)}[kind]


def _check(backend, R, N, kind="max", clear=True, **cfg):
    torch.manual_seed(R * 1000 + N)
    a = torch.randn(R, N).to(backend)
    out = torch.randn(R).to(backend)  # what clear=False combines with
    want = _reference(a, out, kind, clear)
    row_reduce_1d(a, out, kind=kind, clear=clear, **cfg)
    torch.testing.assert_close(out.double().cpu(), want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", ["max", "sum", "min"])
@pytest.mark.parametrize("N", [16, 13, 1, 200])
@pytest.mark.parametrize("threads", [128, 32])
def test_fragment_into_one_element_fragment(backend, kind, N, threads):
    """tilelang's issue 1690: T.reduce_max(tmp, tmp_max, dim=0) with tmp [N], tmp_max [1], both fragments."""
    _check(backend, 3, N, kind, threads=threads)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "src_scope,dst_scope",
    [
        ("shared", "shared"),
        ("shared", "fragment"),
        ("fragment", "shared"),
        ("fragment", "local"),
        ("shared", "local"),
    ],
)
@pytest.mark.parametrize("kind", ["max", "sum"])
def test_other_scopes(backend, src_scope, dst_scope, kind):
    _check(backend, 5, 37, kind, src_scope=src_scope, dst_scope=dst_scope)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", ["max", "sum"])
@pytest.mark.parametrize("src_scope", ["fragment", "shared"])
def test_clear_false_combines_with_the_old_value(backend, kind, src_scope):
    _check(backend, 4, 21, kind, clear=False, src_scope=src_scope)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("R", [1, 7])
def test_one_by_one_destination_and_a_dynamic_row_count(backend, R):
    _check(backend, R, 45, "sum", dst_shape=(1, 1))
    _check(backend, R, 45, "max", dst_shape=(1, 1), src_scope="shared", dst_scope="shared")


@tile_nb.jit
def one_into_one(A, Out):
    """tilelang's issue 1719 (layout_6): a [1] fragment reduced (default dim) into a [1] fragment."""
    A: T.Tensor[[1], T.float32]
    Out: T.Tensor[[1], T.float32]
    with T.Kernel(1, threads=32) as _:
        t1 = T.alloc_fragment((1,), T.float32)
        t2 = T.alloc_fragment((1,), T.float32)
        T.copy(A, t1)
        T.reduce_sum(t1, t2)
        T.copy(t2, Out)


@pytest.mark.parametrize("backend", BACKENDS)
def test_one_element_into_one_element(backend):
    a = torch.tensor([-2.5]).to(backend)
    out = torch.zeros(1).to(backend)
    one_into_one(a, out)
    assert out.item() == -2.5


@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_builds_for_sm90a_and_sm80(arch, tmp_path):
    from kernels.cuda import ptxas_report

    for cfg in (
        dict(N=200),
        dict(N=13, kind="sum", threads=32),
        dict(N=16, src_scope="shared", dst_scope="local"),
        dict(N=45, dst_shape=(1, 1), clear=False),
    ):
        ptxas_report(row_reduce_1d.compile(target=arch, **cfg).cuda_source, arch, tmp_path, fast_math=False)
    ptxas_report(one_into_one.compile(target=arch).cuda_source, arch, tmp_path, fast_math=False)


def test_a_destination_of_more_than_one_element_is_still_refused():
    with pytest.raises(DSLError, match=r"T.reduce_max: reducing dim 0 of a \[16\] tile gives \[\], but the "
                                       r"destination is \[2\]") as info:
        row_reduce_1d.compile(N=16, dst_shape=(2,), target="sm_90a")
    assert "reduce(x, m, dim=0, clear=clear)" in info.value.source_line()
