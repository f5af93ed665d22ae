"""Errors raised by the CPU interpreter, and how they point at the user's source.

Exceptions keep structured fields and pickle cleanly (autotuning may run kernels in worker processes),
and their message names the buffer, the index and the user's line, read from the statement's `span`.
"""
from __future__ import annotations

import linecache
import re

__all__ = ["InterpreterError", "OutOfBoundsError", "SourceLocation", "location_of"]


class SourceLocation:
    """Where a statement comes from: a file (or notebook cell) and line, or a description of the statement.

    For IR built by hand (no span) the statement is printed only when an error needs it: printing TVMScript for
    every statement at compile time would cost more than running small kernels.
    """

    def __init__(self, filename: str | None = None, line: int | None = None, statement: str | None = None,
                 node=None):
        self.filename = filename
        self.line = line
        self._statement = statement
        self._node = node

    @property
    def statement(self) -> str | None:
        if self._statement is None and self._node is not None:
            self._statement = _describe(self._node)
            self._node = None
        return self._statement

    def describe(self) -> str:
        """`file:line` plus the source line when known, else the statement text."""
        if self.filename is not None and self.line is not None:
            text = linecache.getline(self.filename, self.line).rstrip()
            where = f"  --> {self.filename}:{self.line}"
            if text:
                where += f"\n   {self.line:>4} | {text.strip()}"
            return where
        if self.statement:
            return f"  --> in statement (no source location): {self.statement}"
        return "  --> (no source location)"

    def __eq__(self, other):
        return isinstance(other, SourceLocation) and (self.filename, self.line, self.statement) == (
            other.filename, other.line, other.statement)

    def __repr__(self):
        return f"SourceLocation({self.filename!r}, {self.line!r}, {self.statement!r})"

    def __reduce__(self):
        return (SourceLocation, (self.filename, self.line, self.statement))


def location_of(stmt) -> SourceLocation:
    """The source location of a TIR statement: its span, or (lazily) a one-line description of it."""
    span = getattr(stmt, "span", None)
    if span is not None:
        try:
            return SourceLocation(str(span.source_name.name), int(span.line))
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


class InterpreterError(RuntimeError):
    """An IR construct or argument the interpreter cannot execute."""


class OutOfBoundsError(IndexError):
    """An access that the GPU would perform silently out of bounds.

    Fields: `buffer` (name), `index` (the offending index, a tuple of ints, or of `start:stop` strings for a tile
    region), `shape` (the buffer's shape), `location` (a `SourceLocation`), `block` (blockIdx values or None).
    """

    def __init__(self, buffer: str, index: tuple, shape: tuple, location: SourceLocation | None = None,
                 block: tuple | None = None, what: str = "index"):
        self.buffer = buffer
        self.index = tuple(index)
        self.shape = tuple(shape)
        self.location = location or SourceLocation()
        self.block = block
        self.what = what
        super().__init__(self._message())

    def _message(self) -> str:
        index = ", ".join(str(i) for i in self.index)
        msg = (f"{self.what} [{index}] is out of bounds for buffer '{self.buffer}' of shape "
               f"{tuple(self.shape)}")
        if self.block is not None:
            msg += f" (in block {self.block})"
        return msg + "\n" + self.location.describe()

    @property
    def filename(self) -> str | None:
        return self.location.filename

    @property
    def line(self) -> int | None:
        return self.location.line

    def __reduce__(self):
        return (type(self), (self.buffer, self.index, self.shape, self.location, self.block, self.what))
