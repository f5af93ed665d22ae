"""`%tilelang_on_tile_nb`: in a notebook, `import tilelang` resolves to tile_nb's stand-in (tile_nb.tilelang),
so an unchanged tilelang notebook runs on tile_nb.

    %load_ext tile_nb
    %tilelang_on_tile_nb            # from now on in this kernel; refused when a real tilelang is importable
    %tilelang_on_tile_nb --shadow   # ... unless you say so (then it is hidden; the magic says where it was)
    %tilelang_on_tile_nb --cpu      # also map torch's "cuda" device to the CPU: kernels run on the CPU
                                    # interpreter
    %tilelang_on_tile_nb off        # back to normal imports (the --cpu torch mapping stays for the session)

Run the magic before the cell that imports tilelang: a tilelang module imported earlier is not replaced.
"""
from __future__ import annotations

from IPython.core.magic import Magics, line_magic, magics_class

__all__ = ["TilelangMagics", "tilelang_on_tile_nb"]

_USAGE = "usage: %tilelang_on_tile_nb [--shadow] [--cpu] | off"


def tilelang_on_tile_nb(line: str = "") -> str:
    """What the magic does, callable without IPython; returns the line it prints."""
    from tile_nb.tilelang import mapping

    words = line.split()
    unknown = [w for w in words if w not in ("--shadow", "--cpu", "off", "on")]
    if unknown:
        raise ValueError(f"unknown argument(s) {' '.join(unknown)}; {_USAGE}")
    if "off" in words:
        mapping.uninstall()
        return "tile_nb: `import tilelang` is back to normal imports"
    mapping.install(shadow="--shadow" in words)
    text = (
        "tile_nb: `import tilelang` now resolves to tile_nb's stand-in (tile_nb.tilelang; docs/tilelang.md)"
    )
    if "--cpu" in words:
        from tile_nb.tilelang import cpu_device

        cpu_device.install()
        text += "; torch's 'cuda' device maps to the CPU (the interpreter runs the kernels)"
    return text


@magics_class
class TilelangMagics(Magics):
    @line_magic
    def tilelang_on_tile_nb(self, line: str = ""):
        print(tilelang_on_tile_nb(line))
