"""Argument checks for a specialized kernel: what each runtime parameter must
be, and the errors when it is not.

`Expectations` is computed once per specialization; `check` is the fast yes/no used on
every call, and `explain` builds the precise error (name, expected, given, the annotation's
line, a hint) when `check` says no.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import (
    ArgumentError,
    ConstValueError,
    DeviceMismatchError,
    DtypeMismatchError,
    EmptyGridError,
    NotContiguousError,
    RankMismatchError,
    RequiresGradError,
    ShapeMismatchError,
    UnsupportedTensorError,
)
from ..language.dtypes import torch_dtype
from ..language.irutil import static_int
from .elaborate import BufferParam, Elaboration, ScalarParam
from .indexing import INDEX_LIMIT, tensor_span

__all__ = [
    "TensorExpectation",
    "Expectations",
    "describe_dims",
    "check_tensor_kind",
    "check_tensor_storage",
    "check_device_type",
    "check_const_value",
    "check_not_autograd",
    "empty_grid_error",
    "empty_at_call",
    "const_where",
    "kernel_where",
    "launch_grid",
]


def describe_dims(template_param: BufferParam | None, values: tuple) -> str:
    """`(K=512, N)`: the annotation's dims, with the values phase 2 gave them where known."""
    names = [str(d) for d in template_param.annotation.shape] if template_param else [None] * len(values)
    parts = []
    for name, value in zip(names, values, strict=True):
        if name is None or name == str(value):
            parts.append(str(value) if value is not None else "?")
        elif value is None:
            parts.append(name)
        else:
            parts.append(f"{name}={value}")
    return "(" + ", ".join(parts) + (",)" if len(parts) == 1 else ")")


@dataclass
class TensorExpectation:
    name: str
    index: int  # position among the runtime arguments
    dtype: Any  # torch dtype
    shape: tuple  # ints, None for dynamic dims
    strides: tuple | None  # StridedTensor: ints / None; T.Tensor: None (contiguous required)
    param: BufferParam  # phase-2 param (for the line)
    template_param: BufferParam | None

    def matches(self, t) -> bool:
        if t.dtype is not self.dtype or len(t.shape) != len(self.shape):
            return False
        if any(e is not None and e != g for e, g in zip(self.shape, t.shape, strict=True)):
            return False
        if self.strides is None:
            return t.is_contiguous()
        return all(e is None or e == g for e, g in zip(self.strides, t.stride(), strict=True))


_SCALAR_TYPES = {"float": ((float, int), "a float or an int"), "int": ((int,), "an int"),
                 "bool": ((bool,), "a bool")}


@dataclass
class ScalarExpectation:
    """A runtime scalar parameter (`alpha: T.float32`): a Python number of the right kind, never None."""

    name: str
    index: int
    param: ScalarParam

    @property
    def kind(self) -> str:
        dtype = str(self.param.dtype)
        return "bool" if dtype == "bool" else "float" if dtype.startswith(("float", "bfloat")) else "int"

    @property
    def python_types(self) -> tuple:
        return _SCALAR_TYPES[self.kind][0]

    @property
    def expected(self) -> str:
        return _SCALAR_TYPES[self.kind][1]


@dataclass
class DerivedDim:
    """A tensor dim given by T.dynamic dims (`B: T.Tensor[[N * 2 + 1]]`, or `N` again after another tensor
    gave it): Python expressions over the call's `args` for the size given and the size expected."""

    tensor: TensorExpectation
    dim: int
    given: str
    expected: str
    text: str  # the annotation's expression, e.g. "N * 2 + 1"
    hint: str


def _derived_dims(tensors: list[TensorExpectation], dynamic: dict) -> list[DerivedDim]:
    """Every dynamic tensor dim except the first occurrence of each bare T.dynamic var, which defines it."""
    from tvm import tirx

    sources: dict = {}  # dynamic Var -> (tensor, dim) that gives its value
    pending = []
    for e in tensors:
        for dim, expr in enumerate(e.param.annotation.shape):
            if e.shape[dim] is not None:
                continue
            var = next((v for v in dynamic.values() if expr.same_as(v)), None)
            if var is not None and var not in sources:
                sources[var] = (e, dim)
            else:
                pending.append((e, dim, expr))
    out = []
    for e, dim, expr in pending:
        python = _python_of(expr, {v: f"args[{t.index}].shape[{d}]" for v, (t, d) in sources.items()}, tirx)
        if python is None:
            continue  # not plain integer arithmetic over the dims: TVM's own launch check covers it
        names = ", ".join(f"{v.name} from {t.name}.shape[{d}]" for v, (t, d) in sources.items()
                          if _uses(expr, v, tirx))
        out.append(DerivedDim(e, dim, f"args[{e.index}].shape[{dim}]", python, str(expr),
                              f"the T.dynamic dims are read from the first tensor using them: {names}"))
    return out


def _uses(expr, var, tirx) -> bool:
    return any(v.same_as(var) for v in tirx.analysis.undefined_vars(expr))


def _python_of(expr, names: dict, tirx) -> str | None:
    """Python source computing an integer TIR expression from `names` (Var -> source text), or None."""
    ops = {tirx.Add: "+", tirx.Sub: "-", tirx.Mul: "*", tirx.FloorDiv: "//", tirx.FloorMod: "%"}
    if isinstance(expr, tirx.IntImm):
        return str(int(expr))
    if isinstance(expr, tirx.Var):
        return next((text for v, text in names.items() if v.same_as(expr)), None)
    for cls, op in ops.items():
        if isinstance(expr, cls):
            a, b = _python_of(expr.a, names, tirx), _python_of(expr.b, names, tirx)
            return None if a is None or b is None else f"({a} {op} {b})"
    if isinstance(expr, (tirx.Min, tirx.Max)):
        a, b = _python_of(expr.a, names, tirx), _python_of(expr.b, names, tirx)
        fn = "min" if isinstance(expr, tirx.Min) else "max"
        return None if a is None or b is None else f"{fn}({a}, {b})"
    return None


@dataclass
class IndexRange:
    """A tensor with T.dynamic dims, which the kernel indexes in 32 bits (frontend/indexing.py):
    Python expressions over the call's `args` for the elements it spans and for its shape, checked
    when the call's shapes are new."""

    param: BufferParam
    span: str
    shape: str


def _index_ranges(tensors: list[TensorExpectation], spec: Elaboration) -> list[IndexRange]:
    """The tensor arguments and `T.empty` outputs whose annotation has a T.dynamic dim or stride."""
    from tvm import tirx

    out, sources = [], {}
    for e in tensors:
        for dim, expr in enumerate(e.param.annotation.shape):
            if isinstance(expr, tirx.Var):
                sources.setdefault(expr, f"args[{e.index}].shape[{dim}]")
        if None in e.shape or (e.strides is not None and None in e.strides):
            a = f"args[{e.index}]"
            out.append(IndexRange(e.param, f"{a}.numel()" if e.strides is None else f"tensor_span({a})",
                                  f"tuple({a}.shape)"))
    for name in spec.outputs:
        param = spec.buffers[name]
        if all(static_int(d) is not None for d in param.annotation.shape):
            continue
        dims = [
            str(d) if isinstance(d, int) else _python_of(d, sources, tirx) for d in param.annotation.shape
        ]
        # (an output dim that no tensor gives cannot be allocated: the call fails before)
        if None not in dims:
            out.append(IndexRange(param, " * ".join(dims), "(" + ", ".join(dims) + ",)"))
    return out


class Expectations:
    """Per-specialization expectations of every tensor argument, and the error for a mismatch."""

    def __init__(self, kernel_name: str, spec: Elaboration, template: Elaboration, runtime_names: list[str],
                 const_sources: dict[str, tuple[str, str, int]]):
        self.kernel_name = kernel_name
        self.filename = next(iter(spec.buffers.values())).filename if spec.buffers else None
        self.const_sources = const_sources
        self.tensors: list[TensorExpectation] = []
        for index, name in enumerate(runtime_names):
            param = spec.buffers.get(name)
            if param is None:
                continue
            ann = param.annotation
            shape = tuple(static_int(d) for d in ann.shape)
            strides = None if ann.strides is None else tuple(static_int(s) for s in ann.strides)
            self.tensors.append(TensorExpectation(name, index, torch_dtype(ann.dtype), shape, strides, param,
                                                  template.buffers.get(name)))

        self.scalars: list[ScalarExpectation] = [
            ScalarExpectation(name, index, spec.scalars[name]) for index, name in enumerate(runtime_names)
            if name in spec.scalars]
        self.derived_dims = _derived_dims(self.tensors, spec.dynamic)
        self.index_ranges = _index_ranges(self.tensors, spec)
        self.empty_grid = empty_grid(spec.func, template.func)  # a launch of these shapes has no block to run
        self.dynamic_grid = dynamic_grid(spec.func)  # extents over T.dynamic dims: empty or not, per call
        self.written: frozenset | None = None  # tensor parameters the kernel writes: filled when first needed
        self.check = self._compile_check(shapes=True)
        self.check_layout = self._compile_check(shapes=False)  # for callers that matched the shapes already

    def _compile_check(self, shapes: bool):
        """`check(args) -> bool`, generated as straight-line Python: this runs on every call, where a loop
        over expectations costs several microseconds."""
        terms, env = [], {}
        for k, e in enumerate(self.tensors):
            a = f"args[{e.index}]"
            env[f"D{k}"] = e.dtype
            terms.append(f"{a}.dtype is D{k}")
            if not shapes:
                pass
            elif all(d is not None for d in e.shape):
                env[f"S{k}"] = e.shape
                terms.append(f"{a}.shape == S{k}")
            else:
                terms.append(f"len({a}.shape) == {len(e.shape)}")
                terms += [f"{a}.shape[{i}] == {d}" for i, d in enumerate(e.shape) if d is not None]
            if e.strides is None:
                terms.append(f"{a}.is_contiguous()")
            else:
                terms += [f"{a}.stride({i}) == {s}" for i, s in enumerate(e.strides) if s is not None]
        for k, sc in enumerate(self.scalars):
            env[f"P{k}"] = sc.python_types
            terms.append(f"isinstance(args[{sc.index}], P{k})")
            if sc.kind != "bool":
                terms.append(f"type(args[{sc.index}]) is not bool")
        if shapes:
            terms += [f"({d.given}) == ({d.expected})" for d in self.derived_dims]
            terms += [f"{r.span} < {INDEX_LIMIT}" for r in self.index_ranges]  # dynamic dims: 32-bit indices
            env["tensor_span"] = tensor_span
        if len(self.tensors) > 1:  # one device for all
            first = f"args[{self.tensors[0].index}].device"
            terms.append(f"{first} == " + " == ".join(f"args[{e.index}].device" for e in self.tensors[1:]))
        source = "def check(args):\n    return " + (" and ".join(terms) or "True") + "\n"
        exec(source, env)  # noqa: S102 - generated from our own expectations only
        return env["check"]

    def explain(self, args) -> ArgumentError | None:
        """The first mismatch as an error, in the order a user would fix them: rank, dtype, shape, layout."""
        for sc in self.scalars:
            value = args[sc.index]
            if not isinstance(value, sc.python_types) or (sc.kind != "bool" and isinstance(value, bool)):
                return ArgumentError(
                    f"{self.kernel_name}() argument '{sc.name}' is a runtime scalar of dtype "
                    f"{sc.param.dtype}: it "
                    f"must be {sc.expected}; got {type(value).__name__} {value!r}",
                    filename=self.filename,
                    lineno=sc.param.lineno or None,
                )
        for e in self.tensors:
            t = args[e.index]
            where = self._where(e.param)
            ann = e.template_param.annotation if e.template_param else e.param.annotation
            if len(t.shape) != len(e.shape):
                return RankMismatchError(
                    f"{self.kernel_name}() argument '{e.name}' must be a {len(e.shape)}-d tensor "
                    f"({ann!r}); got a "
                    f"{t.dim()}-d tensor of shape {tuple(t.shape)}",
                    **where,
                )
            if t.dtype is not e.dtype and getattr(e.param, "packed", None) is not None:
                return DtypeMismatchError(
                    f"{self.kernel_name}() argument '{e.name}' is a {e.param.packed.dtype!r} tensor, passed "
                    f"as its bytes (two values each, the low nibble first): it must have dtype "
                    f"{e.param.annotation.dtype}; got {t.dtype}", **where,
                    hint=f"pass the same bytes as {e.name}.view({e.dtype})")
            if t.dtype is not e.dtype:
                return DtypeMismatchError(
                    f"{self.kernel_name}() argument '{e.name}' must have dtype "
                    f"{e.param.annotation.dtype}; got "
                    f"{t.dtype}",
                    **where,
                    hint=f"convert it with {e.name}.to({e.dtype})",
                )
            bad = [
                i for i, (x, g) in enumerate(zip(e.shape, t.shape, strict=True)) if x is not None and x != g
            ]
            if bad:
                return ShapeMismatchError(
                    f"{self.kernel_name}() argument '{e.name}' must have shape "
                    f"{describe_dims(e.template_param, e.shape)}; got {tuple(t.shape)}", **where,
                    hint=self._hint(e, bad[0], args))
            if e.strides is None and not t.is_contiguous():
                return NotContiguousError(
                    f"{self.kernel_name}() argument '{e.name}' must be contiguous (T.Tensor is "
                    "row-major); got "
                    f"strides {tuple(t.stride())} for shape {tuple(t.shape)}",
                    **where,
                    hint=f"pass {e.name}.contiguous(), or annotate it as T.StridedTensor",
                )
            if e.strides is not None:
                bad = [
                    i
                    for i, (x, g) in enumerate(zip(e.strides, t.stride(), strict=True))
                    if x is not None and x != g
                ]
                if bad:
                    return ShapeMismatchError(
                        f"{self.kernel_name}() argument '{e.name}' must have strides {e.strides}; got "
                        f"{tuple(t.stride())}", **where)
        for d in self.derived_dims:
            if not eval(d.given, {"args": args}) == eval(d.expected, {"args": args}):  # noqa: S307 - our own text
                e = d.tensor
                t = args[e.index]
                return ShapeMismatchError(
                    f"{self.kernel_name}() argument '{e.name}' must have {d.text} = "
                    f"{eval(d.expected, {'args': args})} in dim {d.dim}; got shape {tuple(t.shape)}",  # noqa: S307
                    **self._where(e.param), hint=d.hint)
        return self._explain_index_range(args)

    def _explain_index_range(self, args) -> ArgumentError | None:
        """A tensor with T.dynamic dims that spans 2^31 elements or more: its
        32-bit indices would wrap around."""
        for r in self.index_ranges:
            env = {"args": args, "tensor_span": tensor_span}
            count = eval(r.span, env)  # noqa: S307 - our own text
            if count < INDEX_LIMIT:
                continue
            p = r.param
            what = "output" if p.kind == "output" else "argument"
            spans = "elements" if p.annotation.strides is None else "elements of memory (from its strides)"
            dynamic = ", ".join(str(d) for d in p.annotation.shape if static_int(d) is None)
            return ArgumentError(
                f"{self.kernel_name}() {what} '{p.name}' has shape {eval(r.shape, env)} ({count} {spans}); a "  # noqa: S307
                f"tensor with T.dynamic dims ({dynamic}) is indexed with 32-bit integers, so it may "
                "span at most "
                f"{INDEX_LIMIT - 1} elements",
                **self._where(p),
                hint="declare those dims with T.const: a kernel specialized to the sizes indexes "
                     "such tensors in "
                "64 bits; or split the call into parts below 2^31 elements",
            )
        return None

    def _hint(self, e: TensorExpectation, dim: int, args) -> str | None:
        if e.template_param is None:
            return None
        name = str(e.template_param.annotation.shape[dim])
        source = self.const_sources.get(name)
        if source is None:
            return None
        param, kind, index = source
        if param == e.name:
            return None
        accessor = "shape" if kind == "shape" else "stride()"
        return f"{name} is taken from {param}.{accessor}[{index}] = {e.shape[dim]}"

    @staticmethod
    def _where(param: BufferParam) -> dict:
        return dict(
            filename=param.filename, lineno=param.lineno or None, col=param.col, end_col=param.end_col
        )


def check_tensor_kind(kernel_name: str, name: str, value, rank: int | None, where: dict):
    """Before reading consts from an argument: it must be a tensor of the annotated rank (when known)."""
    import torch

    if not isinstance(value, torch.Tensor):
        raise ArgumentError(f"{kernel_name}() argument '{name}' must be a torch.Tensor; got "
                            f"{type(value).__name__}", **where)
    if rank is not None and value.dim() != rank:
        raise RankMismatchError(f"{kernel_name}() argument '{name}' must be a {rank}-d tensor; got a "
                                f"{value.dim()}-d tensor of shape {tuple(value.shape)}", **where)


def check_devices(kernel_name: str, tensors: dict[str, Any]):
    devices = {}
    for name, t in tensors.items():
        devices.setdefault(t.device, name)
    if len(devices) > 1:
        listing = ", ".join(f"'{n}' is on {d}" for d, n in devices.items())
        raise DeviceMismatchError(f"{kernel_name}() arguments must all be on one device; {listing}",
                                  hint="move them with .to(device) before the call")


# ---- what the shape and dtype checks take for granted ------------------------------------------------------

def check_tensor_storage(kernel_name: str, name: str, value, where: dict, device: bool = True):
    """A tensor whose elements a kernel can address: strided (dense) memory, on the CPU or a CUDA device
    (unless `device=False`), not quantized. Checked where a call's tensors are first seen, before anything
    reads their layout."""
    import torch

    if device:
        check_device_type(kernel_name, name, value.device, where)
    if value.layout is not torch.strided:
        raise UnsupportedTensorError(
            f"{kernel_name}() argument '{name}' has layout {value.layout}; tile_nb kernels take "
            "dense tensors "
            "(layout torch.strided)",
            **where,
            hint=f"pass {name}.to_dense()",
        )
    if value.is_quantized:
        raise UnsupportedTensorError(
            f"{kernel_name}() argument '{name}' is a quantized tensor ({value.dtype}); tile_nb "
            "kernels take plain "
            "dtypes",
            **where,
            hint=f"pass {name}.int_repr() and its scale and zero point as separate arguments",
        )


def check_device_type(kernel_name: str, name: str, device, where: dict):
    """Tensors with data on the CPU (the interpreter) or a CUDA device (the compiled kernel)."""
    if device.type == "meta":
        raise UnsupportedTensorError(
            f"{kernel_name}() argument '{name}' is on the meta device: tensors on the meta device "
            "have no data; "
            "tile_nb runs on cpu or cuda tensors",
            **where,
            hint=f"create '{name}' on 'cpu' or 'cuda'",
        )
    if device.type not in ("cpu", "cuda"):
        raise UnsupportedTensorError(
            f"{kernel_name}() argument '{name}' is on {device}; tile_nb runs on cpu or cuda tensors", **where,
            hint=f"move it with {name}.cpu() or {name}.cuda()")


def check_not_autograd(kernel_name: str, name: str, value, where: dict):
    """A tensor the kernel writes must not be tracked by autograd: the write would bypass it."""
    import torch

    if value.requires_grad and torch.is_grad_enabled():
        raise RequiresGradError(
            f"{kernel_name}() writes argument '{name}', which requires grad: autograd is not supported "
            "for tile_nb "
            "kernels yet, and the kernel's write would bypass it",
            **where,
            hint=f"pass {name}.detach() (same memory, so the result still lands in '{name}'), or "
                 "call the kernel "
            "under torch.no_grad()",
        )


def check_const_value(kernel_name: str, const: str, value, where: dict) -> int:
    """A const given as a keyword (`M=1024`) stands for a tensor dim: an int >= 0."""
    import operator

    try:
        number = operator.index(value) if not isinstance(value, bool) else None
    except TypeError:
        number = None
    if number is None:
        raise ConstValueError(f"{kernel_name}() const '{const}' must be an int; got {type(value).__name__} "
                              f"{value!r}", **where)
    if number < 0:
        raise ConstValueError(
            f"{kernel_name}() const '{const}' must be >= 0 (it stands for a tensor dim); got "
            f"{const}={number}",
            **where,
        )
    return int(number)


def launch_grid(func) -> dict:
    """blockIdx tag -> extent (a PrimExpr) of a kernel's T.Kernel launch."""
    from tvm import tirx

    grid, todo = {}, [func.body] if func is not None else []
    while todo:
        stmt = todo.pop()
        if isinstance(stmt, tirx.AttrStmt) and stmt.attr_key == "thread_extent":
            tag = str(stmt.node.thread_tag)
            if not tag.startswith("blockIdx."):
                continue  # the grid's launches come first: nothing below threadIdx is part of it
            grid[tag] = stmt.value
        if isinstance(stmt, tirx.SeqStmt):
            todo.extend(reversed(list(stmt.seq)))
        elif isinstance(getattr(stmt, "body", None), tirx.Stmt):
            todo.append(stmt.body)
    return grid


def empty_grid(func, template_func=None) -> tuple[str, ...]:
    """`blockIdx.x = (M + 127) // 128 = 0` for each grid extent of a specialized kernel that is the constant 0
    (no block runs), with the template's expression for it when there is one."""
    from tvm import tirx

    symbolic = launch_grid(template_func) if template_func is not None else {}
    out = []
    for tag, extent in launch_grid(func).items():
        if isinstance(extent, tirx.IntImm) and int(extent) == 0:
            formula = symbolic.get(tag)
            shown = f" = {formula}" if formula is not None and not isinstance(formula, tirx.IntImm) else ""
            out.append(f"{tag}{shown} = 0")
    return tuple(out)


def dynamic_grid(func) -> tuple:
    """(tag, extent) of each grid extent of a specialized kernel that depends on T.dynamic dims."""
    from tvm import tirx

    return tuple(
        (tag, extent) for tag, extent in launch_grid(func).items() if not isinstance(extent, tirx.IntImm)
    )


def empty_at_call(expectations: Expectations, dynamic_values: dict) -> tuple[str, ...]:
    """`blockIdx.x = (N + 127) // 128 = 0` for each grid extent over T.dynamic
    dims that these values make 0."""
    from .shapes import evaluate

    return tuple(f"{tag} = {extent} = 0" for tag, extent in expectations.dynamic_grid
                 if evaluate(extent, dynamic_values) == 0)


def empty_grid_error(kernel_name: str, grid: tuple, what: str, where: dict, hint: str | None = None):
    """`what` cannot be done for a specialization whose grid is empty."""
    return EmptyGridError(f"{kernel_name}() launches no block with these arguments (T.Kernel's grid: "
                          f"{', '.join(grid)}), so {what}", **where, hint=hint)


def _const_names(node) -> list[str]:
    import ast

    if isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) == "const" \
            and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
        return node.args[0].value.replace(",", " ").split()
    return []


def _node_where(source, node) -> dict:
    end = node.end_col_offset + source.indent if node.end_lineno == node.lineno else None
    return dict(filename=source.filename, lineno=source.first_line + node.lineno - 1,
                col=node.col_offset + source.indent, end_col=end)


def const_where(source, const: str) -> dict:
    """Where `const` is declared (`M, N = T.const('M, N')`) in the kernel's
    source; the `def` line if nowhere."""
    import ast

    node = next((n for n in ast.walk(source.tree) if const in _const_names(n)), None)
    return _node_where(source, node) if node is not None else _def_where(source)


def kernel_where(source) -> dict:
    """Where the kernel's `T.Kernel(...)` is called; the `def` line if nowhere."""
    import ast

    node = next((n for n in ast.walk(source.tree) if isinstance(n, ast.Call)
                 and getattr(n.func, "attr", getattr(n.func, "id", None)) == "Kernel"), None)
    return _node_where(source, node) if node is not None else _def_where(source)


def _def_where(source) -> dict:
    return dict(filename=source.filename, lineno=source.first_line + source.tree.lineno - 1)
