"""Lowering errors that point at the user's line.

The tile IR carries its source lines three ways (docs/IR.md): `BufferStore`s have spans, tile-op calls have no
span but their lines are listed in program order in the function attribute `tile_nb.tile_op_lines`, and
allocations are listed as `[name, line]` in `tile_nb.alloc_lines`; the function's own span names the file.
These attributes are left out of compile-cache keys (runtime/compile.py), so
moving a kernel does not rebuild it.
"""
from __future__ import annotations

from tvm import tirx

from ..errors import TileNBError
from .errors import LoweringError
from .irwalk import tile_calls

__all__ = ["LINE_ATTRS", "LoweringError", "SourceLines"]

# Function attributes holding source lines (stripped from cache keys).
LINE_ATTRS = ("tile_nb.tile_op_lines", "tile_nb.alloc_lines", "tile_nb.layout_lines")


class SourceLines:
    """Where in the user's source each tile op, store and allocation of a phase-2 PrimFunc came from."""

    def __init__(self, func: tirx.PrimFunc):
        attrs = func.attrs or {}
        span = getattr(func, "span", None)
        self.filename = (
            str(span.source_name.name) if span is not None and span.source_name is not None else None
        )
        lines = [int(x) for x in attrs.get("tile_nb.tile_op_lines", [])]
        calls = tile_calls(func.body)
        self._calls = dict(zip(calls, lines, strict=True)) if len(lines) == len(calls) else {}
        self._allocs = {str(name): int(line) for name, line in attrs.get("tile_nb.alloc_lines", [])}

    def line_of(self, stmt) -> int | None:
        if isinstance(stmt, tirx.TilePrimitiveCall):
            return self._calls.get(stmt)
        span = getattr(stmt, "span", None)
        return int(span.line) if span is not None and span.line else None

    def alloc_line(self, name: str) -> int | None:
        return self._allocs.get(name)

    def locate(self, err: TileNBError, stmt=None, buffer_name: str | None = None) -> TileNBError:
        """Attach the statement's (or the allocation's) line to an error that has none."""
        if err.lineno is None:
            line = self.line_of(stmt) if stmt is not None else self.alloc_line(buffer_name or "")
            if line is not None:
                err.filename, err.lineno = self.filename, line
        return err
