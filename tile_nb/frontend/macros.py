"""Calling a `T.macro` while a kernel is elaborated: its body, rewritten as a kernel body is, runs in place.

A macro's body is kernel code (loops over T.Parallel, IR `if`s, stores into buffers), so it goes
through the same AST rewrite as a kernel body (`frontend.rewrite`), once per function code, and
runs with the calling kernel's hooks:
what it builds lands where it is called. Its `return` gives its value back to the caller.
"""
from __future__ import annotations

import inspect
import threading
import types

from ..errors import DSLError
from ..language.annotations import BufferAnnotation
from ..language.irutil import is_buffer, static_int
from ..language.memory import LOCAL_THREAD
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
    _check_buffer_arguments(st, fn, args, kwargs)
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


def _check_buffer_arguments(st, fn, args: tuple, kwargs: dict) -> None:
    """A DSLError at the call when an argument is not the tile its parameter's `T.SharedBuffer` /
    `T.FragmentBuffer` / `T.LocalBuffer` annotation names (its memory, dtype, or a static dim)."""
    annotated = {name: a for name, a in _annotations(fn) if isinstance(a, BufferAnnotation)}
    if not annotated:
        return
    try:
        bound = inspect.signature(fn).bind(*args, **kwargs)
    except TypeError:
        return  # the call itself reports it
    for name, annotation in annotated.items():
        if name in bound.arguments:
            problem = _mismatch(bound.arguments[name], annotation)
            if problem:
                raise st.error(f"calling the T.macro '{fn.__name__}': its parameter '{name}' is annotated "
                               f"{annotation!r}; {problem}")


def _annotations(fn):
    """(name, annotation) of fn's parameters, string annotations (`from __future__ import annotations`)
    evaluated where they can be: in fn's globals and closure (a name an annotation alone uses is not in the
    closure; such an annotation is passed over, not checked)."""
    scope = dict(fn.__globals__)
    for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or (), strict=True):
        try:
            scope[name] = cell.cell_contents
        except ValueError:  # not filled yet
            pass
    for name, annotation in getattr(fn, "__annotations__", {}).items():
        if isinstance(annotation, str):
            try:
                annotation = eval(annotation, scope)  # noqa: S307 - the user's own annotation text
            except Exception:  # noqa: BLE001 - an annotation that does not evaluate here is not checked
                continue
        yield name, annotation


def _mismatch(value, annotation) -> str | None:
    if not is_buffer(value):
        return f"got {value!r}, not a tile"
    scope = str(value.scope())
    if scope not in annotation.scopes:
        return f"got '{value.name}', a {scope} buffer"
    if str(value.dtype) != str(annotation.dtype):
        return f"got '{value.name}', a {value.dtype} buffer"
    if scope == LOCAL_THREAD:  # one row per thread before the thread's own dims
        return None
    dims = [static_int(d) for d in value.shape]
    wanted = [static_int(d) for d in annotation.shape]
    clash = any(None not in (a, b) and a != b for a, b in zip(dims, wanted, strict=False))
    if len(dims) != len(wanted) or clash:
        shown = tuple(d if d is not None else symbolic for d, symbolic in zip(dims, value.shape, strict=True))
        return f"got '{value.name}' of shape {shown}"
    return None


def _is_call_error(err: TypeError, fn) -> bool:
    """A TypeError from binding the call's arguments (wrong count, unknown
    keyword), not from inside the body."""
    tb = err.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and tb.tb_frame.f_code.co_name == "call_macro" and fn.__name__ in str(err)
