"""`T.breakpoint()`: the interpreter stops at the user's line in a frame whose locals are the kernel's tiles
and scalars (through `sys.breakpointhook`, so these tests record the frame instead of stopping); the GPU
lowering refuses it at the line."""
import os
import subprocess
import sys

import pytest
import torch

import tile_nb
import tile_nb.language as T
from tile_nb.errors import DSLError
from tile_nb.interp import InterpreterError

_SOURCE = open(__file__).read().splitlines()
# Each kernel's first interpreted call warns that the GPU lowering refuses T.breakpoint (tested once below).
pytestmark = pytest.mark.filterwarnings("ignore:(?s).*interpreter-only debugging aid")


def _line(marker: str) -> int:
    hits = [n for n, text in enumerate(_SOURCE, 1) if text.rstrip().endswith(f"# {marker}")]
    assert len(hits) == 1, marker
    return hits[0]


@pytest.fixture
def stops(monkeypatch):
    """Replace the debugger by a hook that records each stop: file, line,
    function and a copy of the locals."""
    seen = []

    def hook(*args, **kwargs):
        frame = sys._getframe(1)
        local = {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in frame.f_locals.items()
                 if not k.startswith("__")}
        seen.append((frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name, local))
    monkeypatch.setattr(sys, "breakpointhook", hook)
    return seen


@tile_nb.jit
def scaled_rows(X, s, where=0, bm: int = 4, bn: int = 8):
    M, N = T.const('M, N')
    X: T.Tensor[[M, N], T.float32]
    s: T.float32
    out = T.empty((M, N), T.float32)
    with T.Kernel(T.ceildiv(M, bm), T.ceildiv(N, bn)) as (bx, by):
        tile = T.alloc_shared((bm, bn), T.float32)
        acc = T.alloc_fragment((bm,), T.float32)
        total = T.alloc_var(T.float32)
        total = 1.5
        for k in T.serial(2):
            T.copy(X[bx * bm, by * bn], tile)
        T.reduce_sum(tile, acc, dim=1)
        T.breakpoint(block=where)  # stop-here
        for i, j in T.Parallel(bm, bn):
            if bx * bm + i < M and by * bn + j < N:
                out[bx * bm + i, by * bn + j] = tile[i, j] * s + total
    return out


def _call(X, where=0, scale=2.0):
    return scaled_rows(X, scale, where=where)


def test_stops_once_in_the_first_block_with_the_kernels_names(stops):
    X = torch.randn(10, 13)
    out = _call(X)
    torch.testing.assert_close(out, X * 2.0 + 1.5)  # the run itself is unchanged
    assert len(stops) == 1
    filename, line, name, local = stops[0]
    assert (filename, line, name) == (__file__, _line("stop-here"), "scaled_rows")
    assert local["bx"] == 0 and local["by"] == 0 and isinstance(local["bx"], int)
    torch.testing.assert_close(local["tile"], X[0:4, 0:8])
    torch.testing.assert_close(local["acc"], X[0:4, 0:8].sum(dim=1))
    assert local["total"].shape == () and float(local["total"]) == 1.5  # T.alloc_var: a 0-d tensor
    assert local["s"].shape == () and float(local["s"]) == 2.0          # a float scalar parameter, too
    torch.testing.assert_close(local["X"], X)
    assert "out" in local and "k" not in local and "tx" not in local     # k's loop has ended; no thread index
    assert "i" not in local and "j" not in local                         # the parallel loop comes later


def test_block_filter_picks_one_block_and_none_means_every_block(stops):
    X = torch.randn(10, 13)   # grid (3, 2)
    _call(X, where=(2, 1))
    assert [(s[3]["bx"], s[3]["by"]) for s in stops] == [(2, 1)]
    torch.testing.assert_close(stops[0][3]["tile"][:2, :5], X[8:10, 8:13])  # the edge tile: rows past M are 0
    assert bool((stops[0][3]["tile"][2:] == 0).all())
    stops.clear()
    _call(X, where=None)
    assert [(s[3]["bx"], s[3]["by"]) for s in stops] == [(0, 0), (0, 1), (1, 0), (1, 1), (2, 0), (2, 1)]
    stops.clear()
    _call(torch.randn(1, 1), where=(0,))  # sizes of 1: one block
    assert len(stops) == 1


def test_a_block_outside_the_grid_never_stops(stops):
    X = torch.randn(5, 3)
    torch.testing.assert_close(_call(X, where=(7,)), X * 2.0 + 1.5)
    assert stops == []


def test_the_tiles_are_live_a_change_in_the_debugger_changes_the_run(monkeypatch):
    def hook():
        sys._getframe(1).f_locals["tile"].fill_(3.0)
    monkeypatch.setattr(sys, "breakpointhook", hook)
    X = torch.randn(4, 8)
    torch.testing.assert_close(_call(X), torch.full((4, 8), 3.0 * 2.0 + 1.5))


@tile_nb.jit
def running_sum(X, n: int = 4):
    N = T.dynamic('N')
    X: T.Tensor[[N], T.float32]
    out = T.empty((1,), T.float32)
    with T.Kernel(1):
        total = T.alloc_var(T.float32)
        total = 0.0
        for k in T.serial(n):
            total = total + X[k]
            T.breakpoint()  # in-loop
        out[0] = total
    return out


def test_inside_a_serial_loop_it_stops_at_every_iteration_with_the_loop_var(stops):
    X = torch.randn(6)   # a dynamic dim
    torch.testing.assert_close(running_sum(X), X[:4].sum().reshape(1), rtol=1e-5, atol=1e-5)
    assert [s[3]["k"] for s in stops] == [0, 1, 2, 3]
    assert all(s[1] == _line("in-loop") for s in stops)
    sums = [float(s[3]["total"]) for s in stops]
    torch.testing.assert_close(torch.tensor(sums), X[:4].cumsum(0), rtol=1e-5, atol=1e-5)
    assert stops[0][3]["N"] == 6


def test_pythonbreakpoint_0_turns_it_off(monkeypatch):
    monkeypatch.setattr(sys, "breakpointhook", sys.__breakpointhook__)
    monkeypatch.setenv("PYTHONBREAKPOINT", "0")
    X = torch.randn(7, 9)
    torch.testing.assert_close(_call(X), X * 2.0 + 1.5)


@tile_nb.jit
def in_parallel(X):
    N = T.const('N')
    X: T.Tensor[[N], T.float32]
    with T.Kernel(1):
        for i in T.Parallel(N):
            X[i] = X[i] + 1.0
            T.breakpoint()  # in-parallel


def test_inside_t_parallel_it_is_refused_at_the_line():
    with pytest.raises(InterpreterError, match="T.breakpoint inside a T.Parallel loop") as info:
        in_parallel(torch.randn(4))
    assert info.value.lineno == _line("in-parallel")


def test_bad_block_filter_is_an_error_at_the_line():
    with pytest.raises(DSLError, match=r"T.breakpoint\(block=...\) must be") as info:
        _call(torch.randn(4, 8), where="first")
    assert info.value.lineno == _line("stop-here")


def test_the_gpu_lowering_refuses_it_at_the_line():
    from tile_nb.lower import LoweringError

    X = torch.randn(10, 13)
    with pytest.raises(LoweringError, match="interpreter-only") as info:
        scaled_rows.compile(X, 2.0, target="sm_90a")
    assert info.value.lineno == _line("stop-here")
    # and the interpreter, which runs it, warns that the GPU would refuse the kernel
    with pytest.warns(Warning, match="T.breakpoint"):
        scaled_rows(torch.randn(3, 3), 1.0, where=(5,))


def test_pdb_stops_at_the_users_line_and_prints_a_tile(tmp_path):
    script = tmp_path / "k.py"
    script.write_text(
        "import torch, tile_nb\n"
        "import tile_nb.language as T\n"
        "@tile_nb.jit\n"
        "def twice(X):\n"
        "    N = T.const('N')\n"
        "    X: T.Tensor[[N], T.float32]\n"
        "    with T.Kernel(1):\n"
        "        S = T.alloc_shared((N,), T.float32)\n"
        "        T.copy(X[0], S)\n"
        "        T.breakpoint()\n"
        "        for i in T.Parallel(N):\n"
        "            X[i] = S[i] * 2.0\n"
        "X = torch.arange(4.0)\n"
        "twice(X)\n"
        "print('after', X.tolist())\n")
    env = {**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(tile_nb.__file__))}
    env.pop("PYTHONBREAKPOINT", None)
    run = subprocess.run([sys.executable, "-W", "ignore", str(script)], input="p S\np S.sum()\nc\n",
                         capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stderr
    assert f"{script}(10)twice()" in run.stdout and "-> T.breakpoint()" in run.stdout
    assert "tensor([0., 1., 2., 3.])" in run.stdout and "tensor(6.)" in run.stdout
    assert "after [0.0, 2.0, 4.0, 6.0]" in run.stdout


@pytest.mark.gpu
def test_gpu_call_is_refused_with_the_line():
    from tile_nb.lower import LoweringError

    with pytest.raises(LoweringError, match="interpreter-only") as info:
        _call(torch.randn(10, 13, device="cuda"))
    assert info.value.lineno == _line("stop-here")
