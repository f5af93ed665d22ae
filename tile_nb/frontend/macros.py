"""Calling a `T.macro` while a kernel is elaborated: its body, rewritten as a kernel body is, runs in place.

A macro's body is kernel code (loops over T.Parallel, IR `if`s, stores into buffers), so it goes
through the same AST rewrite as a kernel body (`frontend.rewrite`), once per function code, and
runs with the calling kernel's hooks:
what it builds lands where it is called. Its `return` gives its value back to the caller.
"""
from __future__ import annotations

import threading
import types

from ..errors import DSLError
from .rewrite import FACTORY_NAME, rewrite_kernel
from .source import get_source

__all__ = ["call_macro"]

_FACTORIES: dict = {}  # id(code) -> (code, factory, filename); the code is kept so the id stays its own
_LOCK = threading.Lock()


def _factory(fn: types.FunctionType):
    code = fn.__code__
    entry = _FACTORIES.get(id(code))
    if entry is None or entry[0] is not code:
        source = get_source(fn)
        module = rewrite_kernel(source, code.co_freevars, macro=True)
        namespace: dict = {}
        exec(module, fn.__globals__, namespace)  # noqa: S102 - defines the factory; the body runs when called
        entry = (code, namespace[FACTORY_NAME], source.filename)
        with _LOCK:
            _FACTORIES[id(code)] = entry
    return entry


def call_macro(hooks, macro, args: tuple, kwargs: dict):
    """Elaborate `macro`'s body with `args` in the kernel being elaborated (`hooks` is its `__tnb__`)."""
    fn = macro.fn
    st = hooks.st
    _, factory, filename = _factory(fn)
    try:
        cells = tuple(cell.cell_contents for cell in (fn.__closure__ or ()))
    except ValueError:  # a cell not filled yet: the macro reads a name its enclosing function defines later
        raise st.error(
            f"the T.macro '{fn.__name__}' reads a variable of its enclosing function that has no value yet"
        ) from None
    body = factory(hooks, *cells)
    caller = (st.filename, st.lineno, st.col, st.end_col)
    hooks.macro_frames.append(hooks.ir_nesting())
    st.filename = filename  # errors inside the macro point at its lines
    try:
        value = body(*args, **kwargs)
    except TypeError as err:
        if _is_call_error(err, fn):
            st.filename, st.lineno, st.col, st.end_col = caller
            raise DSLError(
                f"calling the T.macro '{fn.__name__}': {err}",
                filename=caller[0],
                lineno=caller[1],
                col=caller[2],
                end_col=caller[3],
            ) from None
        raise
    finally:
        hooks.macro_frames.pop()
    st.filename, st.lineno, st.col, st.end_col = caller
    return value


def _is_call_error(err: TypeError, fn) -> bool:
    """A TypeError from binding the call's arguments (wrong count, unknown
    keyword), not from inside the body."""
    tb = err.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and tb.tb_frame.f_code.co_name == "call_macro" and fn.__name__ in str(err)
