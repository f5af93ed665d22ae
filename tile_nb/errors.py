"""User-facing errors: one class per condition, each carrying where in the user's source it points.

Every error keeps structured fields (so a notebook can render it, and it pickles for worker processes) and
formats itself as the user's line with a caret, in the shape of STYLE.md:

    ShapeMismatch: gemm() argument 'B' must have shape (K=512, N) to match A; got (256, 384).
      --> cell [3], line 5, col 5
       |
     5 |     B: T.Tensor[[K, N], T.float16]
       |     ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
    hint: K is taken from A.shape[1] = 512.
"""
from __future__ import annotations

import linecache

__all__ = [
    "TileNBError",
    "DeviceAssertError",
    "ArgumentError",
    "ShapeMismatchError",
    "DtypeMismatchError",
    "RankMismatchError",
    "DeviceMismatchError",
    "NotContiguousError",
    "MissingConstError",
    "ArgumentCountError",
    "UnhashableArgumentError",
    "ConstValueError",
    "EmptyGridError",
    "UnsupportedTensorError",
    "RequiresGradError",
    "SignatureError",
    "AnnotationError",
    "UnsupportedSyntaxError",
    "SourceNotFoundError",
    "DSLError",
    "ReturnError",
]


class TileNBError(Exception):
    """Base of every error tile_nb raises because of the user's code or arguments."""

    def __init__(self, message: str, *, filename: str | None = None, lineno: int | None = None,
                 col: int | None = None, end_col: int | None = None, hint: str | None = None):
        self.message = message
        self.filename = filename
        self.lineno = lineno
        self.col = col
        self.end_col = end_col
        self.hint = hint
        super().__init__(message)

    def __reduce__(self):
        return (
            _rebuild,
            (type(self), self.message, self.filename, self.lineno, self.col, self.end_col, self.hint),
        )

    def source_line(self) -> str | None:
        if self.filename is None or self.lineno is None:
            return None
        line = linecache.getline(self.filename, self.lineno)
        return line.rstrip("\n") or None

    def location(self) -> str | None:
        if self.filename is None or self.lineno is None:
            return None
        where = f"{display_filename(self.filename)}, line {self.lineno}"
        if self.col is not None:
            where += f", col {self.col + 1}"
        return where

    def __str__(self) -> str:
        parts = [self.message]
        where = self.location()
        if where:
            parts.append(f"  --> {where}")
            line = self.source_line()
            if line is not None:
                width = len(str(self.lineno))
                parts.append(f" {' ' * width} |")
                parts.append(f" {self.lineno} | {line}")
                start = self.col if self.col is not None else len(line) - len(line.lstrip())
                end = self.end_col if self.end_col is not None and self.end_col > start else len(line)
                parts.append(f" {' ' * width} | {' ' * start}{'^' * max(1, end - start)}")
        if self.hint:
            parts.append(f"hint: {self.hint}")
        return "\n".join(parts)


def _rebuild(cls, message, filename, lineno, col, end_col, hint):
    return cls(message, filename=filename, lineno=lineno, col=col, end_col=end_col, hint=hint)


def display_filename(filename: str) -> str:
    """IPython names cells '<ipython-input-3-...>' (older) or a temp path (ipykernel); show them as cells."""
    if filename.startswith("<ipython-input-"):
        return f"cell [{filename.split('-')[2]}]"
    number = _ipython_cell_number(filename)
    return f"cell In[{number}]" if number is not None else filename


def _ipython_cell_number(filename: str) -> int | None:
    import sys

    if "IPython" not in sys.modules:  # never import IPython from here
        return None
    try:
        shell = sys.modules["IPython"].get_ipython()
        return shell.compile._filename_map.get(filename) if shell is not None else None
    except AttributeError:
        return None


class ArgumentError(TileNBError, TypeError):
    """A call's arguments do not match the kernel's annotations."""


class ShapeMismatchError(ArgumentError, ValueError):
    pass


class DtypeMismatchError(ArgumentError):
    pass


class RankMismatchError(ArgumentError, ValueError):
    pass


class DeviceMismatchError(ArgumentError, ValueError):
    pass


class NotContiguousError(ArgumentError, ValueError):
    pass


class MissingConstError(ArgumentError):
    pass


class ArgumentCountError(ArgumentError):
    pass


class UnhashableArgumentError(ArgumentError):
    pass


class ConstValueError(ArgumentError, ValueError):
    """A const given as a keyword is not a tensor dim (an int >= 0)."""


class EmptyGridError(ArgumentError, ValueError):
    """The call's shapes leave the kernel no block to launch, where that cannot simply do nothing."""


class UnsupportedTensorError(ArgumentError, ValueError):
    """A tensor tile_nb cannot read: no data (meta device), not dense (sparse
    layouts), quantized, another device."""


class RequiresGradError(ArgumentError, RuntimeError):
    """The kernel would write a tensor that autograd tracks (tile_nb kernels have no backward yet)."""


class SignatureError(TileNBError, TypeError):
    """The decorated function's signature cannot be a kernel (raised at decoration)."""


class AnnotationError(TileNBError, TypeError):
    """An in-body annotation is malformed."""


class UnsupportedSyntaxError(TileNBError):
    """A Python construct that kernels cannot contain."""


class SourceNotFoundError(TileNBError, OSError):
    """The kernel's source text cannot be found (in-body annotations need it)."""


class UnknownNameError(TileNBError, AttributeError):
    """`T.<name>` for a name the tile language does not have. Also an AttributeError, so `hasattr(T, name)`
    and code that probes modules for names keep working; `name` is the name asked for."""


class DSLError(TileNBError, ValueError):
    """A tile-language call used wrongly (bad region, shape, dtype...)."""


class ReturnError(TileNBError, ValueError):
    """`T.empty` outputs and `return` disagree."""


class DeviceAssertError(TileNBError, AssertionError):
    """A `T.device_assert` failed: on the interpreter at the user's line (with the block, loop
    indices and values), on the GPU after the launch (naming the kernel and the assert's line;
    CUDA's context is then unusable)."""
