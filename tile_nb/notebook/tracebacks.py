"""Short error display in IPython: a `TileNBError` shows the user's cell line with a caret, not tile_nb internals.

`install(shell)` registers a custom exception handler for `tile_nb.errors.TileNBError`. The short form is

    DSLError: T.copy regions differ in shape: (64, 32) vs (32, 64)
      --> In[5], line 9, col 9
       |
     9 |         T.copy(A[bx * block_M, k * block_K], A_shared)
       |         ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
    hint: ...
    (short form by tile_nb: %tb shows the full traceback; TILE_NB_TRACEBACK=1 always shows it)

The full traceback stays available: the handler records it as the last exception (so `%tb` prints it), and with the
environment variable `TILE_NB_TRACEBACK=1` the handler shows it directly.
"""
from __future__ import annotations

import linecache
import os
import sys

__all__ = ["TRACEBACK_ENV", "format_short", "install", "uninstall"]

TRACEBACK_ENV = "TILE_NB_TRACEBACK"
_RED, _BOLD_RED, _CYAN, _RESET = "\x1b[31m", "\x1b[1;31m", "\x1b[36m", "\x1b[0m"


def _location_label(filename: str, shell=None) -> str:
    """'In[5]' for a cell IPython compiled (including `%%tilekernel` cells), else the filename."""
    compiler = getattr(shell, "compile", None)
    if compiler is not None and hasattr(compiler, "format_code_name"):
        try:
            label = compiler.format_code_name(filename)
        except Exception:  # noqa: BLE001 - a label is cosmetic; never fail while reporting an error
            label = None
        if label:
            return label[1]
    if filename.startswith("<ipython-input-"):
        return f"In[{filename.split('-')[2]}]"
    return filename


def format_short(err: BaseException, shell=None, color: bool = False) -> str:
    """The short form of a `TileNBError` (or any exception with its fields): message, cell line, caret, hint."""
    red, bold, cyan, reset = (_RED, _BOLD_RED, _CYAN, _RESET) if color else ("", "", "", "")
    message = getattr(err, "message", None) or str(err)
    lines = [f"{bold}{type(err).__name__}{reset}: {message}"]
    filename, lineno = getattr(err, "filename", None), getattr(err, "lineno", None)
    if filename and lineno:
        col = getattr(err, "col", None)
        where = f"{_location_label(filename, shell)}, line {lineno}" + (f", col {col + 1}" if col is not None else "")
        lines.append(f"  {cyan}-->{reset} {where}")
        source = linecache.getline(filename, lineno).rstrip("\n")
        if source:
            pad = " " * len(str(lineno))
            start = col if col is not None else len(source) - len(source.lstrip())
            end_col = getattr(err, "end_col", None)
            end = end_col if end_col is not None and end_col > start else len(source.rstrip())
            lines += [f" {pad} {cyan}|{reset}",
                      f" {cyan}{lineno} |{reset} {source}",
                      f" {pad} {cyan}|{reset} {' ' * start}{red}{'^' * max(1, end - start)}{reset}"]
    hint = getattr(err, "hint", None)
    if hint:
        lines.append(f"{cyan}hint{reset}: {hint}")
    return "\n".join(lines)


def _handler(shell, etype, value, tb, tb_offset=None):
    """IPython custom exception handler (see `InteractiveShell.set_custom_exc`)."""
    # Record it as the last exception so that `%tb` (and `%debug`) find the full traceback.
    sys.last_type, sys.last_value, sys.last_traceback = etype, value, tb
    if os.environ.get(TRACEBACK_ENV, "") not in ("", "0"):
        stb = shell.InteractiveTB.structured_traceback(etype, value, tb, tb_offset=tb_offset)
    else:
        color = getattr(shell, "colors", "NoColor") != "NoColor"
        footer = (f"(short form by tile_nb: %tb shows the full traceback; "
                  f"{TRACEBACK_ENV}=1 always shows it)")
        stb = [format_short(value, shell, color=color), footer]
    # In IPython 8 the value returned from a custom handler is dropped by `run_code`: show it ourselves (ipykernel
    # turns this into the cell's `error` output, with ename/evalue of the original exception).
    shell._showtraceback(etype, value, stb)


def install(shell) -> None:
    """Show `TileNBError`s raised in `shell` in the short form."""
    from tile_nb.errors import TileNBError

    shell.set_custom_exc((TileNBError,), _handler)


def uninstall(shell) -> None:
    """Restore IPython's default display of every exception."""
    shell.set_custom_exc((), None)
