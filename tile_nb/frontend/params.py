"""The kernel's parameters: which are runtime buffers or scalars and which are compile-time values.

Decided once, at decoration, from the signature and the body's annotations (read from the AST, since in-body
annotations do not reach the bytecode):
- a parameter annotated in the body (`A: T.Tensor[...]`, `x: T.float32`), or in the signature with `T.ptr`, a
  dtype or a tensor annotation (`A: T.Tensor[[128, 64], T.float16]`, `A: T.Tensor((128, 64), T.float16)`) is a
  runtime argument;
- every other parameter is a compile-time value, visible to plain Python in the
  body and part of the template key.
A tensor parameter named by `out_idx` (tilelang's `@T.prim_func` kernels) is an output: the call allocates it
and returns it, so it is not among the call's parameters.
"""
from __future__ import annotations

import ast
import inspect
from dataclasses import dataclass
from typing import Any

from ..errors import SignatureError
from ..language import annotations as ann
from ..language.dtypes import DType
from .source import KernelSource

__all__ = [
    "Param",
    "KernelSignature",
    "OUTPUT",
    "analyze_signature",
    "check_compile_value",
    "static_const_sources",
    "tensor_annotation_kind",
    "annotation_dim_lists",
]

RUNTIME, POINTER, SCALAR, TENSOR, COMPILE_TIME = "runtime", "pointer", "scalar", "tensor", "compile_time"
OUTPUT = "output"  # a signature tensor named by out_idx: allocated by the call and returned


@dataclass(frozen=True)
class Param:
    name: str
    index: int
    # RUNTIME (annotated in the body), TENSOR (T.Tensor / T.StridedTensor in the signature), POINTER (T.ptr),
    # SCALAR (signature dtype) or COMPILE_TIME
    kind: str
    # No field defaults: a default of inspect.Parameter.empty reads as "no default" to the inspect.signature
    # that Python 3.11.0-3.11.3's dataclass builds for __doc__, which then raised at import.
    default: Any  # inspect.Parameter.empty when the signature gives none
    keyword_only: bool
    annotation: Any  # the signature's annotation (compile-time values are checked by it), or Parameter.empty

    @property
    def is_runtime(self) -> bool:
        return self.kind != COMPILE_TIME


@dataclass(frozen=True)
class KernelSignature:
    name: str
    params: tuple[Param, ...]  # what a call passes (outputs named by out_idx are not among them)
    signature: inspect.Signature  # the call's signature, as `help` shows it
    outputs: tuple[Param, ...] = ()  # out_idx's tensors, in out_idx's order

    @property
    def runtime(self) -> tuple[Param, ...]:
        return tuple(p for p in self.params if p.is_runtime)

    @property
    def compile_time(self) -> tuple[Param, ...]:
        return tuple(p for p in self.params if not p.is_runtime)

    def by_name(self, name: str) -> Param | None:
        return next((p for p in self.params if p.name == name), None)


def _body_annotated_names(tree: ast.FunctionDef) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.AnnAssign) and node.value is None and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def _signature_kind(annotation, node: ast.expr | None) -> str | None:
    if annotation is inspect.Parameter.empty:
        return None
    if isinstance(annotation, ann.TensorAnnotation) or (isinstance(annotation, str) and node is not None
                                                         and tensor_annotation_kind(node)):
        return TENSOR
    if annotation is ann.ptr or annotation in ("T.ptr", "ptr"):
        return POINTER
    if isinstance(annotation, DType):
        return SCALAR
    return None


def analyze_signature(fn, source: KernelSource, out_idx=None) -> KernelSignature:
    sig = inspect.signature(fn)
    in_body = _body_annotated_names(source.tree)
    args = source.tree.args
    nodes = {a.arg: a.annotation for a in args.posonlyargs + args.args + args.kwonlyargs}
    where = dict(filename=source.filename, lineno=source.first_line + source.tree.lineno - 1)
    params = []
    for index, p in enumerate(sig.parameters.values()):
        if p.kind is inspect.Parameter.POSITIONAL_ONLY:
            raise SignatureError(
                f"kernel '{fn.__name__}' has positional-only parameter '{p.name}'; kernel parameters must be "
                "nameable (they are matched to annotations and keyword arguments by name)",
                hint="remove the `/` from the signature", **where)
        if p.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            star = "*" if p.kind is inspect.Parameter.VAR_POSITIONAL else "**"
            raise SignatureError(
                f"kernel '{fn.__name__}' has variadic parameter '{star}{p.name}'; kernels need "
                "a fixed list of parameters",
                **where,
            )
        kind = _signature_kind(p.annotation, nodes.get(p.name))
        if kind is None:
            kind = RUNTIME if p.name in in_body else COMPILE_TIME
        params.append(
            Param(p.name, index, kind, p.default, p.kind is inspect.Parameter.KEYWORD_ONLY, p.annotation)
        )
    outputs = tuple(params[i] for i in _output_positions(fn.__name__, params, out_idx, where))
    for p in outputs:
        if p.kind != TENSOR:
            raise SignatureError(
                f"out_idx names parameter {p.index} of kernel '{fn.__name__}', '{p.name}', which is "
                "not a tensor "
                "annotated in the signature; an output must be one, as in `C: T.Tensor((M, N), T.float32)`",
                **where,
            )
    outputs = tuple(Param(p.name, p.index, OUTPUT, p.default, p.keyword_only, p.annotation) for p in outputs)
    inputs = tuple(p for p in params if p.name not in {o.name for o in outputs})
    call_sig = sig.replace(parameters=[sig.parameters[p.name] for p in inputs]) if outputs else sig
    return KernelSignature(fn.__name__, inputs, call_sig, outputs)


def _output_positions(name: str, params: list, out_idx, where: dict) -> list[int]:
    """The parameter positions `out_idx` names (an int or a list of ints;
    negative ones count from the end)."""
    if out_idx is None:
        return []
    items = [out_idx] if isinstance(out_idx, int) else out_idx
    if isinstance(items, (str, bytes)) or not isinstance(items, (list, tuple)) or \
            not all(isinstance(i, int) and not isinstance(i, bool) for i in items):
        raise SignatureError(
            f"out_idx must be a parameter position or a list of them; got {out_idx!r}", **where
        )
    positions = []
    for i in items:
        if not -len(params) <= i < len(params):
            raise SignatureError(f"out_idx {i} is out of range: kernel '{name}' has {len(params)} parameters",
                                 **where)
        position = i % len(params)
        if position in positions:
            raise SignatureError(
                f"out_idx names parameter {position} ('{params[position].name}') twice", **where
            )
        positions.append(position)
    return positions


def static_const_sources(tree: ast.FunctionDef, runtime: set[str]) -> dict[str, tuple[str, str, int]]:
    """Where consts come from, read from the source alone: `M, K = T.const('M, K')` and
    `A: T.Tensor[[M, K], ...]` (or `A: T.Tensor((M, K), ...)`, in the body or the signature).

    Used when the template stopped before the annotations ran (a Python `if` on a const at the top, say), so
    that calls can still read the consts from the tensors.
    """
    consts: set[str] = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", getattr(node.func, "id", None)) == "const"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            consts.update(n.strip() for n in node.args[0].value.replace(",", " ").split())
    sources: dict[str, tuple[str, str, int]] = {}
    for name, annotation in _tensor_annotations(tree):
        if name not in runtime:
            continue
        for what, dims in annotation_dim_lists(annotation):
            for dim, expr in enumerate(getattr(dims, "elts", [])):
                if isinstance(expr, ast.Name) and expr.id in consts:
                    sources.setdefault(expr.id, (name, what, dim))
    return sources


def _tensor_annotations(tree: ast.FunctionDef):
    """(name, annotation AST) of the signature's tensor annotations, then the body's top-level ones."""
    args = tree.args
    for arg in args.args + args.kwonlyargs:
        if arg.annotation is not None and tensor_annotation_kind(arg.annotation):
            yield arg.arg, arg.annotation
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is None:
            yield node.target.id, node.annotation


def tensor_annotation_kind(node: ast.expr) -> str | None:
    """"Tensor" or "StridedTensor" when `node` spells a tensor annotation (`T.Tensor[[M, K], dt]`,
    `T.Tensor((M, K), dt)`, `T.StridedTensor(...)`, ...), else None."""
    if isinstance(node, (ast.Subscript, ast.Call)):
        head = node.value if isinstance(node, ast.Subscript) else node.func
        kind = getattr(head, "attr", getattr(head, "id", None))
        if kind in ("Tensor", "StridedTensor"):
            return kind
    return None


def annotation_dim_lists(node: ast.expr) -> list[tuple[str, ast.expr]]:
    """[("shape", dims AST), ("stride", strides AST)?] of a tensor annotation in either spelling."""
    kind = tensor_annotation_kind(node)
    if kind is None:
        return []
    if isinstance(node, ast.Subscript):
        parts = node.slice.elts if isinstance(node.slice, ast.Tuple) else []
        shape = parts[0] if parts else None
        strides = parts[1] if kind == "StridedTensor" and len(parts) > 2 else None
    else:
        keywords = {k.arg: k.value for k in node.keywords if k.arg}
        shape = node.args[0] if node.args else keywords.get("shape")
        strides = node.args[1] if kind == "StridedTensor" and len(node.args) > 1 else keywords.get("strides")
    lists = [("shape", shape)] if shape is not None else []
    return lists + ([("stride", strides)] if strides is not None else [])


_PLAIN_TYPES = {int: "an int", float: "a float (or int)", bool: "a bool", str: "a str"}
_TYPE_NAMES = {"int": int, "float": float, "bool": bool, "str": str}


def check_compile_value(param: Param, value):
    """`value` for the compile-time parameter `param`, checked against its signature annotation (int, float,
    bool, str or T.dtype) and normalized (an int for a float becomes a float, a dtype name a DType).

    Raises TypeError with what was expected; the caller adds the kernel's name and line.
    """
    from ..language.dtypes import _DTypeAnnotation, as_tensor_dtype, dtype

    annotation = param.annotation
    if isinstance(annotation, str):  # `from __future__ import annotations` in the user's module
        annotation = _TYPE_NAMES.get(annotation, dtype if annotation in ("T.dtype", "dtype") else annotation)
    if value is None and param.default is None:
        return value
    if isinstance(annotation, _DTypeAnnotation):
        try:
            return as_tensor_dtype(value)
        except ValueError as err:
            raise TypeError(f"must be a dtype such as T.float16; got {value!r} ({err})") from None
    if annotation not in _PLAIN_TYPES:
        return value
    ok = isinstance(value, annotation) and not (annotation is not bool and isinstance(value, bool))
    if annotation is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if not ok:
        raise TypeError(f"must be {_PLAIN_TYPES[annotation]}; got {type(value).__name__} {value!r}")
    return value
