"""Errors raised by the CPU interpreter, and how they point at the user's source.

They are `tile_nb.errors.TileNBError`s, so they print as the user's line with a caret (the frontend's format)
and pickle cleanly; an out-of-bounds error also keeps its structured fields (buffer, index, shape, block, loop
values). The line comes from the statement's `span`; IR built by hand has none, and then the message quotes
the statement itself.

    OutOfBoundsError: index [32] is out of bounds for buffer 'S' of shape (32,) (block (0,), i = 31)
      --> kernels.py, line 12, col 9
       |
    12 |         S[i + 1] = S[i] * 2.0
       |         ^^^^^^^^^^^^^^^^^^^^^
    hint: the GPU would access this element silently; guard the access (`if ...:` or T.if_then_else) ...
"""
from __future__ import annotations

import re

from ..errors import TileNBError

__all__ = ["DeadlockError", "InterpreterError", "OrderingError", "OutOfBoundsError", "SourceLocation",
           "UninitializedReadError", "location_of"]


class SourceLocation:
    """Where a statement comes from: a file (or notebook cell), line and columns, or a description of it.

    For IR built by hand (no span) the statement is printed only when an error needs it: printing TVMScript
    for every statement at compile time would cost more than running small kernels.
    """

    def __init__(self, filename: str | None = None, line: int | None = None, statement: str | None = None,
                 node=None, col: int | None = None, end_col: int | None = None):
        self.filename = filename
        self.line = line
        self.col = col
        self.end_col = end_col
        self._statement = statement
        self._node = node

    @property
    def statement(self) -> str | None:
        if self._statement is None and self._node is not None:
            self._statement = _describe(self._node)
            self._node = None
        return self._statement

    def fields(self) -> dict:
        """Keyword arguments of `TileNBError` (filename, lineno, col, end_col)."""
        return {"filename": self.filename, "lineno": self.line, "col": self.col, "end_col": self.end_col}

    def describe(self) -> str:
        """`--> file:line` (the caret display is TileNBError's), or the statement when there is no span."""
        if self.filename is not None and self.line is not None:
            return f"  --> {self.filename}:{self.line}"
        if self.statement:
            return f"  --> in statement (no source location): {self.statement}"
        return "  --> (no source location)"

    def __eq__(self, other):
        return isinstance(other, SourceLocation) and (self.filename, self.line, self.statement) == (
            other.filename, other.line, other.statement)

    def __repr__(self):
        return f"SourceLocation({self.filename!r}, {self.line!r}, {self.statement!r})"

    def __reduce__(self):
        return (SourceLocation, (self.filename, self.line, self.statement, None, self.col, self.end_col))


def location_of(stmt) -> SourceLocation:
    """The source location of a TIR statement: its span, or (lazily) a one-line description of it."""
    span = getattr(stmt, "span", None)
    if span is not None:
        try:
            col, end = int(span.column), int(span.end_column)
            return SourceLocation(str(span.source_name.name), int(span.line), col=col,
                                  end_col=end if end > col else None)
        except Exception:  # noqa: BLE001, S110 - a malformed span only costs us the location
            pass
    return SourceLocation(node=stmt)


def _describe(stmt) -> str:
    try:
        lines = [line.strip() for line in stmt.script().strip().splitlines()]
    except Exception:  # noqa: BLE001 - printing is best effort
        return type(stmt).__name__
    # the printer declares the free buffers and vars of a lone statement first: skip those lines
    lines = [line for line in lines if line and not line.startswith("#") and not _DECL.match(line)]
    if not lines:
        return type(stmt).__name__
    return lines[0] if len(lines) == 1 else " ".join(lines[:2]) + " ..."


_DECL = re.compile(r"^[\w.]+ = T\.(Buffer\(|\w+\(\)$)")


def _with_statement(message: str, location: SourceLocation) -> str:
    if location.line is None and location.statement:
        return f"{message}\n  in statement (no source location): {location.statement}"
    return message


class InterpreterError(TileNBError, RuntimeError):
    """An IR construct, region or argument the interpreter cannot execute."""

    def __init__(
        self, message: str, location: SourceLocation | None = None, hint: str | None = None, **fields
    ):
        if location is not None:
            message = _with_statement(message, location)
            fields = {**location.fields(), **fields}
        super().__init__(message, hint=hint, **fields)

    def __reduce__(self):
        return (
            _rebuild_interp,
            (type(self), self.message, self.filename, self.lineno, self.col, self.end_col, self.hint),
        )


class DeadlockError(InterpreterError):
    """Every warp group of a block waits (on an mbarrier, or for the others at a statement they all run):
    the GPU would hang (interp/warps.py)."""


class OrderingError(InterpreterError):
    """A warp group reads or writes a shared tile that another group (or a T.tma_copy in flight) may still be
    using, with no barrier between them: the GPU result would depend on timing (interp/warps.py)."""


class RaceError(InterpreterError):
    """Iterations of a T.Parallel loop (threads of per-thread code) write different values to one element in
    one statement: the GPU keeps one of them, which one depending on timing."""


def _rebuild_interp(cls, message, filename, lineno, col, end_col, hint):
    return cls(message, None, hint, filename=filename, lineno=lineno, col=col, end_col=end_col)


_HINTS = {
    "index": "the GPU would access this element silently; guard the access (`if ...:` or T.if_then_else) or "
    "fix the index",
    "region": "a tile copy into or out of shared/fragment/local memory must fit that buffer (only "
              "global tensors "
    "are guarded at their edges)",
}


class OutOfBoundsError(TileNBError, IndexError):
    """An access that the GPU would perform silently out of bounds.

    Fields: `buffer` (name), `index` (the offending index: a tuple of ints, or of `start:stop` strings for a
    tile region), `shape` (the buffer's shape), `block` (blockIdx values or None), `loop` (values of the
    enclosing parallel loop vars at the first bad iteration, name -> int), `source` (a `SourceLocation`);
    `filename`, `lineno` (also `line`), `col` point at the user's statement.
    """

    def __init__(self, buffer: str, index: tuple, shape: tuple, location: SourceLocation | None = None,
                 block: tuple | None = None, what: str = "index", loop: dict | None = None):
        self.buffer = buffer
        self.index = tuple(index)
        self.shape = tuple(shape)
        self.source = location or SourceLocation()
        self.block = block
        self.what = what
        self.loop = dict(loop or {})
        text = ", ".join(str(i) for i in self.index)
        message = f"{what} [{text}] is out of bounds for buffer '{buffer}' of shape {self.shape}"
        context = ([f"block {block}"] if block is not None else []) + [
            f"{k} = {v}" for k, v in self.loop.items()
        ]
        if context:
            message += f" ({', '.join(context)})"
        super().__init__(_with_statement(message, self.source), hint=_HINTS.get(what), **self.source.fields())

    @property
    def line(self) -> int | None:
        return self.lineno

    def __reduce__(self):
        return (
            type(self),
            (self.buffer, self.index, self.shape, self.source, self.block, self.what, self.loop),
        )


UNINIT_ENV = "TILE_NB_CHECK_UNINIT"  # "0" turns the check off (docs/debugging.md)

_SCOPE_NAMES = {"shared": "shared", "shared.dyn": "shared", "local.fragment": "fragment", "local": "local",
                "local.var": "var"}


class UninitializedReadError(TileNBError, RuntimeError):
    """A read of shared, fragment or local memory that nothing wrote before in this block: the GPU reads
    whatever the memory holds there (the interpreter's buffers start at 0, so its result could agree with a
    correct kernel by chance).

    Fields: `buffer` (name), `index` (the first element never written, a tuple of ints), `region`
    (the region a tile op reads, as `start:stop` strings, or None for an element read), `count`
    (elements of that region never written), `shape`, `scope`, `block`, `loop` (parallel loop values
    at the element), `op` (what reads it:
    "load", "T.copy", "T.gemm", ...), `source`; `filename`, `lineno`, `col` point at the user's statement.
    """

    def __init__(
        self,
        buffer: str,
        index: tuple,
        shape: tuple,
        scope: str,
        location: SourceLocation | None = None,
        block: tuple | None = None,
        loop: dict | None = None,
        op: str = "load",
        region: tuple | None = None,
        count: int = 1,
    ):
        self.buffer, self.index, self.shape, self.scope = buffer, tuple(index), tuple(shape), scope
        self.source = location or SourceLocation()
        self.block, self.loop, self.op = block, dict(loop or {}), op
        self.region = tuple(region) if region is not None else None
        self.count = count
        kind = _SCOPE_NAMES.get(scope, scope)
        element = f"{buffer}[{', '.join(str(i) for i in self.index)}]"
        where = f"block {block}" if block is not None else "this block"
        context = "".join(f", {k} = {v}" for k, v in self.loop.items())
        if self.region is None:
            message = (
                f"read of memory never written: {element} ({kind} buffer of shape {self.shape}) is read "
                f"before anything wrote it in {where}{context}"
            )
        else:
            text = f"{buffer}[{', '.join(self.region)}]"
            message = (
                f"read of memory never written: {op} reads {text} ({kind} buffer of shape {self.shape}), "
                f"but {count} of those elements were never written in {where}; the first is {element}"
            )
        hint = (
            "the GPU would read whatever that memory holds (the interpreter's buffers start at 0, "
            "so a result "
            "could match by chance): write the elements first (T.clear / T.fill / T.copy / a store), e.g. "
            "T.clear the accumulator before T.gemm. If the read is intended, set "
            + UNINIT_ENV
            + "=0 to turn "
            "this check off"
        )
        super().__init__(_with_statement(message, self.source), hint=hint, **self.source.fields())

    @property
    def line(self) -> int | None:
        return self.lineno

    def __reduce__(self):
        return (
            type(self),
            (
                self.buffer,
                self.index,
                self.shape,
                self.scope,
                self.source,
                self.block,
                self.loop,
                self.op,
                self.region,
                self.count,
            ),
        )
