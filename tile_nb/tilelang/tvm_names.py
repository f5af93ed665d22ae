"""tilelang's TVM names on Apache TVM 0.27, while the `tilelang` mapping is installed.

A tilelang program's `tvm` is the TVM fork tilelang ships (`import tilelang` puts it on the path), so tilelang
code writes `from tvm import tirx` and helpers such as

    def _u8_to_i4(nbit, val: tirx.PrimExpr, pos: tirx.PrimExpr, dtype):
        assert val.dtype == T.uint8
        return tirx.reinterpret(T.int8, ((val >> pos.astype(T.uint8) * 4) & 15) << tirx.const(4, T.uint8))

Apache TVM 0.27, the TVM tile_nb builds with, has the same expressions, operators, `tirx.const`,
`tirx.reinterpret`, `tirx.Select`, `tirx.Cast` and `.astype`, but calls the expression class `Expr` (tvm.ir)
and keeps an expression's type in `.ty` (a `PrimType`) where the fork has `.dtype`. `install()` adds those
two fork names, as aliases, to the `tvm` module that the program imports (`tvm.tirx.PrimExpr` is
`tvm.ir.Expr`; `expr.dtype` is the dtype name of its `PrimType`, as a tile_nb dtype, so
`val.dtype == T.uint8` holds; a scalar `tirx.Var` gets it too, a buffer keeps TVM's own). The fork's
`tvm.testing.requires_package` (tilelang's dequantization example decorates a kernel factory with it) is
`tilelang.testing.requires_package`; `tvm.testing` is imported for it. Nothing else of TVM changes;
`uninstall()` removes exactly what `install()` added (Apache TVM's own `tvm.testing` stays imported).
"""
from __future__ import annotations

import sys

__all__ = ["install", "uninstall", "installed"]

_added: list[tuple[object, str, object]] = []  # (owner, name, what was there before or _ABSENT)
_ABSENT = object()


def _expr_dtype(expr):
    """The dtype name of an expression's PrimType (tilelang's fork: `PrimExpr.dtype`)."""
    from ..language.dtypes import as_dtype

    ty = expr.ty
    dtype = getattr(ty, "dtype", None)
    if dtype is None:
        raise AttributeError(
            f"{type(expr).__name__} of type {ty} has no dtype (it is not a scalar expression)"
        )
    try:
        return as_dtype(str(dtype))
    except ValueError:  # a dtype tile_nb has no name for (a vector lane type, say): TVM's own name
        return str(dtype)


def _var_dtype(previous):
    def dtype(var):
        try:
            return previous.__get__(var)  # a buffer Var: TVM's element dtype
        except AttributeError:
            return _expr_dtype(var)       # a scalar Var (a loop variable): its type
    return property(dtype, doc="the buffer's element dtype, or a scalar Var's dtype (tilelang's TVM)")


def _add(owner, name: str, value) -> None:
    _added.append((owner, name, owner.__dict__.get(name, _ABSENT)))
    setattr(owner, name, value)


def installed() -> bool:
    return bool(_added) or _pending is not None


class _AfterTvmImport:
    """A meta-path finder that lets `tvm` import as usual, then adds the names (a run whose script never
    imports TVM does not pay its import time, several seconds)."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "tvm":
            return None
        import importlib.util

        _drop_pending()
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _ThenAddNames(spec.loader)
        return spec


class _ThenAddNames:
    def __init__(self, loader):
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        _add_names()

    def __getattr__(self, name):
        return getattr(self._loader, name)


_pending: _AfterTvmImport | None = None


def _drop_pending() -> None:
    global _pending
    if _pending is not None and _pending in sys.meta_path:
        sys.meta_path.remove(_pending)
    _pending = None


def install() -> None:
    """Add tilelang's TVM names to Apache TVM (idempotent): now if TVM is
    imported, else right after its import."""
    global _pending
    if installed():
        return
    if "tvm" in sys.modules:
        _add_names()
    else:
        _pending = _AfterTvmImport()
        sys.meta_path.insert(0, _pending)


def _add_names() -> None:
    import tvm.ir
    import tvm.tirx

    if _added:
        return
    if not hasattr(tvm.tirx, "PrimExpr"):
        _add(tvm.tirx, "PrimExpr", tvm.ir.Expr)
    if "dtype" not in tvm.ir.Expr.__dict__:
        _add(tvm.ir.Expr, "dtype", property(_expr_dtype, doc="the expression's dtype (tilelang's TVM)"))
    previous = tvm.ir.Var.__dict__.get("dtype")
    if isinstance(previous, property):
        _add(tvm.ir.Var, "dtype", _var_dtype(previous))
    try:  # the fork imports `tvm.testing` with tvm and has `requires_package` there
        import tvm.testing
    except ImportError:
        return
    if not hasattr(tvm.testing, "requires_package"):
        from .testing import requires_package

        _add(tvm.testing, "requires_package", requires_package)


def uninstall() -> None:
    """Remove what install() added, newest first (or the pending hook, if TVM was never imported)."""
    _drop_pending()
    while _added:
        owner, name, before = _added.pop()
        if before is _ABSENT:
            delattr(owner, name)
        else:
            setattr(owner, name, before)
