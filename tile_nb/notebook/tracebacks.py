"""Short error display in IPython: a `TileNBError` shows the user's cell line
with a caret, not tile_nb internals.

`install(shell)` registers a custom exception handler for `tile_nb.errors.TileNBError`. The short form is

    DSLError: T.copy regions differ in shape: (64, 32) vs (32, 64)
      --> In[5], line 9, col 9
       |
     9 |         T.copy(A[bx * block_M, k * block_K], A_shared)
       |         ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
    hint: ...
    (short form by tile_nb: %tb shows the full traceback; TILE_NB_TRACEBACK=1 always shows it)

The full traceback stays available: the handler records it as the last exception (so `%tb` prints it), and
with the environment variable `TILE_NB_TRACEBACK=1` the handler shows it directly.

Errors of the other layers that are not `TileNBError`s (the CUDA compiler's `CudaCompileError`, the
interpreter's `OutOfBoundsError`, `LoweringError`, ...) get the same short form: the message, then the
kernel line the error carries, else the innermost line of the user's own cell in the traceback. Their
classes are registered once their modules are loaded (several import TVM, which `%load_ext` must not):
at install, before each cell, and when the magic finishes (an `except` clause reads the handled classes
only when the exception reaches it).
"""
from __future__ import annotations

import linecache
import os
import sys
import traceback

__all__ = ["TRACEBACK_ENV", "format_short", "install", "uninstall"]

TRACEBACK_ENV = "TILE_NB_TRACEBACK"
_RED, _BOLD_RED, _CYAN, _RESET = "\x1b[31m", "\x1b[1;31m", "\x1b[36m", "\x1b[0m"
_MAX_MESSAGE_LINES = 25

# Error classes of other layers shown in the short form: (module, class names). Looked up in sys.modules only.
_LAYER_ERRORS = (
    ("tile_nb.backend.cuda_compile", ("CudaCompileError", "ToolMissingError")),
    ("tile_nb.runtime.kernel", ("KernelNotLaunchableError",)),
    ("tile_nb.lower.lowering", ("LoweringError",)),
    ("tile_nb.interp.errors", ("InterpreterError", "OutOfBoundsError")),
)
# Light modules (no TVM, no torch) whose errors are registered from the start.
_EAGER = ("tile_nb.backend.cuda_compile", "tile_nb.runtime.kernel")


def handled_exceptions() -> tuple[type, ...]:
    """`TileNBError` and the error classes of the layers loaded so far."""
    from tile_nb.errors import TileNBError

    classes: list[type] = [TileNBError]
    for module_name, names in _LAYER_ERRORS:
        module = sys.modules.get(module_name)
        for name in names:
            cls = getattr(module, name, None) if module is not None else None
            if isinstance(cls, type) and issubclass(cls, BaseException) and cls not in classes:
                classes.append(cls)
    return tuple(classes)


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


def _message(err: BaseException) -> str:
    message = getattr(err, "message", None)
    if not isinstance(message, str):
        message = str(err)
        # the interpreter's errors append their location: shown below
        if getattr(err, "line", None) is not None:
            message = message.split("\n  --> ")[0]
    lines = message.rstrip().splitlines() or [""]
    if len(lines) > _MAX_MESSAGE_LINES:
        lines = lines[:1] + ["..."] + lines[-(_MAX_MESSAGE_LINES - 2):]
    return "\n".join(lines)


def _user_frame(tb, shell) -> tuple[str, int, int | None, int | None] | None:
    """(filename, line, col, end col) of the innermost traceback frame in a
    notebook cell (not the magic's call)."""
    cells = getattr(getattr(shell, "compile", None), "_filename_map", {}) or {}
    found = None
    for frame in traceback.extract_tb(tb):
        if frame.filename in cells or frame.filename.startswith("<ipython-input-"):
            if (frame.line or "").lstrip().startswith("get_ipython()"):
                continue  # the call IPython writes for a magic: not a line the user wrote
            found = (
                frame.filename,
                frame.lineno,
                getattr(frame, "colno", None),
                getattr(frame, "end_colno", None),
            )
    return found


def _location(err: BaseException, tb, shell):
    filename = getattr(err, "filename", None)
    lineno = getattr(err, "lineno", None) or getattr(err, "line", None)
    if isinstance(filename, str) and isinstance(lineno, int):
        return filename, lineno, getattr(err, "col", None), getattr(err, "end_col", None)
    if tb is not None:
        return _user_frame(tb, shell)
    return None


def format_short(err: BaseException, shell=None, color: bool = False, tb=None) -> str:
    """The short form of an error: its message, the user's line with a caret, and the hint if it has one.

    The line is the one a `TileNBError` (or an interpreter error) points at; for other errors, the innermost
    line of a notebook cell in the traceback `tb`.
    """
    red, bold, cyan, reset = (_RED, _BOLD_RED, _CYAN, _RESET) if color else ("", "", "", "")
    lines = [f"{bold}{type(err).__name__}{reset}: {_message(err)}"]
    location = _location(err, tb, shell)
    if location is not None:
        filename, lineno, col, end_col = location
        where = f"{_location_label(filename, shell)}, line {lineno}" + (
            f", col {col + 1}" if col is not None else ""
        )
        lines.append(f"  {cyan}-->{reset} {where}")
        source = linecache.getline(filename, lineno).rstrip("\n")
        if source:
            pad = " " * len(str(lineno))
            start = col if col is not None else len(source) - len(source.lstrip())
            end = end_col if end_col is not None and end_col > start else len(source.rstrip())
            lines += [f" {pad} {cyan}|{reset}",
                      f" {cyan}{lineno} |{reset} {source}",
                      f" {pad} {cyan}|{reset} {' ' * start}{red}{'^' * max(1, end - start)}{reset}"]
    hint = getattr(err, "hint", None)
    if isinstance(hint, str) and hint:
        lines.append(f"{cyan}hint{reset}: {hint}")
    return "\n".join(lines)


def _handler(shell, etype, value, tb, tb_offset=None):
    """IPython custom exception handler (see `InteractiveShell.set_custom_exc`)."""
    # Record it as the last exception so that `%tb` (and `%debug`) find the full traceback.
    sys.last_type, sys.last_value, sys.last_traceback = etype, value, tb
    if os.environ.get(TRACEBACK_ENV, "") not in ("", "0"):
        stb = shell.InteractiveTB.structured_traceback(etype, value, tb, tb_offset=tb_offset)
    else:
        # IPython 8 names the scheme "NoColor", IPython 9 "nocolor".
        color = str(getattr(shell, "colors", "NoColor")).lower() != "nocolor"
        footer = (f"(short form by tile_nb: %tb shows the full traceback; "
                  f"{TRACEBACK_ENV}=1 always shows it)")
        stb = [format_short(value, shell, color=color, tb=tb), footer]
    # In IPython 8 the value returned from a custom handler is dropped by `run_code`: show it ourselves
    # (ipykernel turns this into the cell's `error` output, with ename/evalue of the original exception).
    shell._showtraceback(etype, value, stb)


def refresh(shell) -> None:
    """Register the error classes of the layers loaded since the last call (cheap when nothing changed)."""
    classes = handled_exceptions()
    if getattr(shell, "custom_exceptions", ()) != classes and getattr(shell, "_tile_nb_short_errors", False):
        shell.set_custom_exc(classes, _handler)


def _pre_run_cell(*_args, **_kwargs) -> None:
    shell = _installed_shell
    if shell is not None:
        refresh(shell)


_installed_shell = None


def install(shell) -> None:
    """Show tile_nb's errors raised in `shell` in the short form."""
    global _installed_shell
    import importlib

    for module_name in _EAGER:
        try:
            importlib.import_module(module_name)
        except ImportError:  # a layer that is not there (yet) has no errors to register
            pass
    shell._tile_nb_short_errors = True
    shell.set_custom_exc(handled_exceptions(), _handler)
    if _installed_shell is None:
        shell.events.register("pre_run_cell", _pre_run_cell)
    _installed_shell = shell


def uninstall(shell) -> None:
    """Restore IPython's default display of every exception."""
    global _installed_shell
    shell._tile_nb_short_errors = False
    shell.set_custom_exc((), None)
    if _installed_shell is shell:
        shell.events.unregister("pre_run_cell", _pre_run_cell)
        _installed_shell = None
