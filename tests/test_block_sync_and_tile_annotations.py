"""tilelang's `T.sync_threads()` (no effect in tile_nb's block-level statements, refused inside warp-group
regions) and its tile annotations of T.macro parameters, `T.SharedBuffer(shape, dtype)`, `T.FragmentBuffer`,
`T.LocalBuffer` (a call is checked against them): a bitonic sort of each row in shared memory, written as
tilelang's top-k kernels write it, against torch.sort on the interpreter at odd row counts and widths of 1;
the sm_90a / sm_80 builds; the GPU (marked gpu); errors at the user's line."""

import math

import pytest
import torch

import tile_nb
import tile_nb.language as T
from tile_nb.backend import toolchain
from tile_nb.errors import AnnotationError, DSLError

needs_nvcc = pytest.mark.skipif(toolchain.find_tool("nvcc") is None, reason="needs nvcc to build cubins")
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


def make_sort(width: int):
    """Sorts each row of X (R x W, W <= width) ascending, padded with +inf to `width` (a power of 2)."""
    stages = int(math.log2(width))

    @T.macro
    def bitonic(values: T.SharedBuffer([width], T.float32), order: T.SharedBuffer([width], T.int32)):
        T.sync_threads()
        for s in T.serial(stages):
            for t in T.serial(s + 1):
                for i in T.Parallel(width):
                    j = i ^ (1 << (s - t))
                    up = (i & (1 << (s + 1))) == 0
                    if i < j and ((up and values[i] > values[j]) or (not up and values[i] < values[j])):
                        v = values[i]
                        values[i] = values[j]
                        values[j] = v
                        o = order[i]
                        order[i] = order[j]
                        order[j] = o
                T.sync_threads()

    @tile_nb.jit
    def sort_rows(X):
        R, W = T.const("R, W")
        X: T.Tensor[[R, W], T.float32]
        out = T.empty((R, W), T.float32)
        idx = T.empty((R, W), T.int32)
        with T.Kernel(R, threads=128) as r:
            values = T.alloc_shared((width,), T.float32)
            order = T.alloc_shared((width,), T.int32)
            for i in T.Parallel(width):
                values[i] = T.if_then_else(i < W, X[r, i], T.infinity(T.float32))
                order[i] = i
            T.sync_threads()
            bitonic(values, order)
            for i in T.Parallel(width):
                if i < W:
                    out[r, i] = values[i]
                    idx[r, i] = order[i]
        return out, idx

    return sort_rows


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("R,W,width", [(3, 37, 64), (1, 1, 2), (5, 64, 64), (2, 100, 128)])
def test_bitonic_sort_of_each_row(device, R, W, width):
    torch.manual_seed(R * 100 + W)
    x = torch.randn(R, W, device=device)
    out, idx = make_sort(width)(x)
    want, _ = torch.sort(x, dim=1)
    torch.testing.assert_close(out, want)
    torch.testing.assert_close(torch.gather(x, 1, idx.long()), want)  # the order says where each came from


@needs_nvcc
@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_bitonic_sort_builds(arch):
    assert make_sort(64).compile(torch.empty(3, 37), target=arch).cubin


def _kernel(src: str, name: str):
    return tile_nb.run_source(src, {"T": T, "tile_nb": tile_nb}, filename=f"<sync-{name}>")[name]


@pytest.mark.parametrize(
    "alloc,message",
    [
        ("T.alloc_fragment((64,), T.float32)", "got 'tile', a local.fragment buffer"),
        ("T.alloc_shared((64,), T.float16)", "got 'tile', a float16 buffer"),
        ("T.alloc_shared((32,), T.float32)", "got 'tile' of shape (32,)"),
        ("T.alloc_shared((64, 2), T.float32)", "got 'tile' of shape (64, 2)"),
    ],
)
def test_a_macro_argument_that_is_not_the_annotated_tile_is_refused_at_the_call(alloc, message):
    k = _kernel(f"""
@T.macro
def halve(values: T.SharedBuffer([64], T.float32)):
    for i in T.Parallel(64):
        values[i] = values[i] * 0.5

@tile_nb.jit
def use(X):
    X: T.Tensor[[64], T.float32]
    with T.Kernel(1, threads=64) as bx:
        tile = {alloc}
        halve(tile)
""", "use")
    with pytest.raises(DSLError, match="line 12") as info:
        k(torch.zeros(64))
    said = "calling the T.macro 'halve': its parameter 'values' is annotated T.SharedBuffer([64], T.float32)"
    assert said in str(info.value)
    assert message in str(info.value)


def test_the_annotations_take_both_spellings_and_name_bad_dtypes():
    assert T.SharedBuffer[(4, 8), T.float16] == T.SharedBuffer((4, 8), T.float16)
    assert repr(T.FragmentBuffer([16], "int32")) == "T.FragmentBuffer([16], T.int32)"
    assert T.LocalBuffer((2,)).scopes == ("local", "local.var", "local.thread")
    with pytest.raises(AnnotationError, match="T.LocalBuffer dtype"):
        T.LocalBuffer((2,), "float7")


def test_sync_threads_in_a_warp_group_region_is_refused():
    k = _kernel("""
@tile_nb.jit
def ws_sync(X):
    X: T.Tensor[[256], T.float32]
    with T.Kernel(1, threads=256) as bx:
        with T.ws(0):
            T.sync_threads()
""", "ws_sync")
    with pytest.raises(DSLError, match="line 7") as info:
        k(torch.zeros(256))
    assert "T.sync_threads() inside a warp-group region" in str(info.value)


def test_sync_threads_outside_a_kernel_is_refused():
    k = _kernel("""
@tile_nb.jit
def early_sync(X):
    X: T.Tensor[[4], T.float32]
    T.sync_threads()
    with T.Kernel(1) as bx:
        pass
""", "early_sync")
    with pytest.raises(DSLError, match="T.sync_threads must be called inside"):
        k(torch.zeros(4))
