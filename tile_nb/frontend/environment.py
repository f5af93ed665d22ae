"""Keying what a kernel's elaboration reads, on every call (the reads are found by `dependencies.py`).

`Environment.key()` evaluates a kernel's reads to a tuple that is equal exactly when what they read is:

- plain values by type and value; containers and user objects by their current contents;
- user functions (not from the standard library, site-packages, tile_nb or another installed, non-editable
  distribution) by their code and defaults and,
  transitively, by what they read; library modules, functions and classes by identity (`T.float16`, `math.pi`
  and `torch.float32` are constants, never followed);
- torch tensors by identity, storage, shape, dtype and version counter (bumped by in-place operations);
- numpy arrays (no version counter) by a hash of their bytes, up to `ARRAY_HASH_LIMIT`; a larger one raises,
  naming the read and the line.

The key runs on every call of a kernel, so each set of reads is evaluated by
straight-line code generated once:
roots that named a library module when it was generated (`T`, `torch`) cost one identity check.
`Environment.describe()` gives the same reads as stable text (content and code hashes) for tuning's
cross-process key.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
import sys
import sysconfig
import types
import weakref

from ..errors import UnhashableArgumentError
from ..language.functions import Macro, PrimFuncDefinition
from .dependencies import Read, Reads, code_reads, kernel_reads

__all__ = ["Environment", "value_key", "code_digest", "ARRAY_HASH_LIMIT"]

ARRAY_HASH_LIMIT = 1 << 20  # bytes of a numpy array hashed on every call; a larger one must be an argument


# -- library or user code ------------------------------------------------------------------------------------

@functools.cache
def _library_dirs() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    dirs = {paths.get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    dirs.add(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tile_nb itself
    return tuple(os.path.join(os.path.realpath(d), "") for d in dirs if d)


@functools.cache
def _installed_elsewhere() -> tuple[str, ...]:
    """The top-level packages and modules of distributions installed outside the site directories (a
    `pip install --target` folder on PYTHONPATH, as the GPU kit's TVM): library code too, which keying would
    otherwise follow class by class on every call (3 ms a call through `tvm.tir`). Only what an installer put
    there (a RECORD file) counts: editable installs and a project's own `.egg-info` (`setup.py develop`) stay
    user code, since their source is what the user edits."""
    from importlib import metadata

    prefixes = set()
    for dist in metadata.distributions():
        location = os.path.realpath(str(dist.locate_file("")))
        if os.path.join(location, "").startswith(_library_dirs()) or dist.read_text("RECORD") is None \
                or '"editable": true' in (dist.read_text("direct_url.json") or ""):
            continue
        tops = (dist.read_text("top_level.txt") or "").split()
        if not tops:  # no top_level.txt: the first component of each installed file
            tops = {f.parts[0] for f in dist.files or () if not f.parts[0].endswith((".dist-info", ".."))}
        for top in tops:
            path = os.path.join(location, top.removesuffix(".py"))
            prefixes.update((os.path.join(path, ""), path + ".py"))
    return tuple(sorted(prefixes))


@functools.cache
def _library_file(filename: str) -> bool:
    if filename.startswith("<frozen"):
        return True
    if filename.startswith("<"):
        return False  # a notebook cell or exec'd code
    path = os.path.realpath(filename)
    parts = path.split(os.sep)
    return (path.startswith(_library_dirs()) or "site-packages" in parts or "dist-packages" in parts
            or path.startswith(_installed_elsewhere()))


_LIBRARY_MODULES: dict = {}  # module -> bool: each module is classified once


def _library_module(module: types.ModuleType) -> bool:
    known = _LIBRARY_MODULES.get(module)
    if known is None:
        filename = getattr(module, "__file__", None)
        # A module without a file is built in (sys, math) or made by the user (types.ModuleType('cfg')).
        known = module.__name__ in sys.builtin_module_names if filename is None else _library_file(filename)
        _LIBRARY_MODULES[module] = known
    return known


def _library_class(cls: type) -> bool:
    module = sys.modules.get(getattr(cls, "__module__", None) or "")
    return module is not None and _library_module(module)


def _library_value(value) -> bool:
    """A module, function or class from a library: a constant, compared by identity."""
    if isinstance(value, types.ModuleType):
        return _library_module(value)
    if isinstance(value, types.FunctionType):
        return _library_file(value.__code__.co_filename)
    if isinstance(value, type):
        return _library_class(value)
    return isinstance(value, types.BuiltinFunctionType) and isinstance(
        value.__self__, (types.ModuleType, type(None))
    )


# -- keying values -------------------------------------------------------------------------------------------

class _Unkeyable(Exception):
    """A value no key can stand for (a numpy array too large to hash per call);
    `path` says where it was read."""

    def __init__(self, what: str, hint: str):
        super().__init__(what)
        self.what, self.hint, self.path = what, hint, []  # path: (name, site), innermost first


class _Identity:
    """An object keyed by identity without keeping it alive: once it is gone no key equals this one, so a new
    object at the same address is another value."""

    __slots__ = ("ref", "ident")

    def __init__(self, obj):
        try:
            self.ref = weakref.ref(obj)
        except TypeError:
            self.ref = lambda obj=obj: obj
        self.ident = id(obj)

    def __eq__(self, other):
        if not isinstance(other, _Identity) or other.ident != self.ident:
            return False
        obj = self.ref()
        return obj is not None and obj is other.ref()

    def __hash__(self):
        return self.ident


_ABSENT = ("<absent>",)  # a name not defined (yet): a notebook may define a helper after the kernel
_SCALARS = frozenset({int, float, bool, str, bytes, complex, type(None)})
# Library classes found to be hashable value types (tvm's Var, a T.dtype, torch.dtype): keyed as
# (type, value) at once from then on, as the scalars are (_object_key adds them).
_VALUE_TYPES: set = set()
_CONTAINERS = (tuple, list, dict, set, frozenset)


def value_key(value, seen: dict | None = None):
    """A hashable key, equal for two values exactly when an elaboration reading them sees the same thing: the
    type is part of it (1, 1.0 and True build different IR); containers and objects go by their current
    contents. `seen` maps the ids of the functions and objects being keyed to them, so recursion and cycles
    end (and, kept alive, no temporary object's id is reused meanwhile)."""
    kind = type(value)
    if kind in _SCALARS or kind in _VALUE_TYPES:
        return (kind, value)
    if kind is types.FunctionType:
        return value if _library_file(value.__code__.co_filename) else _function_key(value, seen)
    if kind is tuple or kind is list:  # the common containers: scalars inline, as they are per call
        return (kind, tuple([(type(v), v) if type(v) in _SCALARS else value_key(v, seen) for v in value]))
    if isinstance(value, _CONTAINERS):
        if isinstance(value, dict):  # insertion order kept: the body may iterate it
            items = tuple([(value_key(k, seen), value_key(v, seen)) for k, v in value.items()])
        elif isinstance(value, (set, frozenset)):
            items = tuple(sorted((value_key(v, seen) for v in value), key=repr))
        else:
            items = tuple([value_key(v, seen) for v in value])
        return (kind, items)
    if isinstance(value, type):
        return value if _library_class(value) else _class_key(value, seen)
    if isinstance(value, types.ModuleType):
        return value if _library_module(value) else _module_key(value, seen)
    if isinstance(value, types.MethodType):
        return ("<method>", value_key(value.__func__, seen), value_key(value.__self__, seen))
    if isinstance(value, types.BuiltinFunctionType):
        owner = value.__self__
        if owner is None or isinstance(owner, types.ModuleType):
            return value
        return ("<bound>", value.__name__, value_key(owner, seen))  # `cfg_dict.get`: its dict's contents
    if isinstance(value, functools.partial):
        return ("<partial>", value_key(value.func, seen), value_key(value.args, seen),
                value_key(value.keywords, seen))
    if hasattr(value, "_version") and hasattr(value, "data_ptr"):  # a torch tensor
        return ("<tensor>", _Identity(value), value._version, value.data_ptr(), value.shape, value.dtype)
    if kind is Macro or kind is PrimFuncDefinition:  # a T.macro's body is kernel code: keyed as its function
        return (kind, value_key(value.fn, seen))
    return _object_key(value, kind, seen)


def _object_key(value, kind: type, seen: dict | None):
    try:
        hash(value)
        hashable = True
    except TypeError:
        hashable = False
    if not hashable and hasattr(value, "__array_interface__"):
        return _array_key(value)
    if hashable and not (kind.__hash__ is object.__hash__ and kind.__eq__ is object.__eq__):
        # (not a dataclass: its hash may fail for some values, where a list is among its fields)
        if _library_class(kind) and not dataclasses.is_dataclass(kind):
            _VALUE_TYPES.add(kind)
        return (kind, value)  # a value type: its own equality says what is the same
    if _library_class(kind):
        return ("<id>", kind, _Identity(value))
    # A user object (a config): its attributes are its value, so a change rebuilds.
    seen = {} if seen is None else seen
    if id(value) in seen:
        return ("<cycle>", kind)
    seen[id(value)] = value
    state = getattr(value, "__dict__", None)
    slots = [s for base in kind.__mro__ for s in _slot_names(base) if s not in ("__dict__", "__weakref__")]
    # Its class too: a helper given the object may read a class attribute or call a method through it.
    return (value_key(kind, seen), value_key(state, seen) if isinstance(state, dict) else None,
            tuple(value_key(_follow(value, (s,)), seen) for s in slots))


def _slot_names(cls: type) -> tuple:
    slots = vars(cls).get("__slots__", ())
    return (slots,) if isinstance(slots, str) else tuple(slots)


def _array_key(array):
    """A numpy array by its contents: it has no version counter that would say it changed in place."""
    size = int(array.nbytes)
    if size > ARRAY_HASH_LIMIT:
        raise _Unkeyable(
            f"a numpy array of {size / (1 << 20):.1f} MiB (shape {tuple(array.shape)}, {array.dtype})",
            f"tile_nb hashes the numpy arrays a kernel reads on every call, up to "
            f"{ARRAY_HASH_LIMIT >> 20} MiB; pass it to the kernel as a tensor argument, or read a "
            "tuple (tuple(array.tolist())) or a few scalars from it",
        )
    if array.dtype.hasobject:
        return ("<ndarray>", array.shape, value_key(array.tolist()))
    data = array.data if array.flags.c_contiguous else array.tobytes()
    return ("<ndarray>", array.dtype.str, array.shape, hashlib.blake2b(data, digest_size=16).digest())


def _function_key(fn: types.FunctionType, seen: dict | None):
    """A user function by its code (a redefinition has new code) and what it reads
    now (a global only it reads)."""
    if seen is None:
        seen = {}
    elif id(fn) in seen:
        return ("<recursion>", fn.__code__)
    seen[id(fn)] = fn
    code = fn.__code__
    entry = _HELPERS.get(id(code))
    if entry is None or entry[0] is not code:
        entry = _HELPERS[id(code)] = (code, _evaluator(code_reads(code), fn.__globals__))
    defaults, kwdefaults = fn.__defaults__, fn.__kwdefaults__
    try:
        return (code, defaults if defaults is None else value_key(defaults, seen),
                kwdefaults if kwdefaults is None else value_key(kwdefaults, seen),
                entry[1](fn.__globals__, fn.__closure__, seen))
    except _Unkeyable as err:
        err.path.append(
            (f"function '{fn.__qualname__}'", (code.co_filename, code.co_firstlineno, None, None))
        )
        raise


# id(code) -> (code, evaluator of its reads); the code object is kept, so the id stays its own
_HELPERS: dict = {}


def _class_members(cls: type):
    """(name, value) of what a user class and its user base classes define (methods unwrapped)."""
    for base in cls.__mro__:
        if base is object or _library_class(base):
            continue
        for name, member in vars(base).items():
            if name in ("__dict__", "__weakref__", "__module__", "__doc__", "__qualname__"):
                continue
            if isinstance(member, (staticmethod, classmethod)):
                member = member.__func__
            elif isinstance(member, property):
                member = (member.fget, member.fset)
            yield f"{base.__qualname__}.{name}", member


def _class_key(cls: type, seen: dict | None):
    seen = {} if seen is None else seen
    if id(cls) in seen:
        return ("<recursion>", cls)
    seen[id(cls)] = cls
    return (cls, tuple((name, value_key(member, seen)) for name, member in _class_members(cls)))


def _module_key(module: types.ModuleType, seen: dict | None):
    """A user module used whole (passed to a helper, say): everything it defines,
    as no read through it is known."""
    seen = {} if seen is None else seen
    if id(module) in seen:
        return ("<recursion>", module)
    seen[id(module)] = module
    return (module, tuple((name, value_key(v, seen)) for name, v in vars(module).items()
                          if not (name.startswith("__") and name.endswith("__"))))


def _follow(value, chain: tuple[str, ...]):
    try:
        for attr in chain:
            value = getattr(value, attr)
    except Exception as err:  # noqa: BLE001 - elaboration raises it again, at the user's line
        return ("<getattr failed>", type(err))
    return value


def _read_key(read: Read, value, seen: dict | None):
    """The key of one root: the value as a whole if the body uses it whole, and
    the end of each attribute chain."""
    try:
        if read.whole and not read.chains:
            return value_key(value, seen)
        if value is _ABSENT or _library_value(value):
            return value  # what is read through a library object is a constant
        return (value_key(value, seen) if read.whole else None,
                tuple(value_key(_follow(value, chain), seen) for chain in read.chains))
    except _Unkeyable as err:
        err.path.append((read.name, read.site))
        raise


def _cell_value(cells, index: int):
    try:
        return cells[index].cell_contents
    except ValueError:  # an empty cell: the enclosing function has not assigned it yet
        return _ABSENT


def _all_reads_key(reads: Reads, globals_: dict, cells, seen: dict | None) -> tuple:
    """Every read keyed the general way: the evaluator's answer when a root it
    took for a library was rebound."""
    return ("<rebound>",) + tuple(_read_key(r, globals_.get(r.name, _ABSENT), seen) for r in reads.globals) \
        + tuple(_read_key(r, _cell_value(cells, i), seen) for i, r in reads.closure)


def _evaluator(reads: Reads, globals_: dict, kernel: types.FunctionType | None = None):
    """`evaluate(globals, cells, seen)` -> the key of `reads`, as straight-line code: roots that are library
    values in `globals_` now are checked by identity (if one was rebound, every read is keyed in full), a
    scalar read whole is `(type, value)` inline (so is a library value type once seen: _VALUE_TYPES), anything
    else goes through `_read_key`. For a `kernel`,
    `evaluate()` takes no arguments (its globals and cells are bound: this runs on every call)."""
    env = {"A": _ABSENT, "S": _SCALARS, "VT": _VALUE_TYPES, "rk": _read_key, "rebound": _all_reads_key,
           "reads": reads, "G": globals_, "F": kernel}
    pinned = [r for r in reads.globals if r.name in globals_ and _library_value(globals_[r.name])]
    if kernel is None:
        lines = ["def evaluate(g, cells, seen):"]
    else:
        lines = ["def evaluate():", "    g, cells, seen = G, F.__closure__, None"]
    if pinned:
        for i, r in enumerate(pinned):
            env[f"p{i}"] = globals_[r.name]
        tests = " or ".join(f"g.get({r.name!r}, A) is not p{i}" for i, r in enumerate(pinned))
        lines += [f"    if {tests}:", "        return rebound(reads, g, cells, seen)"]
    items = []
    roots = [(r, f"g.get({r.name!r}, A)") for r in reads.globals if r not in pinned]
    roots += [(r, index) for index, r in reads.closure]
    for k, (r, load) in enumerate(roots):
        env[f"r{k}"] = r
        if isinstance(load, str):
            lines.append(f"    v{k} = {load}")
        else:
            lines += ["    try:", f"        v{k} = cells[{load}].cell_contents",
                      "    except ValueError:", f"        v{k} = A"]
        items.append(
            f"(type(v{k}), v{k}) if type(v{k}) in S or type(v{k}) in VT else rk(r{k}, v{k}, seen)"
            if r.whole and not r.chains
            else f"rk(r{k}, v{k}, seen)"
        )
    lines.append(f"    return ({''.join(f'{item}, ' for item in items)})")
    exec("\n".join(lines), env)  # noqa: S102 - generated from names the analysis found
    return env["evaluate"]


def factory_key(fn: types.FunctionType, args: tuple, kwargs: dict) -> tuple:
    """The key of one call of a kernel factory: its arguments, and the factory as a user function is keyed
    (its code and defaults and what it reads now, helpers followed), so a global changed since the last call
    runs it again rather than returning the kernel built from the old value."""
    try:
        return (value_key(args), _keywords_key(kwargs) if kwargs else (), _function_key(fn, None))
    except _Unkeyable as err:
        code = fn.__code__
        name, site = (
            err.path[0] if err.path else ("an argument", (code.co_filename, code.co_firstlineno, None, None))
        )
        raise UnhashableArgumentError(
            f"the kernel factory {fn.__name__}() reads '{name}', {err.what}: it cannot be part of "
            "the factory's "
            "cache key, so a change to it could not rebuild the kernel",
            filename=site[0],
            lineno=site[1],
            col=site[2],
            end_col=site[3],
            hint=err.hint,
        ) from None


def _keywords_key(kwargs: dict) -> tuple:
    """`value_key` of the sorted (name, value) pairs, scalars inline (a factory call keys them per call)."""
    return tuple([(name, (type(v), v)) if type(v) in _SCALARS else (name, value_key(v))
                  for name, v in sorted(kwargs.items())])


# -- a kernel's environment ----------------------------------------------------------------------------------

class Environment:
    """The reads of one kernel, bound to its function's globals and closure cells."""

    def __init__(self, fn: types.FunctionType, reads: Reads):
        self.fn, self.reads = fn, reads
        self._evaluate = _evaluator(reads, fn.__globals__, fn)

    @classmethod
    def of_kernel(cls, definition) -> Environment:
        """The environment of a `KernelDefinition`: its body's reads, its function's globals and cells."""
        fn, source = definition.fn, definition.source
        arguments = source.tree.args
        params = {a.arg for a in arguments.posonlyargs + arguments.args + arguments.kwonlyargs}
        params |= {a.arg for a in (arguments.vararg, arguments.kwarg) if a is not None}
        return cls(fn, kernel_reads(source.tree.body, params, fn.__code__.co_freevars, fn.__globals__,
                                    source.filename, source.first_line, source.indent))

    @property
    def reads_anything(self) -> bool:
        return bool(self.reads.globals or self.reads.closure)

    def key(self) -> tuple:
        """What the body reads, now; raises UnhashableArgumentError, at the line that reads it, for a value
        that cannot be keyed."""
        try:
            return self._evaluate()
        except _Unkeyable as err:
            raise self._error(err) from None

    def _error(self, err: _Unkeyable) -> UnhashableArgumentError:
        through = [label for label, _ in reversed(err.path[1:]) if label.startswith("function ")]
        what = f"'{err.path[0][0]}'" + (f" (through {', then '.join(through)})" if through else "")
        filename, lineno, col, end_col = err.path[0][1]
        return UnhashableArgumentError(
            f"{self.fn.__name__}() reads {what}, {err.what}: it cannot be part of the kernel's "
            "cache key, so a "
            "change to it could not rebuild the kernel",
            filename=filename,
            lineno=lineno,
            col=col,
            end_col=end_col,
            hint=err.hint,
        )

    def describe(self) -> dict[str, str | None]:
        """Every value the body reads as stable text ('global cfg.block' -> text), None where a value has none
        that holds across processes. Library modules are left out: they are the same everywhere."""
        out: dict[str, str | None] = {}
        _describe_reads(self.reads, self.fn.__globals__, self.fn.__closure__, "", out, {})
        return out


def _describe_reads(reads: Reads, globals_: dict, cells, prefix: str, out: dict, seen: dict) -> None:
    entries = [("global", r, globals_.get(r.name, _ABSENT)) for r in reads.globals]
    entries += [("closure", r, _cell_value(cells, i)) for i, r in reads.closure]
    for scope, read, value in entries:
        if isinstance(value, types.ModuleType) and _library_module(value):
            continue
        label = f"{prefix}{scope} {read.name}"
        if read.whole or not read.chains or _library_value(value):
            out[label] = _describe(value, label, out, seen)
            if _library_value(value):
                continue
        for chain in read.chains:
            attr_label = f"{label}.{'.'.join(chain)}"
            out[attr_label] = _describe(_follow(value, chain), attr_label, out, seen)


def _describe(value, label: str, out: dict, seen: dict) -> str | None:
    """`module.qualname:text` of a value, the same in every process, or None (its text has an object address).
    A user function is its code's hash; what it reads goes into `out` under `label -> ...`."""
    kind = type(value)
    name = f"{kind.__module__}.{kind.__qualname__}"
    if value is _ABSENT:
        return "<not defined>"
    if isinstance(value, (Macro, PrimFuncDefinition)):
        return _describe(value.fn, label, out, seen)
    if _library_value(value):
        return f"{getattr(value, '__module__', None)}.{getattr(value, '__qualname__', value.__name__)}"
    if isinstance(value, types.FunctionType):
        if id(value) not in seen:
            seen[id(value)] = value
            _describe_reads(
                code_reads(value.__code__), value.__globals__, value.__closure__, f"{label} -> ", out, seen
            )
        defaults = _describe((value.__defaults__, value.__kwdefaults__), label, out, seen)
        return None if defaults is None else \
            f"function {value.__qualname__} code {code_digest(value.__code__)} defaults {defaults}"
    parts = None
    if isinstance(value, types.MethodType):
        parts = [value.__func__, value.__self__]
    elif isinstance(value, type):
        parts = list(_class_members(value))
    elif isinstance(value, functools.partial):
        parts = [value.func, value.args, value.keywords]
    elif isinstance(value, _CONTAINERS):
        parts = sorted(value.items(), key=repr) if isinstance(value, dict) else \
            sorted(value, key=repr) if isinstance(value, (set, frozenset)) else list(value)
    if parts is not None:
        texts = [_describe(v, label, out, seen) for v in parts]
        return None if None in texts else f"{name}:[{', '.join(texts)}]"
    if hasattr(value, "_version") and hasattr(value, "data_ptr"):  # a tensor, by its contents
        import torch

        data = value.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy()
        return f"{name}:{value.dtype}{tuple(value.shape)}:{hashlib.blake2b(data, digest_size=16).hexdigest()}"
    if hasattr(value, "__array_interface__") and getattr(value, "ndim", 0) and not value.dtype.hasobject:
        digest = hashlib.blake2b(value.tobytes(), digest_size=16).hexdigest()
        return f"{name}:{value.dtype}{tuple(value.shape)}:{digest}"
    text = repr(value)
    if " at 0x" in text or " object at " in text:
        return None
    return f"{name}:{text}"


def code_digest(code: types.CodeType) -> str:
    """A hash of what a code object does (bytecode, constants, names, nested
    code), not of where it is defined."""
    h = hashlib.blake2b(digest_size=16)

    def feed(c: types.CodeType) -> None:
        h.update(c.co_code)
        h.update(repr((c.co_names, c.co_varnames, c.co_freevars)).encode())
        for const in c.co_consts:
            if isinstance(const, types.CodeType):
                feed(const)
            else:
                h.update(repr(const).encode())

    feed(code)
    return h.hexdigest()
