"""Source regions: which lines of the lowered TIRx and of the CUDA source
each statement of the tile IR became.

The emitter brackets the code it emits for a statement of the tile IR with two marks, calls to the extern
functions `tile_nb_src_begin(id)` / `tile_nb_src_end(id)`. TVM keeps opaque calls in place and in order
through its passes and prints them as one line each, in the TVMScript and in the CUDA source, so the marks
delimit the statement's code in both texts. `split_marks` takes them out again (the cubin is compiled from the
text without them, which is the text the user sees) and says which lines each region holds.

A region's id is the statement's index in `source_regions(func)`, a pre-order walk of the phase-2 body, not a
line number: the regions of a compiled kernel stay valid for the same kernel moved down its cell (lines are
not part of cache keys), and the views turn ids into the user's lines with the phase-2 function at hand.

Regions are the statements that run at CTA level: tile ops, loops, `if`s, stores and calls. The body of a
`T.Parallel` loop is per-thread code (vectorized by TVM, where an opaque call would get in the way), so the
loop is one region and nothing inside it is marked.
"""
from __future__ import annotations

import re

from tvm import tirx

__all__ = ["MARK_BEGIN", "MARK_END", "mark", "source_regions", "split_marks"]

MARK_BEGIN = "tile_nb_src_begin"
MARK_END = "tile_nb_src_end"

_REGION_KINDS = (
    tirx.TilePrimitiveCall,
    tirx.For,
    tirx.While,
    tirx.IfThenElse,
    tirx.BufferStore,
    tirx.Evaluate,
)
# A mark as the CUDA code generator prints it (`tile_nb_src_begin(3);`) and as TVMScript does
# (`T.call_extern("void", "tile_nb_src_begin", 3)`): the whole line, nothing else on it.
_MARK_LINE = re.compile(r'^\s*(?:T\.call_extern\("void", "(tile_nb_src_(?:begin|end))", (\d+)\)'
                        r'|(tile_nb_src_(?:begin|end))\((\d+)\);)\s*$')


def source_regions(func: tirx.PrimFunc) -> list:
    """The statements of `func`'s body that get marks, in pre-order; a statement's id is its index here."""
    out: list = []

    def visit(stmt, in_parallel: bool) -> None:
        if isinstance(stmt, tirx.SeqStmt):
            for s in stmt.seq:
                visit(s, in_parallel)
            return
        if not in_parallel and isinstance(stmt, _REGION_KINDS):
            out.append(stmt)
        in_parallel = in_parallel or (isinstance(stmt, tirx.For) and stmt.kind == tirx.ForKind.PARALLEL)
        if isinstance(stmt, tirx.IfThenElse):
            visit(stmt.then_case, in_parallel)
            if stmt.else_case is not None:
                visit(stmt.else_case, in_parallel)
        elif isinstance(getattr(stmt, "body", None), tirx.Stmt):
            visit(stmt.body, in_parallel)

    visit(func.body, False)
    return out


def mark(name: str, region: int) -> tirx.Expr:
    """The call that opens (`MARK_BEGIN`) or closes (`MARK_END`) region `region` in the emitted code."""
    return tirx.call_extern("void", name, region)


def split_marks(text: str) -> tuple[str, dict[int, list[int]]]:
    """`text` without its mark lines, and `{region id: [1-based lines of that text]}`.

    A line belongs to the innermost region open around it; regions emitted more than once (a pipeline's
    prologue and steady state, an unrolled loop) hold all their copies.
    """
    kept: list[str] = []
    regions: dict[int, list[int]] = {}
    open_regions: list[int] = []
    for line in text.split("\n"):
        match = _MARK_LINE.match(line)
        if match is None:
            kept.append(line)
            if open_regions and line.strip():
                regions.setdefault(open_regions[-1], []).append(len(kept))
            continue
        name, region = (
            (match.group(1), match.group(2)) if match.group(1) else (match.group(3), match.group(4))
        )
        if name == MARK_BEGIN:
            open_regions.append(int(region))
        elif open_regions and open_regions[-1] == int(region):
            open_regions.pop()
        else:
            raise ValueError(
                f"source mark {name}({region}) closes a region that is not open (open: {open_regions})"
            )
    if open_regions:
        raise ValueError(f"source regions {open_regions} are never closed")
    return "\n".join(kept), regions
