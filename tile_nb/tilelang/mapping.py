"""The import mapping: `import tilelang` (and `tilelang.language`, `tilelang.testing`, ...) resolves to
tile_nb's stand-in, `tile_nb.tilelang`, while the mapping is installed, and only then.

    from tile_nb.tilelang import mapping
    mapping.install()          # refused (RealTilelangError) if a real tilelang imports, unless shadow=True
    import tilelang            # -> tile_nb.tilelang
    mapping.uninstall()        # removes the finder and the tilelang modules it made

`python -m tile_nb.run script.py` and the `%tilelang_on_tile_nb` line magic install it for you. A tilelang
submodule tile_nb has no counterpart of imports as a stub whose every name raises UnsupportedTilelangAPI.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys

from ..errors import TileNBError
from . import tvm_names
from ._support import stub_module

__all__ = [
    "install",
    "uninstall",
    "installed",
    "real_tilelang_location",
    "RealTilelangError",
    "TilelangFinder",
]

_PREFIX = "tile_nb."


class RealTilelangError(TileNBError):
    """A real tilelang is importable: mapping `tilelang` onto tile_nb would hide it, so
    tile_nb refuses unless asked."""


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, target: str, tilelang_name: str):
        self.target = target
        self.tilelang_name = tilelang_name

    def create_module(self, spec):
        try:
            return importlib.import_module(self.target)
        except ModuleNotFoundError as e:
            missing = e.name or ""
            if not (missing.startswith(_PREFIX + "tilelang.")
                    and (self.target == missing or self.target.startswith(missing + "."))):
                raise
            return stub_module(self.target, self.tilelang_name)

    def exec_module(self, module):
        pass  # the target module ran when it was imported


class TilelangFinder(importlib.abc.MetaPathFinder):
    """Maps `tilelang` and `tilelang.<sub>` onto `tile_nb.tilelang` and `tile_nb.tilelang.<sub>`."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "tilelang" and not fullname.startswith("tilelang."):
            return None
        loader = _AliasLoader(_PREFIX + fullname, fullname)
        return importlib.machinery.ModuleSpec(fullname, loader, is_package=True)


_finder: TilelangFinder | None = None


def installed() -> bool:
    return _finder is not None and _finder in sys.meta_path


def real_tilelang_location() -> str | None:
    """Where a real tilelang would be imported from (a module already imported that is not the stand-in, or
    one the path finders find), else None."""
    module = sys.modules.get("tilelang")
    if module is not None and not module.__name__.startswith(_PREFIX):
        return getattr(module, "__file__", None) or repr(module)
    for finder in sys.meta_path:
        if isinstance(finder, TilelangFinder):
            continue
        try:
            spec = finder.find_spec("tilelang", None)
        except (ImportError, ValueError, AttributeError, TypeError):
            continue
        if spec is not None:
            return spec.origin or (list(spec.submodule_search_locations or []) or ["(namespace package)"])[0]
    return None


def install(*, shadow: bool = False) -> None:
    """Resolve `tilelang` to tile_nb's stand-in. If a real tilelang is importable, raise RealTilelangError
    naming it, unless `shadow=True` (then it is hidden, with a warning on stderr, until `uninstall()`)."""
    global _finder
    if installed():
        return
    real = real_tilelang_location()
    if real is not None:
        if not shadow:
            raise RealTilelangError(
                f"a real tilelang is importable here ({real}); tile_nb will not hide it silently",
                hint="use the real tilelang, or ask tile_nb to stand in for it anyway: `python -m "
                     "tile_nb.run "
                "--shadow ...`, `%tilelang_on_tile_nb --shadow`, or mapping.install(shadow=True)",
            )
        print(
            f"tile_nb: `import tilelang` resolves to tile_nb's stand-in, hiding the real tilelang at {real}",
            file=sys.stderr,
        )
        for name in [n for n in sys.modules if n == "tilelang" or n.startswith("tilelang.")]:
            del sys.modules[name]
    _finder = TilelangFinder()
    sys.meta_path.insert(0, _finder)
    tvm_names.install()  # the program's `tvm` is tilelang's: its fork's names (tirx.PrimExpr, expr.dtype)
    os.environ["TILE_NB_TILELANG"] = "1"  # child processes (a script's own subprocesses) can tell


def uninstall() -> None:
    """Remove the finder and every `tilelang*` module it made (a real tilelang imports normally again)."""
    global _finder
    if _finder is not None and _finder in sys.meta_path:
        sys.meta_path.remove(_finder)
    _finder = None
    tvm_names.uninstall()
    for name in [
        n
        for n, m in list(sys.modules.items())
        if (n == "tilelang" or n.startswith("tilelang."))
        and getattr(m, "__name__", "").startswith(_PREFIX)
        or getattr(m, "__tile_nb_stub__", False)
    ]:  # stubs are also under their tile_nb names
        del sys.modules[name]
    os.environ.pop("TILE_NB_TILELANG", None)
