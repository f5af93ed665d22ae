"""Shared-memory and fragment accesses that leave their buffer on every run: the interpreter stops at them,
and the GPU lowering refuses them at the same line (tile_nb/lower/analysis/bounds.py) instead of writing past
the buffer. tilelang's two attention-sink backward examples (bhsd) fill a [heads] fragment over
T.Parallel(block_M), which the GPU ran by writing over the shared pool."""
import pytest
import torch

import tile_nb
import tile_nb.language as T
from tile_nb.interp.errors import OutOfBoundsError
from tile_nb.lower import LoweringError


@tile_nb.jit
def fill_then_add(X, size: int = 1, block_M: int = 128, offset: int = 0, guarded: bool = False):
    """s (a [size] fragment) filled over T.Parallel(block_M) at i + offset, then read back the same way."""
    M = T.const("M")
    X: T.Tensor[[M], T.float32]
    Y = T.empty((M,), T.float32)
    with T.Kernel(T.ceildiv(M, block_M), threads=128) as bx:
        s = T.alloc_fragment([size], T.float32)
        acc = T.alloc_fragment([block_M], T.float32)
        for i in T.Parallel(block_M):
            if guarded:
                if i + offset < size:
                    s[i + offset] = X[0]
            else:
                s[i + offset] = X[0]
        for i in T.Parallel(block_M):
            acc[i] = X[bx * block_M + i] + (s[(i + offset) % size] if guarded else s[i + offset])
        T.copy(acc, Y[bx * block_M])
    return Y


@tile_nb.jit
def shared_rows(X, rows: int = 4, loop_rows: int = 4, stride: int = 1):
    """A [rows, 32] shared tile written at rows r * stride for r < loop_rows, then stored row by row."""
    X: T.Tensor[[4, 32], T.float32]
    Y = T.empty((4, 32), T.float32)
    with T.Kernel(1, threads=128):
        tile = T.alloc_shared([rows, 32], T.float32)
        for r, c in T.Parallel(loop_rows, 32):
            tile[r * stride, c] = X[r % 4, c] * 2
        for r, c in T.Parallel(4, 32):
            Y[r, c] = tile[r % rows, c]
    return Y


def test_a_fragment_written_past_its_end_is_refused_at_the_line():
    x = torch.randn(256)
    with pytest.raises(LoweringError) as info:
        fill_then_add.compile(x, target="sm_90a")
    message = str(info.value)
    assert "s[i] is out of bounds" in message and "reaches 127" in message, message
    assert "shape (1,)" in message, message
    assert info.value.source_line().strip() == "s[i + offset] = X[0]"  # the user's line, not the IR's


def test_the_interpreter_stops_at_the_same_access():
    with pytest.raises(OutOfBoundsError, match="out of bounds for buffer 's' of shape \\(1,\\)"):
        fill_then_add(torch.randn(256))


def test_a_negative_reach_is_refused_too():
    with pytest.raises(LoweringError, match=r"reaches -3, and s has shape \(128,\)"):
        fill_then_add.compile(torch.randn(256), size=128, offset=-3, target="sm_90a")


def test_a_guarded_access_is_not_judged_and_agrees_with_torch():
    x = torch.randn(256)
    fill_then_add.compile(x, guarded=True, target="sm_90a")  # builds
    y = fill_then_add(x, guarded=True)
    torch.testing.assert_close(y, x + x[0])


def test_in_bounds_accesses_build():
    x = torch.randn(256)
    fill_then_add.compile(x, size=128, target="sm_90a")
    fill_then_add.compile(x, size=130, offset=2, target="sm_90a")  # reaches 129 of 130
    torch.testing.assert_close(fill_then_add(x, size=128), x + x[0])
    shared_rows.compile(torch.randn(4, 32), rows=8, stride=2, target="sm_90a")  # rows 0, 2, 4, 6 of 8


def test_a_shared_tile_row_past_the_end_is_refused_with_its_axis():
    with pytest.raises(LoweringError, match=r"index 0 \(r \* 2\) reaches 6, and tile has shape \(4, 32\)"):
        shared_rows.compile(torch.randn(4, 32), stride=2, target="sm_90a")
    with pytest.raises(OutOfBoundsError):
        shared_rows(torch.randn(4, 32), stride=2)


@tile_nb.jit
def read_past(X, size: int = 1):
    """A [size] fragment filled whole, then read at i over T.Parallel(128): only the read leaves it."""
    X: T.Tensor[[128], T.float32]
    Y = T.empty((128,), T.float32)
    with T.Kernel(1, threads=128):
        s = T.alloc_fragment([size], T.float32)
        T.fill(s, 1)
        for i in T.Parallel(128):
            Y[i] = X[i] + s[i]
    return Y


def test_a_read_past_the_end_is_refused_at_its_line():
    with pytest.raises(LoweringError, match=r"s\[i\] is out of bounds: index 0 \(i\) reaches 127") as info:
        read_past.compile(torch.randn(128), target="sm_90a")
    assert info.value.source_line().strip() == "Y[i] = X[i] + s[i]"
    with pytest.raises(OutOfBoundsError):
        read_past(torch.randn(128))
    x = torch.randn(128)
    torch.testing.assert_close(read_past(x, size=128), x + 1)
