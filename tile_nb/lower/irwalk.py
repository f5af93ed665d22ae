"""Reading the tile IR: regions, scopes, statement walks and which buffers a statement reads and writes.

Pure functions over TVM IR, shared by the analyses and the emitters (so neither imports the driver).
"""
from __future__ import annotations

import tvm
from tvm import tirx

from ..language.stmtwalk import atomic_element, iter_stmts
from ..language.stmtwalk import stmt_children as children
from .errors import LoweringError
from .exprs import walk_loads

__all__ = [
    "atomic_element",
    "children",
    "atomic_target",
    "buffers_touched",
    "gemm_k",
    "iter_stmts",
    "region_of",
    "scope_of",
    "seq_items",
    "tile_calls",
    "vars_bound_in",
]


def region_of(r):
    """(buffer, [(min, extent), ...]) of a TensorRegion."""
    return r.source, [(x.min, x.extent) for x in r.region]


def gemm_k(a_rng, b_rng, trans_a: bool, trans_b: bool, bm: int, bn: int) -> int:
    """K of a T.gemm whose A and B regions (transposed as the call says) multiply into a bm x bn accumulator;
    a LoweringError naming the three shapes where they do not fit."""
    a_ext = [int(e) for _, e in a_rng]
    b_ext = [int(e) for _, e in b_rng]
    m, k = (a_ext[-1], a_ext[-2]) if trans_a else (a_ext[-2], a_ext[-1])
    kb, n = (b_ext[-1], b_ext[-2]) if trans_b else (b_ext[-2], b_ext[-1])
    if (m, n) != (bm, bn) or k != kb:
        raise LoweringError(f"T.gemm shapes: A {a_ext} (transpose_A={trans_a}), B {b_ext} "
                            f"(transpose_B={trans_b}), C [{bm}, {bn}] do not match")
    return k


def scope_of(buf) -> str:
    return buf.scope()


def seq_items(stmt):
    return list(stmt.seq) if isinstance(stmt, tirx.SeqStmt) else [stmt]


def tile_calls(stmt):
    """The tile-op calls under `stmt`, in program order."""
    return [s for s in iter_stmts(stmt) if isinstance(s, tirx.TilePrimitiveCall)]


def vars_bound_in(stmt) -> list:
    """Variables a statement subtree defines: loop variables and `Bind`s."""
    out = []
    for s in iter_stmts(stmt):
        if isinstance(s, tirx.For):
            out.append(s.loop_var)
        elif isinstance(s, tirx.Bind):
            out.append(s.var)
    return out


def buffers_touched(stmt):
    """(read buffers, written buffers) of a statement subtree (tile ops, stores and loads)."""
    reads, writes = [], []

    def loads_of(e):
        walk_loads(e, lambda ld: reads.append(ld.source))

    for s in iter_stmts(stmt):
        if isinstance(s, tirx.TilePrimitiveCall):
            regions = [a for a in s.args if isinstance(a, tvm.ir.expr.TensorRegion)]
            if regions:
                writes.append(regions[0].source)
                reads.extend(r.source for r in regions[1:])
                if s.op.name == "tirx.tile.gemm" or _accumulates(s):
                    reads.append(regions[0].source)
            for a in s.args:
                if isinstance(a, tvm.ir.expr.TensorRegion):
                    for r in a.region:
                        loads_of(r.min)
                elif isinstance(a, tvm.ir.Expr):
                    loads_of(a)
        elif isinstance(s, tirx.BufferStore):
            writes.append(s.buffer)
            loads_of(s.value)
            for i in s.indices:
                loads_of(i)
        elif isinstance(s, tirx.Evaluate):
            loads_of(s.value)
            target = atomic_target(s.value)
            if target is not None:  # an atomic add writes the element it reads
                writes.append(target)
        elif isinstance(s, tirx.For):
            loads_of(s.min)
            loads_of(s.extent)
        elif isinstance(s, (tirx.IfThenElse, tirx.While)):
            loads_of(s.condition)
        elif isinstance(s, tirx.Bind):
            loads_of(s.value)
    return reads, writes


def atomic_target(value):
    """The buffer `T.atomic_add` of one element adds into (`atomicAdd(&buf[...], v)`), else None."""
    return getattr(atomic_element(value), "source", None)


def _accumulates(call) -> bool:
    """A reduction with `clear=False` reads its destination."""
    name = call.op.name
    return name in ("tirx.tile.sum", "tirx.tile.max", "tirx.tile.min") and bool(call.args[3])
