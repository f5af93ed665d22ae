"""Grid-wide barriers (`T.sync_grid`, language/sync.py) on the interpreter.

A kernel without them runs its blocks one after another. One with them runs every block as a coroutine (a
Python thread of which exactly one runs at a time, as warps.py runs warp groups): block 0 runs until it
reaches a grid barrier, then block 1, and so on; when every block waits at the barrier, all go on, again in
block order. So each block's global writes before the barrier are in memory before any block reads after it,
as on the GPU. A block that finishes while others wait at a barrier is a deadlock on the GPU (a cooperative
grid barrier waits for every block): a DeadlockError at the waiting line, naming the block that finished.
"""
from __future__ import annotations

import threading

from tvm import tirx
from tvm.tirx.tile_primitive import TilePrimitiveCall

from .compiler import Compiler, Frame, op_short_name, tile_rule
from .errors import DeadlockError, InterpreterError
from .warps import run_threads

__all__ = ["uses_grid_sync", "any_stmt", "GridScheduler", "fork_block"]


def uses_grid_sync(func) -> bool:
    """Whether `func` calls T.sync_grid: its blocks then run as coroutines (GridScheduler)."""
    return any_stmt(func.body, lambda s: isinstance(s, TilePrimitiveCall)
                    and op_short_name(s.op) == "sync_grid")


def any_stmt(node, pred) -> bool:
    """Whether `pred` holds for `node` or a statement nested in it."""
    if pred(node):
        return True
    if isinstance(node, tirx.SeqStmt):
        return any(any_stmt(s, pred) for s in node.seq)
    children = [getattr(node, k, None) for k in ("body", "then_case", "else_case")]
    return any(any_stmt(c, pred) for c in children if isinstance(c, tirx.Stmt))


def fork_block(f: Frame, tracked: list) -> Frame:
    """One block's own frame: its variables and written masks (a new CTA has written nothing), the kernel's
    global tensors shared."""
    g = Frame(len(f.vals))
    g.vals = list(f.vals)
    g.block = dict(f.block)
    if f.written is not None:
        g.written = list(f.written)
        for s in tracked:
            if g.written[s] is not None:
                g.written[s] = False
    g.trace = f.trace
    if f.trace is not None:
        g.access = f.trace.active(g.block)
    return g


class _Block:
    def __init__(self, index: int, frame: Frame, body):
        self.index, self.frame, self.body = index, frame, body
        self.waiting = None  # the location of the grid barrier it waits at
        self.done = False


class GridScheduler:
    """Collects the grid's blocks (`add`), then runs them (`run`) with a strict hand-off between them."""

    def __init__(self):
        self.blocks: list[_Block] = []
        self.cv = threading.Condition()
        self.current = 0
        self.error: BaseException | None = None

    def add(self, frame: Frame, body) -> None:
        block = _Block(len(self.blocks), frame, body)
        frame.grid = (self, block)
        self.blocks.append(block)

    def run(self) -> None:
        if not self.blocks:
            return
        threads = [threading.Thread(target=self._main, args=(b,), daemon=True,
                                    name=f"tile_nb block {b.frame.block_ids()}") for b in self.blocks]
        run_threads(self, threads)

    def _fail(self, err: BaseException) -> None:
        with self.cv:
            self.error = self.error or err
            self.cv.notify_all()

    def _turn(self, block: _Block) -> bool:
        """Wait for `block`'s turn; False when the run has failed."""
        with self.cv:
            while self.current != block.index and self.error is None:
                self.cv.wait()
            return self.error is None

    def _main(self, block: _Block) -> None:
        if not self._turn(block):
            return
        try:
            block.body(block.frame)
        except _Abort:
            return
        except BaseException as err:  # noqa: BLE001 - handed to the caller's thread
            self._fail(err)
            return
        with self.cv:
            block.done = True
            self._hand_off(block)

    def arrive(self, block: _Block, location) -> None:
        """`block` reached a grid barrier: run the others until all have reached it."""
        with self.cv:
            block.waiting = location
            self._hand_off(block)
            while self.current != block.index and self.error is None:
                self.cv.wait()
            if self.error is not None:
                raise _Abort()

    def _hand_off(self, block: _Block) -> None:
        """(Under the lock.) Give the turn to the next block that can run; release a barrier all reached."""
        n = len(self.blocks)
        for k in range(1, n + 1):
            nxt = self.blocks[(block.index + k) % n]
            if not nxt.done and nxt.waiting is None:
                self.current = nxt.index
                self.cv.notify_all()
                return
        waiting = [b for b in self.blocks if b.waiting is not None]
        if not waiting:
            self.current = -1  # every block finished
        elif any(b.done for b in self.blocks):
            finished = next(b for b in self.blocks if b.done)
            self.error = DeadlockError(
                f"T.sync_grid: block {finished.frame.block_ids()} finished without reaching the grid barrier "
                f"that block {waiting[0].frame.block_ids()} waits at; on the GPU every block must reach each "
                "T.sync_grid, or the grid hangs",
                waiting[0].waiting,
                hint="call T.sync_grid where every block runs it (not under a condition on the block index)",
            )
        else:  # everybody waits at the barrier: all go on, in block order
            for b in waiting:
                b.waiting = None
            self.current = 0
        self.cv.notify_all()


class _Abort(Exception):
    """Raised in a block's thread to unwind it once another block failed."""


@tile_rule("sync_grid")
def _sync_grid(comp: Compiler, node):
    location = comp.location

    def sync(f):
        if f.grid is None:
            raise InterpreterError("T.sync_grid outside a grid run as coroutines (interp/grid.py)", location)
        if f.par_shape:
            raise InterpreterError("T.sync_grid inside a T.Parallel loop: call it at block level", location)
        scheduler, block = f.grid
        scheduler.arrive(block, location)
    return sync
