"""The interpreter's debugging mode and its errors: out-of-bounds accesses name the buffer, the index and the
line; guarded accesses are not errors; missing rules and bad arguments say what is wrong."""
import linecache
import pickle

import pytest
import torch
from kernels.ir_builder import alloc, f32, kernel, randn, store
from tvm import ir, tirx
from tvm.script import tirx as TS
from tvm.script.ir_builder import tirx as T
from tvm.tirx.script import tile as Tx

from tile_nb import interp
from tile_nb.interp import InterpreterError, OutOfBoundsError


def _span(filename, line):
    return ir.Span(ir.SourceName(filename), line, line, 5, 30)


def _shift_kernel(N=32, span=None):
    """S[i + 1] = S[i] for i in parallel(N): the last iteration writes one past the shared buffer."""
    with kernel("shift", [("X", (N,), "float32")], 1) as (k, _):
        S = alloc("S", (N,), "float32", "shared.dyn")
        Tx.copy(S[0:N], k["X"][0:N])
        with T.parallel(0, N) as i:
            T.add_to_parent(tirx.BufferStore(S, S[i] * f32(2), [i + 1], span))
    return k.func


def test_parallel_store_past_shared_buffer_names_buffer_index_and_line():
    cell = "<cell-7>"
    lines = ["@tile_nb.jit\n", "def shift(X):\n", "    ...\n", "        S[i + 1] = S[i] * 2\n"]
    linecache.cache[cell] = (sum(map(len, lines)), None, lines, cell)
    with pytest.raises(OutOfBoundsError) as info:
        interp.run(_shift_kernel(span=_span(cell, 4)), [randn(32)])
    err = info.value
    assert (err.buffer, err.index, err.shape, err.filename, err.line) == ("S", (32,), (32,), cell, 4)
    assert err.block == (0,)
    text = str(err)
    assert "buffer 'S' of shape (32,)" in text and "[32]" in text
    assert f"{cell}, line 4" in text and "S[i + 1] = S[i] * 2" in text and "^^^" in text
    assert err.loop == {"v": 31} and "v = 31" in text   # the IR builder names the loop var `v`
    assert "hint: the GPU would access this element silently" in text


def test_without_span_the_statement_is_described():
    with pytest.raises(OutOfBoundsError) as info:
        interp.run(_shift_kernel(), [randn(32)])
    assert info.value.line is None
    assert "no source location" in str(info.value) and "S[" in str(info.value)


def test_error_pickles_with_its_fields():
    with pytest.raises(OutOfBoundsError) as info:
        interp.run(_shift_kernel(span=_span("k.py", 3)), [randn(32)])
    again = pickle.loads(pickle.dumps(info.value))
    assert (again.buffer, again.index, again.shape, again.line, again.filename) == (
        "S",
        (32,),
        (32,),
        3,
        "k.py",
    )
    assert str(again) == str(info.value)


@TS.prim_func
def _load_past_global(a: TS.handle, b: TS.handle):
    A = TS.match_buffer(a, (10,), "float32")
    B = TS.match_buffer(b, (4,), "float32")
    bx = TS.launch_thread("blockIdx.x", 4)
    tx = TS.launch_thread("threadIdx.x", 128)  # noqa: F841 - the launch is the statement
    B[bx] = A[bx * 3 + 1]


def test_block_level_load_past_global_buffer_with_tvmscript_span():
    with pytest.raises(OutOfBoundsError) as info:
        interp.run(_load_past_global, [randn(10), torch.zeros(4)])
    err = info.value
    assert (err.buffer, err.index, err.block) == ("A", (10,), (3,))
    assert err.filename == __file__ and "B[bx] = A[bx * 3 + 1]" in str(err)


@TS.prim_func
def _copy_past_shared(a: TS.handle):
    A = TS.match_buffer(a, (64, 8), "float32")
    bx = TS.launch_thread("blockIdx.x", 1)  # noqa: F841 - the launch is the statement
    tx = TS.launch_thread("threadIdx.x", 128)  # noqa: F841
    S = TS.alloc_buffer((16, 8), "float32", scope="shared.dyn")
    TS.tile.copy(S[8:24, 0:8], A[0:16, 0:8])


def test_tile_copy_into_shared_region_past_its_end():
    with pytest.raises(OutOfBoundsError) as info:
        interp.run(_copy_past_shared, [randn(64, 8)])
    err = info.value
    assert err.buffer == "S" and err.index == ("8:24", "0:8") and err.shape == (16, 8)
    assert "region [8:24, 0:8]" in str(err) and "tile.copy(S[8:24, 0:8], A[0:16, 0:8])" in str(err)
    assert "only global tensors are guarded" in str(err)


def test_guarded_accesses_are_not_errors():
    """`if i < n: x[i]`, `if_then_else(i < n, x[i], 0)` and global copies past the edge stay silent."""
    N, B = 10, 16
    with kernel("guards", [("X", (N,), "float32"), ("Y", (N,), "float32")], 1) as (k, _):
        X, Y = k["X"], k["Y"]
        F = alloc("F", (B,), "float32", "local.fragment")
        Tx.copy(F[0:B], X[0:B])                                          # global region past the edge
        with T.parallel(0, B) as i:
            store(F, tirx.if_then_else(i < N, X[tirx.min(i, B)] * f32(2), f32(0)), [i])
            with T.If(i < N):
                with T.Then():
                    store(Y, F[i] + X[i], [i])
    X = randn(N)
    Y = torch.zeros(N)
    interp.run(k.func, [X, Y])
    torch.testing.assert_close(Y, 3 * X)


def test_oob_inside_a_taken_branch_is_reported_for_the_first_bad_iteration():
    with kernel("half", [("X", (8,), "float32")], 1) as (k, _):
        X = k["X"]
        with T.parallel(0, 16) as i:
            with T.If(i % 2 == 1):
                with T.Then():
                    store(X, f32(1), [i])
    with pytest.raises(OutOfBoundsError) as info:
        interp.run(k.func, [torch.zeros(8)])
    assert info.value.index == (9,)


def test_two_dim_parallel_oob_reports_the_full_index():
    with kernel("tile2d", [("X", (4, 8), "float32")], 1) as (k, _):
        S = alloc("S", (4, 8), "float32", "shared.dyn")
        with T.parallel(0, 4) as i:
            with T.parallel(0, 8) as j:
                store(S, k["X"][i, j], [i, j + i])
    with pytest.raises(OutOfBoundsError) as info:
        interp.run(k.func, [randn(4, 8)])
    index = info.value.index
    assert index[1] >= 8 and index[1] - index[0] < 8


# ---- missing rules and bad arguments -----------------------------------------------------------------------

def test_missing_rule_names_the_node():
    with kernel("atan", [("X", (4,), "float32")], 1) as (k, _):
        with T.parallel(0, 4) as i:
            store(k["X"], tirx.atan(k["X"][i]), [i])
    with pytest.raises(NotImplementedError, match="atan"):
        interp.run(k.func, [randn(4)])


def test_argument_errors_name_the_parameter():
    with kernel("args", [("X", (4, 4), "float32"), ("s", "float32")], 1) as (k, _):
        store(k["X"], k["s"], [0, 0])
    with pytest.raises(InterpreterError, match=r"takes 2 arguments \(X, s\); got 1"):
        interp.run(k.func, [torch.zeros(4, 4)])
    with pytest.raises(InterpreterError, match="'X' must have dtype torch.float32; got torch.float16"):
        interp.run(k.func, [torch.zeros(4, 4, dtype=torch.float16), 1.0])
    with pytest.raises(InterpreterError, match=r"'X' must have shape \(4, 4\); got \(4, 5\)"):
        interp.run(k.func, [torch.zeros(4, 5), 1.0])
    with pytest.raises(InterpreterError, match="'X' must have rank 2"):
        interp.run(k.func, [torch.zeros(16), 1.0])


def test_copy_shape_mismatch_is_reported():
    with kernel("mismatch", [("X", (8, 8), "float32")], 1) as (k, _):
        S = alloc("S", (8, 8), "float32", "shared.dyn")
        T.add_to_parent(tirx.TilePrimitiveCall(S[0:4, 0:8], k["X"][0:8, 0:4], op=ir.Op.get("tirx.tile.copy")))
    with pytest.raises(InterpreterError, match="different shapes"):
        interp.run(k.func, [randn(8, 8)])


def test_traceback_hides_the_interpreters_frames(monkeypatch):
    import traceback
    monkeypatch.delenv("TILE_NB_DEBUG", raising=False)
    with pytest.raises(OutOfBoundsError) as info:
        interp.run(_shift_kernel(), [randn(32)])
    frames = "".join(traceback.format_tb(info.value.__traceback__))
    assert "memory.py" not in frames and "stmts.py" not in frames
    monkeypatch.setenv("TILE_NB_DEBUG", "1")
    with pytest.raises(OutOfBoundsError) as info:
        interp.run(_shift_kernel(), [randn(32)])
    assert "memory.py" in "".join(traceback.format_tb(info.value.__traceback__))
