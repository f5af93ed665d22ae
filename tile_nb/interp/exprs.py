"""Expression rules: each TIR expression node becomes a closure `fn(frame) -> value`.

Values are Python numbers, 0-d tensors, or tensors broadcast over the enclosing `T.parallel` loops
(see `values.py`); the same closure serves block-level and vectorized code.
"""
from __future__ import annotations

import math
import operator

import torch
from tvm import ir, tirx

from ..language.irutil import is_handle
from . import values as V
from .compiler import CALL_RULES, Compiler, call_rule, expr_rule, op_short_name

__all__: list[str] = []


# ---- leaves ------------------------------------------------------------------------------------------------

@expr_rule(tirx.IntImm)
def _int_imm(comp: Compiler, node):
    value = bool(node.value) if str(node.ty.dtype) == "bool" else int(node.value)
    return lambda f: value


@expr_rule(tirx.FloatImm)
def _float_imm(comp: Compiler, node):
    value = float(node.value)
    return lambda f: value


@expr_rule(ir.Var)
def _var(comp: Compiler, node):
    slot = comp.slot(node)
    name = node.name

    def var(f):
        value = f.vals[slot]
        if value is None:
            raise NameError(f"variable '{name}' is used before it has a value")
        return value
    return var


@expr_rule(tirx.Let)
def _let(comp: Compiler, node):
    slot, value, body = comp.slot(node.var), comp.expr(node.value), comp.expr(node.body)

    def let(f):
        v = value(f)
        f.vals[slot] = v.clone() if V.is_tensor(v) and v._base is not None else v
        return body(f)
    return let


@expr_rule(tirx.Cast)
def _cast(comp: Compiler, node):
    value, dtype = comp.expr(node.value), str(node.ty.dtype)
    return lambda f: V.cast(value(f), dtype)


# ---- arithmetic and logic ----------------------------------------------------------------------------------

# torch's CPU kernels lack most arithmetic, comparisons and shifts for these:
# their values are computed in int64.
_WIDENED = {"uint16", "uint32", "uint64"}
# Index arithmetic stays unwrapped (as before): only these integer results of + -
# * are not wrapped to their width.
_INDEX_DTYPES = {"int32", "int64"}


def _binary(fn, bitwise: bool = False):
    """A binary rule. Integer results wrap around to the node's dtype as on the GPU: always for
    shifts and bitwise ops (bit manipulation: `(x << 28) >> 28` in int32 sign-extends), and for + -
    * of dtypes other than the index dtypes int32 / int64 (a Python int does not wrap by itself;
    uint16 `(s << 5 | e) << 10` must)."""
    def rule(comp: Compiler, node):
        a, b = comp.expr(node.a), comp.expr(node.b)
        widen = str(node.a.ty.dtype) in _WIDENED or str(node.b.ty.dtype) in _WIDENED
        result = str(node.ty.dtype)
        wrap = _is_int(result) and (bitwise or result not in _INDEX_DTYPES)
        if not widen and not wrap:
            return lambda f: fn(a(f), b(f))
        tdtype = V.torch_dtype(result) if wrap else None

        def binary(f):
            x, y = a(f), b(f)
            if widen:
                x, y = _int64(x), _int64(y)
            r = fn(x, y)
            return _wrap(r, tdtype) if wrap else r
        return binary
    return rule


def _is_int(dtype: str) -> bool:
    return dtype.startswith(("int", "uint"))


def _int64(x):
    return x.to(torch.int64) if V.is_tensor(x) and not x.dtype.is_floating_point else x


def _wrap(x, tdtype):
    """An integer value wrapped to `tdtype`: a tensor of that dtype (uint16/32/64 ones stay int64: see
    _WIDENED), or a Python int in its range."""
    if V.is_tensor(x):
        wrapped = V.wrap_int(x.to(torch.int64), tdtype)
        return wrapped.to(torch.int64) if tdtype in _WIDENED_TORCH else wrapped
    return V.wrap_scalar(int(x), tdtype)


_WIDENED_TORCH = {V.torch_dtype(name) for name in _WIDENED}


def _div(a, b):
    return V.truncdiv(a, b)


def _and(a, b):
    if V.is_tensor(a) or V.is_tensor(b):
        return _as_bool(a) & _as_bool(b)
    return a and b


def _or(a, b):
    if V.is_tensor(a) or V.is_tensor(b):
        return _as_bool(a) | _as_bool(b)
    return a or b


def _as_bool(x):
    return x.to(torch.bool) if V.is_tensor(x) else bool(x)


for _node_type, _fn in [
    (tirx.Add, operator.add), (tirx.Sub, operator.sub), (tirx.Mul, operator.mul), (tirx.Div, _div),
    (tirx.Mod, V.truncmod), (tirx.FloorDiv, V.floordiv), (tirx.FloorMod, V.floormod),
    (tirx.Min, V.vmin), (tirx.Max, V.vmax),
    (tirx.EQ, operator.eq), (tirx.NE, operator.ne), (tirx.LT, operator.lt), (tirx.LE, operator.le),
    (tirx.GT, operator.gt), (tirx.GE, operator.ge), (tirx.And, _and), (tirx.Or, _or),
]:
    expr_rule(_node_type)(_binary(_fn))
for _node_type, _fn in [
    (tirx.BitwiseAnd, operator.and_), (tirx.BitwiseOr, operator.or_), (tirx.BitwiseXor, operator.xor),
    (tirx.LShift, operator.lshift), (tirx.RShift, operator.rshift),
]:
    expr_rule(_node_type)(_binary(_fn, bitwise=True))


@expr_rule(tirx.Not)
def _not(comp: Compiler, node):
    a = comp.expr(node.a)
    return lambda f: V.logical_not(a(f))


@expr_rule(tirx.BitwiseNot)
def _bitwise_not(comp: Compiler, node):
    a = comp.expr(node.a)
    dtype = str(node.ty.dtype)
    # in int64 and wrapped, like the other bitwise ops (torch's CPU kernels lack `~` of uint16 / uint32,
    # and `~` of their values carried in int64, or of a Python int, is negative where the dtype's is
    # 2^bits - 1 - x)
    tdtype = V.torch_dtype(dtype) if _is_int(dtype) else None

    def bitwise_not(f):
        x = a(f)
        if dtype == "bool":
            return V.logical_not(x)
        return ~x if tdtype is None else _wrap(~_int64(x), tdtype)
    return bitwise_not


@expr_rule(tirx.Select)
def _select(comp: Compiler, node):
    return _guarded_select(comp, node.condition, node.true_value, node.false_value)


def _guarded_select(comp: Compiler, cond_node, true_node, false_node):
    """`if_then_else`: only the taken side is evaluated (it guards loads), so under parallel loops each side
    runs with the iterations that take it as the active mask; bounds errors are checked on those only."""
    cond, on_true, on_false = comp.expr(cond_node), comp.expr(true_node), comp.expr(false_node)

    def select(f):
        c = cond(f)
        if not V.is_tensor(c) or c.dim() == 0:
            return on_true(f) if bool(c) else on_false(f)
        saved = f.mask
        c = c.to(torch.bool)
        try:
            f.mask = c if saved is None else saved & c
            a = on_true(f)
            f.mask = ~c if saved is None else saved & ~c
            b = on_false(f)
        finally:
            f.mask = saved
        return V.where(c, a, b)
    return select


# ---- calls -------------------------------------------------------------------------------------------------

@expr_rule(ir.Call)
def _call(comp: Compiler, node):
    name = op_short_name(node.op)
    rule = CALL_RULES.get(name)
    if rule is None:
        raise NotImplementedError(f"the CPU interpreter has no rule for the call '{node.op.name}': {node}")
    return rule(comp, node)


def _unary_math(torch_fn, math_fn=None):
    def rule(comp: Compiler, node):
        (arg,) = comp.exprs(node.args)
        dtype = str(node.ty.dtype)

        def unary(f):
            x = arg(f)
            if V.is_tensor(x):
                if not x.dtype.is_floating_point:
                    x = x.to(V.torch_dtype(dtype))
                return torch_fn(x)
            if math_fn is not None:
                try:
                    return math_fn(float(x))
                except (OverflowError, ValueError):
                    pass  # inf / nan: let torch produce the IEEE result
            return torch_fn(torch.tensor(float(x), dtype=torch.float64)).item()
        return unary
    return rule


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


for _names, _torch_fn, _math_fn in [
    (("exp",), torch.exp, math.exp),
    (("exp2",), torch.exp2, lambda x: 2.0**x),
    (("log",), torch.log, math.log),
    (("log2",), torch.log2, math.log2),
    (("log10",), torch.log10, math.log10),
    (("sqrt",), torch.sqrt, math.sqrt),
    (("rsqrt",), torch.rsqrt, lambda x: 1.0 / math.sqrt(x)),
    (("sigmoid",), torch.sigmoid, _sigmoid),
    (("tanh",), torch.tanh, math.tanh),
    (("fabs", "abs"), torch.abs, abs),
    (("floor",), torch.floor, math.floor),
    (("ceil",), torch.ceil, math.ceil),
    (("round", "nearbyint"), torch.round, round),
    (("trunc",), torch.trunc, math.trunc),
    (("erf",), torch.erf, math.erf),
    (("sin",), torch.sin, math.sin),
    (("cos",), torch.cos, math.cos),
]:
    call_rule(*_names)(_unary_math(_torch_fn, _math_fn))


@call_rule("pow")
def _pow(comp: Compiler, node):
    a, b = comp.exprs(node.args)
    return lambda f: a(f) ** b(f)


@call_rule("if_then_else")
def _if_then_else(comp: Compiler, node):
    return _guarded_select(comp, *node.args)


@call_rule("reinterpret")
def _reinterpret(comp: Compiler, node):
    """`T.reinterpret(dtype, x)`: x's bits read as `dtype` (same width; TVM
    checks it when building the call)."""
    (arg,) = comp.exprs(node.args)
    if is_handle(node):  # an address loaded from a pointer table (language/pointers.py)
        return lambda f: int(arg(f))
    source, target = V.torch_dtype(str(node.args[0].ty.dtype)), V.torch_dtype(str(node.ty.dtype))
    if source.itemsize != target.itemsize:
        raise NotImplementedError(f"T.reinterpret from {source} to {target}: the widths differ")
    source_is_int = not source.is_floating_point and source != torch.bool

    def reinterpret(f):
        x = arg(f)
        scalar = not V.is_tensor(x)
        if scalar:
            x = torch.tensor(V.wrap_scalar(int(x), source) if source_is_int else x, dtype=source)
        elif source_is_int:
            x = V.wrap_int(x.to(torch.int64), source)  # int64 carrying uint16/32/64 values, or an int8 tensor
        else:
            x = x.to(source)
        r = x.view(target)
        if target in _WIDENED_TORCH:
            r = r.to(torch.int64)
        if scalar and not target.is_floating_point:
            return int(r)
        return r
    return reinterpret


@call_rule("likely")
def _likely(comp: Compiler, node):
    return comp.expr(node.args[0])


@call_rule("isnan", "isinf", "isfinite")
def _float_class(comp: Compiler, node):
    (arg,) = comp.exprs(node.args)
    name = op_short_name(node.op)
    torch_fn = getattr(torch, name)

    def classify(f):
        x = arg(f)
        if V.is_tensor(x):
            return torch_fn(x)
        return bool(torch_fn(torch.tensor(float(x))))
    return classify


@call_rule("call_extern", "call_pure_extern")
def _call_extern(comp: Compiler, node):
    # Imported here: memory.py registers the atomic rule and imports this module's helpers.
    from .memory import compile_extern
    return compile_extern(comp, node)
