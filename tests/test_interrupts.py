"""Ctrl-C and SystemExit stop tile_nb wherever they arrive: elaboration (phase 1 or 2),
tuning, a compile inside TVM, the compile pool. They are never turned into a DSLError, a
template stop or a failed configuration."""
import os
import signal
import sys
import textwrap
import threading
import time

import pytest
import torch

import tile_nb
import tile_nb.language as T
from tile_nb.bench.pool import ProcessPool
from tile_nb.bench.tuning import tune


def _stop(exc: str):
    raise KeyboardInterrupt() if exc == "KeyboardInterrupt" else SystemExit(3)


@tile_nb.jit
def interruptible(X, Y, when: str = "never", exc: str = "KeyboardInterrupt", block: int = 64):
    N = T.const('N')
    X: T.Tensor[[N], T.float32]
    Y: T.Tensor[[N], T.float32]
    with T.Kernel(T.ceildiv(N, block), threads=64) as bx:
        tile = T.alloc_fragment((block,), T.float32)
        T.copy(X[bx * block], tile)
        # N is a symbol in phase 1, an int in phase 2
        if when == ("phase2" if isinstance(N, int) else "phase1"):
            _stop(exc)
        for i in T.Parallel(block):
            tile[i] = tile[i] + 1.0
        T.copy(tile, Y[bx * block])


def _expected(exc: str):
    return KeyboardInterrupt if exc == "KeyboardInterrupt" else SystemExit


@pytest.mark.parametrize("exc", ["KeyboardInterrupt", "SystemExit"])
@pytest.mark.parametrize("when", ["phase1", "phase2"])
def test_an_interrupt_inside_the_kernel_body_propagates_unchanged(when, exc):
    X, Y = torch.randn(100), torch.zeros(100)
    with pytest.raises(_expected(exc)) as info:
        interruptible(X, Y, when=when, exc=exc)
    assert type(info.value) is _expected(exc)  # not a DSLError, nor a template that stopped early
    if exc == "SystemExit":
        assert info.value.code == 3
    with pytest.raises(_expected(exc)):  # nothing half-built was cached: it happens again
        interruptible(X, Y, when=when, exc=exc)
    # The IR builder is left clean: the same kernel elaborates and runs right after.
    interruptible(X, Y)
    torch.testing.assert_close(Y, X + 1)


@pytest.mark.parametrize("exc", ["KeyboardInterrupt", "SystemExit"])
def test_tune_stops_at_an_interrupt_during_elaboration(exc):
    X, Y = torch.randn(130), torch.zeros(130)
    configs = [
        {"block": 64, "when": "never"},
        {"block": 128, "when": "phase2"},
        {"block": 32, "when": "never"},
    ]
    with pytest.raises(_expected(exc)):
        tune(interruptible, configs, X, Y, exc=exc, pool="inline", progress=None, store=False)
    result = tune(
        interruptible,
        [c for c in configs if c["when"] == "never"],
        X,
        Y,
        pool="inline",
        progress=None,
        store=False,
    )
    assert all(p.error is None for p in result.points)


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TILE_NB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("TILE_NB_DISABLE_CACHE", raising=False)


def test_an_interrupt_in_the_cuda_compiler_comes_out_of_tvm_as_itself(fresh_cache, monkeypatch):
    """TVM calls tile_nb's nvcc callback from C++; an exception raised there
    crosses TVM's FFI on its way back."""
    from tile_nb.backend import cuda_compile

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt()

    monkeypatch.setattr(cuda_compile, "compile_cuda", interrupted)
    with pytest.raises(KeyboardInterrupt):
        interruptible.compile(N=4321, block=32, target="cuda -arch=sm_90a")


def test_tune_stops_at_an_interrupt_while_compiling(fresh_cache, monkeypatch):
    from tile_nb.backend import cuda_compile

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt()

    monkeypatch.setattr(cuda_compile, "compile_cuda", interrupted)
    with pytest.raises(KeyboardInterrupt):
        tune(interruptible, {"block": [64, 128]}, N=2345, pool="inline", progress=None, store=False)


# ---- the process pool --------------------------------------------------------------------------------------
_HANGING_WORKER = textwrap.dedent("""
    import json, os, sys, time
    out = os.fdopen(os.dup(1), "w", buffering=1)
    out.write(json.dumps({"ready": True}) + "\\n")
    for line in sys.stdin:
        job = json.loads(line)
        if job["id"] == 0:
            out.write(json.dumps({"id": 0, "ok": True, "pid": os.getpid()}) + "\\n")
        else:
            time.sleep(120)             # a compile that takes minutes
""")


def _alive(proc) -> bool:
    return proc.poll() is None


def test_workers_do_not_share_the_parents_ctrl_c():
    """A terminal's or a notebook's Ctrl-C goes to the whole process group; the workers have their own, so
    only the parent is interrupted, and it decides what happens to them."""
    command = (sys.executable, "-c", _HANGING_WORKER)
    with ProcessPool(1, command=command, inline_while_starting=False) as pool:
        (proc,) = [w.proc for w in pool._pool]
        assert os.getsid(proc.pid) != os.getsid(0) and os.getpgid(proc.pid) != os.getpgid(0)


def test_an_interrupt_while_the_pool_compiles_kills_the_busy_workers_at_once():
    command = (sys.executable, "-c", _HANGING_WORKER)
    pool = ProcessPool(2, command=command, inline_while_starting=False)
    procs = [w.proc for w in pool._pool]
    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        for outcome in pool.run([{"id": 0}, {"id": 1}, {"id": 2}]):
            assert outcome["id"] == 0 and outcome["ok"]
            # Ctrl-C while the parent handles an outcome; jobs 1 and 2 hang meanwhile
            raise KeyboardInterrupt()
    pool.close()
    assert time.monotonic() - start < 4  # not waited for (closing a busy worker politely gives it 5 s)
    assert not any(_alive(p) for p in procs)


@pytest.mark.skipif(signal.getsignal(signal.SIGINT) is not signal.default_int_handler,
                    reason="SIGINT is handled by someone else in this test process")
def test_a_real_sigint_stops_the_pool_and_its_workers():
    command = (sys.executable, "-c", _HANGING_WORKER)
    pool = ProcessPool(2, command=command, inline_while_starting=False)
    procs = [w.proc for w in pool._pool]
    timer = threading.Timer(2.0, os.kill, (os.getpid(), signal.SIGINT))
    start = time.monotonic()
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            list(pool.run([{"id": 1}, {"id": 2}]))  # both hang: only the signal ends this
    finally:
        timer.cancel()
        pool.close()
    assert time.monotonic() - start < 4.5  # the signal came at 2 s; the hanging jobs were not waited for
    assert not any(_alive(p) for p in procs)
