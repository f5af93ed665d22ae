"""`T.import_source` code in the CUDA module: each PrimFunc of the module lists the CUDA C its kernel imports
(`tile_nb.extern_sources`, language/extern.py); the build pastes every text once, after TVM's header and
before the first kernel, so the kernels' `T.call_extern` calls find the functions declared."""
from __future__ import annotations

from ..language.extern import EXTERN_SOURCES_ATTR as ATTR

__all__ = ["paste", "sources_of", "with_sources"]

_BANNER = "// ---- T.import_source ({}) ----"


def sources_of(mod) -> list[str]:
    """The imported source texts of `mod`'s functions, each once, in the order of the functions."""
    import tvm

    found: list[str] = []
    for func in mod.functions.values():
        if isinstance(func, tvm.tirx.PrimFunc) and func.attrs is not None and ATTR in func.attrs:
            found += [str(s) for s in func.attrs[ATTR] if str(s) not in found]
    return found


def paste(code: str, sources: list[str]) -> str:
    """`code` with `sources` inserted before the first kernel (`extern "C" __global__`); at the end of the
    text where it has none."""
    if not sources:
        return code
    block = "".join(f"{_BANNER.format(k + 1)}\n{text.rstrip()}\n\n" for k, text in enumerate(sources))
    at = code.find('extern "C" __global__')
    at = len(code) if at < 0 else code.rfind("\n", 0, at) + 1
    return code[:at] + block + code[at:]


def with_sources(take_marks, mod):
    """`take_marks` (the build's removal of the lowering's source marks) applied after pasting `mod`'s
    imported sources, so that the marks' line numbers count the pasted lines."""
    sources = sources_of(mod)
    if not sources:
        return take_marks

    def paste_then_take_marks(code: str):
        return take_marks(paste(code, sources))

    return paste_then_take_marks
