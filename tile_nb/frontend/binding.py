"""Argument binding: a kernel call's arguments split into runtime values, compile-time values and consts.

Pure Python over the kernel's definition and its phase-1 template: nothing here compiles, allocates
or launches. `tile_nb/jit.py` calls these on a call's first sight of a compile-time key or of new
shapes (the cached call path never binds). Errors name the kernel, the parameter, what was expected
and what was given, at the user's line.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass, field

from ..errors import (
    ArgumentCountError,
    ArgumentError,
    MissingConstError,
    RankMismatchError,
    UnhashableArgumentError,
)
from .checks import check_const_value, check_tensor_kind, const_where
from .elaborate import Elaboration
from .kernel import KernelDefinition
from .params import COMPILE_TIME, POINTER, check_compile_value, static_const_sources

__all__ = [
    "Template",
    "Missing",
    "bind",
    "bind_compile_only",
    "const_values",
    "definition_where",
    "is_tensor",
    "value_sources",
]

_EMPTY = inspect.Parameter.empty


@dataclass
class Template:
    """Phase 1 for one compile-time key, and where each const's value is read from in a call."""

    elaboration: Elaboration
    compile_values: dict
    const_sources: dict  # const name -> (param name, "shape" | "stride", dim)
    dynamic_sources: dict  # dynamic name -> (param name, dim)
    # const-value tuple -> Specialization (runtime/launch.py)
    specializations: dict = field(default_factory=dict)

    @property
    def consts(self) -> list[str]:
        return self.elaboration.consts


class _MissingType:
    def __repr__(self) -> str:
        return "<not given>"


Missing = _MissingType()  # a runtime argument not given (consts passed as keywords instead)


def is_tensor(x) -> bool:
    return type(x).__name__ in ("Tensor", "Parameter") and hasattr(x, "data_ptr")


def definition_where(definition: KernelDefinition) -> dict:
    """The `def` line of the kernel: where an error about the call as a whole points."""
    src = definition.source
    return dict(filename=src.filename, lineno=src.first_line + src.tree.lineno - 1)


def bind(definition: KernelDefinition, args, kwargs) -> tuple[dict, dict, dict]:
    """Split a call into runtime values, compile-time values (checked,
    hashable), and extra keywords (consts)."""
    name, signature = definition.name, definition.signature
    where = definition_where(definition)
    positional = [p for p in signature.params if not p.keyword_only]
    if len(args) > len(positional):
        raise ArgumentCountError(
            f"{name}() takes {len(positional)} positional arguments but {len(args)} were given", **where
        )
    # strict=False: fewer arguments than parameters is fine, the rest come by keyword or default
    values = {p.name: a for p, a in zip(positional, args, strict=False)}
    extra = {}
    for key, value in kwargs.items():
        if signature.by_name(key) is None:
            extra[key] = value
        elif key in values:
            raise ArgumentCountError(f"{name}() got multiple values for argument '{key}'", **where)
        else:
            values[key] = value
    runtime, compile_values = {}, {}
    for p in signature.params:
        if p.name in values:
            (compile_values if p.kind == COMPILE_TIME else runtime)[p.name] = values[p.name]
        elif p.default is not _EMPTY:
            (compile_values if p.kind == COMPILE_TIME else runtime)[p.name] = p.default
        elif p.kind == COMPILE_TIME:
            raise ArgumentCountError(f"{name}() missing compile-time argument '{p.name}'", **where)
        else:
            missing = [q.name for q in signature.runtime if q.name not in values]
            raise ArgumentCountError(f"{name}() missing {len(missing)} runtime argument(s): "
                                     f"{', '.join(repr(m) for m in missing)}", **where)
    for p in signature.compile_time:
        value = compile_values[p.name]
        if is_tensor(value):
            continue  # reported below, with the hint for a missing annotation
        try:
            compile_values[p.name] = check_compile_value(p, value)
        except TypeError as err:
            raise ArgumentError(f"{name}() compile-time argument '{p.name}' {err}", **where,
                                hint=f"the signature declares `{p.name}: {_annotation_text(p.annotation)}`"
                                ) from None
    for key, value in compile_values.items():
        try:
            hash(value)
        except TypeError:
            raise UnhashableArgumentError(
                f"{name}() compile-time argument '{key}' must be hashable (it keys the kernel cache); got "
                f"{type(value).__name__}",
                **where,
                hint="pass a tuple instead of a list, or annotate it in the body if it is a runtime tensor",
            ) from None
        if is_tensor(value):
            tensors = [p.name for p in signature.runtime]
            index, param = next((i, p) for i, p in enumerate(signature.params) if p.name == key)
            # A tensor landing on a compile-time parameter that has a default: an extra positional argument.
            if index < len(args) and param.default is not _EMPTY and \
                    all(p.is_runtime for p in signature.params[:len(tensors)]):
                raise ArgumentCountError(
                    f"{name}() got a tensor as positional argument {index + 1}, which is the compile-time "
                    f"parameter '{key}'; the kernel takes {len(tensors)} runtime argument(s): "
                    f"{', '.join(tensors)}", **where,
                    hint=f"if '{key}' is meant to be a tensor, annotate it in the body, e.g. "
                         f"`{key}: T.Tensor[[M, N], T.float16]`")
            raise ArgumentError(
                f"{name}() argument '{key}' is a tensor but has no annotation in the kernel body, so it is "
                "treated as a compile-time value", **where,
                hint=f"declare it, e.g. `{key}: T.Tensor[[M, N], T.float16]`, at the top of the body")
    return runtime, compile_values, extra


def bind_compile_only(definition: KernelDefinition, kwargs) -> tuple[dict, dict, dict]:
    """Bind compile-time keywords alone (the runtime arguments stand as `Missing`)."""
    placeholders = {p.name: Missing for p in definition.signature.runtime if p.name not in kwargs}
    return bind(definition, (), {**placeholders, **kwargs})


def value_sources(definition: KernelDefinition, elab: Elaboration) -> tuple[dict, dict]:
    """Where a call's tensors give each const and dynamic dim: the first tensor dim or stride that is exactly
    it. (const name -> (param, "shape" | "stride" | "packed", dim), dynamic name -> (param, dim); "packed":
    the last dim of a T.int4 tensor, two values in each byte the call passes)."""
    consts, dynamics = {}, {}
    runtime_names = [p.name for p in definition.signature.runtime]
    pointers = {p.name for p in definition.signature.runtime if p.kind == POINTER}
    # Tensors first; a pointer parameter's T.make_tensor shape is a source too, used when the call passes a
    # tensor for it (an address carries no shape: `const_values` says so then).
    for name in sorted(runtime_names, key=lambda n: n in pointers):
        param = elab.buffers.get(name)
        if param is None:
            continue
        for dim, expr in enumerate(param.annotation.shape):
            hit = _bare_var(expr, elab)
            if hit in elab.consts:
                consts.setdefault(hit, (name, "shape", dim))
            elif hit in elab.dynamic:
                dynamics.setdefault(hit, (name, dim))
        for dim, expr in enumerate(param.annotation.strides or ()):
            hit = _bare_var(expr, elab)
            if hit in elab.consts:
                consts.setdefault(hit, (name, "stride", dim))
        if param.packed is not None:  # a T.int4 tensor's last dim: twice the bytes the call passes
            dim = len(param.packed.shape) - 1
            hit = _bare_var(param.packed.shape[dim], elab)
            if hit in elab.consts:
                consts.setdefault(hit, (name, "packed", dim))
    if elab.stopped is not None:  # the annotations may not have run: read them from the source
        static = static_const_sources(definition.source.tree, set(runtime_names))
        for name, source in static.items():
            consts.setdefault(name, source)
            if name not in elab.consts:
                elab.consts.append(name)
    return consts, dynamics


def const_values(definition: KernelDefinition, template: Template, runtime: dict, extra: dict) -> dict:
    """The value of each const of `template` in this call: given as a keyword, or read from a tensor's shape
    or stride (that tensor's kind and rank are checked here, before anything reads a dim of it)."""
    name, signature = definition.name, definition.signature
    values = {}
    unknown = [k for k in extra if k not in template.consts]
    if unknown:
        raise ArgumentCountError(
            f"{name}() got unexpected keyword argument(s) {', '.join(map(repr, unknown))}",
            **definition_where(definition),
            hint=f"parameters are {', '.join(p.name for p in signature.params)}; "
            f"consts are {', '.join(template.consts) or 'none'}",
        )
    for const in template.consts:
        if const in extra:
            value = extra[const]
            if type(value) is not int or value < 0:  # the error (or a numpy int's value) at the T.const line
                value = check_const_value(name, const, value, const_where(definition.source, const))
            values[const] = value
            continue
        source = template.const_sources.get(const)
        if source is None:
            pointers = [p.name for p in signature.runtime if p.kind == POINTER]
            why = f" (pointer arguments carry no shape: {', '.join(pointers)})" if pointers else ""
            raise MissingConstError(
                f"{name}() needs a value for const '{const}': no tensor dim is exactly {const}{why}",
                **definition_where(definition), hint=f"pass it as a keyword, e.g. {name}(..., {const}=1024)")
        param, kind, dim = source
        if param not in runtime:
            raise MissingConstError(f"{name}() needs a value for const '{const}' (from '{param}'), but "
                                    f"'{param}' was not given", **definition_where(definition),
                                    hint=f"pass '{param}' or {const}=... as a keyword")
        tensor = runtime[param]
        if not is_tensor(tensor) and signature.by_name(param).kind == POINTER:
            raise MissingConstError(
                f"{name}() needs a value for const '{const}': it is a dim of the pointer argument "
                f"'{param}', which "
                f"was given as an address ({type(tensor).__name__}), and an address carries no shape",
                **definition_where(definition),
                hint=f"pass {const}=... as a keyword, or pass '{param}' as a tensor",
            )
        bp = template.elaboration.buffers.get(param)
        if bp is not None:
            check_tensor_kind(name, param, tensor, len(bp.annotation.shape),
                              dict(filename=bp.filename, lineno=bp.lineno, col=bp.col, end_col=bp.end_col))
        else:  # the template stopped before this annotation; phase 2 checks the rest
            check_tensor_kind(name, param, tensor, None, definition_where(definition))
        if dim >= tensor.dim():
            raise RankMismatchError(
                f"{name}() argument '{param}' has {tensor.dim()} dims, but const '{const}' is its dim {dim}",
                **definition_where(definition),
            )
        if kind == "stride":
            values[const] = int(tensor.stride(dim))
        else:  # "packed": two values in each byte
            values[const] = int(tensor.shape[dim]) * (2 if kind == "packed" else 1)
    return values


def _annotation_text(annotation) -> str:
    return annotation if isinstance(annotation, str) else getattr(annotation, "__name__", repr(annotation))


def _bare_var(expr, elab: Elaboration) -> str | None:
    """The name of `expr` if it is exactly a const or dynamic Var of this elaboration."""
    for name, var in list(elab.const_vars.items()) + list(elab.dynamic.items()):
        if hasattr(expr, "same_as") and expr.same_as(var):
            return name
    return None
