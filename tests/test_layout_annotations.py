"""`T.annotate_layout`: a swizzle of a shared tile is accepted as a recorded hint (results unchanged, on the
interpreter and the GPU); a layout written by hand on chip (`T.Layout` of a fragment, any `T.Fragment`) or a
swizzle of a global buffer or a fragment is refused at the user's line. (`T.Layout` on a kernel parameter is
honored: tests/test_global_layouts.py.)"""
import pytest
import torch

import tile_nb
import tile_nb.language as T
import tile_nb.tilelang as tilelang
from tile_nb.errors import DSLError


@tile_nb.jit
def copy_through_shared(A, block: int = 32):
    M, N = T.const("M, N")
    A: T.Tensor[[M, N], T.float16]
    B = T.empty((M, N), T.float16)
    with T.Kernel(T.ceildiv(M, block), T.ceildiv(N, block), threads=128) as (bx, by):
        tile = T.alloc_shared((block, block), T.float16)
        T.annotate_layout({tile: tilelang.layout.make_swizzled_layout(tile)})
        T.copy(A[bx * block, by * block], tile)
        T.copy(tile, B[bx * block, by * block])
    return B


@pytest.mark.parametrize("m,n", [(70, 45), (1, 1)])
def test_swizzle_of_a_shared_tile_is_a_recorded_hint(m, n):
    a = torch.randn(m, n, dtype=torch.float16)
    torch.testing.assert_close(copy_through_shared(a), a)
    hints = [str(h) for h in copy_through_shared.specialize(M=m, N=n).attrs["tile_nb.hints"]]
    line = copy_through_shared.fn.__code__.co_firstlineno + 7
    assert hints == [
        f"annotate_layout(tile: swizzled) (tile_nb picks the shared-memory swizzle itself) at line {line}"
    ]


def test_swizzle_hint_compiles_for_sm90a():
    assert "__global__" in copy_through_shared.compile(M=70, N=45, target="sm_90a").cuda_source


@pytest.mark.gpu
def test_swizzle_hint_on_gpu():
    a = torch.randn(70, 45, dtype=torch.float16, device="cuda")
    torch.testing.assert_close(copy_through_shared(a), a)


def _annotated(layout_of):
    @tile_nb.jit
    def k(A):
        A: T.Tensor[[8, 8], T.float32]
        with T.Kernel(1, threads=32) as _:
            frag = T.alloc_fragment((8, 8), T.float32)
            T.annotate_layout(layout_of(A, frag))
            T.copy(A, frag)
            T.copy(frag, A)

    return k


@pytest.mark.parametrize(
    "layout_of,what",
    [
        (
            lambda A, f: {f: T.Layout(f.shape, lambda i, j: [j, i])},
            r"'frag' \(local.fragment\) with T.Layout\(\(8, 8\), \.\.\.\)",
        ),
        (lambda A, f: {f: T.Fragment(f.shape)}, r"'frag' \(local.fragment\) with T.Fragment\(\.\.\.\)"),
        (lambda A, f: {A: tilelang.layout.make_swizzled_layout(A)}, r"'A' \(global\) with a swizzle"),
    ],
)
def test_layouts_written_by_hand_are_refused_at_the_line(layout_of, what):
    k = _annotated(layout_of)
    with pytest.raises(DSLError, match=f"T.annotate_layout of {what} is not supported") as info:
        k(torch.randn(8, 8))
    assert info.value.lineno == k.fn.__code__.co_firstlineno + 5
