"""Typed scalar expressions for `T.Parallel` bodies, rendered twice: as tile-language source and as torch.

Every node has one dtype; operands of a binary op always share it (casts are explicit, so the model never
depends on TVM's implicit promotion: a Python float literal is float32 and would widen a float16 operand).
Constants are written typed (`T.float16(1.5)`) outside float32/int32, and are exactly representable in every
float dtype. Each node carries a bound on |value| so generated expressions stay finite: exp/exp2 only take
arguments bounded by 8, division and log/rsqrt use guarded forms (`b / (|c| + 0.5)`, `log(|c| + 0.5)`), and an
expression that could grow past its dtype's range is clamped with T.max/T.min.

`exact` marks expressions whose value every IEEE implementation computes bit for bit (integer ops, max, min,
abs, negation, selection, exact casts); float +, -, * are not (nvcc contracts a * b + c into an fma), nor are
division and the transcendental functions (fast-math approximations on the GPU).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..choose import Chooser

__all__ = ["Expr", "Leaf", "gen_expr", "cast_to", "EPS", "LIMIT"]

EPS = {"float32": 2.0 ** -23, "float16": 2.0 ** -10, "bfloat16": 2.0 ** -7, "int32": 0.0}
LIMIT = {"float32": 1e4, "float16": 2e3, "bfloat16": 2e3, "int32": 2 ** 20}
FLOAT_CONSTS = (0.5, 1.5, -2.0, 3.0, 0.25, -0.75, 1.0)
INT_CONSTS = (3, -5, 7, 16, 1, -1)
INT_EXACT_IN = {"float32": 2 ** 24, "float16": 2048, "bfloat16": 256}


@dataclass(frozen=True)
class Expr:
    tile: str          # tile-language source
    torch: str         # torch source over whole tensors
    dtype: str
    bound: float       # |value| <= bound for every element
    exact: bool
    peak: float        # the largest bound of any subexpression (how large cancelled terms can be)
    ops: int = 0

    @property
    def is_float(self) -> bool:
        return self.dtype != "int32"


@dataclass(frozen=True)
class Leaf:
    """A value the expression may read: tile text, torch text, dtype, bound."""

    tile: str
    torch: str
    dtype: str
    bound: float


def _const(c: Chooser, dtype: str) -> Expr:
    if dtype == "int32":
        v = c.choice(INT_CONSTS)
        return Expr(str(v), f"torch.tensor({v}, dtype=torch.int32)", dtype, abs(v), True, abs(v))
    v = c.choice(FLOAT_CONSTS)
    tile = repr(v) if dtype == "float32" else f"T.{dtype}({v!r})"
    return Expr(tile, f"torch.tensor({v!r}, dtype=torch.{dtype})", dtype, abs(v), True, abs(v))


def cast_to(e: Expr, dtype: str) -> Expr:
    """`T.cast(e, dtype)`; exact when no value can be rounded or truncated."""
    if e.dtype == dtype:
        return e
    if dtype.startswith("int"):
        exact = e.exact  # truncation of a bit-exact float is bit-exact (values are kept in range)
        bound = math.floor(e.bound)
    elif e.dtype == "int32":
        exact = e.exact and e.bound < INT_EXACT_IN[dtype]
        bound = e.bound
    else:
        exact = e.exact  # float -> float casts round to nearest even everywhere: deterministic
        bound = e.bound
    return Expr(f"T.cast({e.tile}, T.{dtype})", f"({e.torch}).to(torch.{dtype})", dtype, bound, exact,
                max(e.peak, bound), e.ops)


def _leaf(c: Chooser, dtype: str, leaves) -> Expr:
    leaf = c.choice(leaves[:c.choice((2, len(leaves)))])
    e = Expr(leaf.tile, leaf.torch, leaf.dtype, leaf.bound, True, leaf.bound)
    if leaf.dtype != dtype and leaf.dtype not in ("float32", "float16", "bfloat16", "int32"):
        e = cast_to(e, "int32" if dtype == "int32" or leaf.dtype.startswith(("int", "uint")) else "float32")
    if e.dtype == "int32" and dtype != "int32" and e.bound >= INT_EXACT_IN[dtype]:
        e = _clamp(e, INT_EXACT_IN[dtype] // 2)
    return cast_to(e, dtype)


def _clamp(e: Expr, limit: float) -> Expr:
    lim = int(limit) if e.dtype == "int32" else float(limit)
    hi = str(lim) if e.dtype in ("float32", "int32") else f"T.{e.dtype}({lim!r})"
    lo = str(-lim) if e.dtype in ("float32", "int32") else f"T.{e.dtype}({-lim!r})"
    t_hi, t_lo = (
        f"torch.tensor({lim!r}, dtype=torch.{e.dtype})",
        f"torch.tensor({-lim!r}, dtype=torch.{e.dtype})",
    )
    return Expr(
        f"T.max(T.min({e.tile}, {hi}), {lo})",
        f"torch.maximum(torch.minimum({e.torch}, {t_hi}), {t_lo})",
        e.dtype,
        min(e.bound, lim),
        e.exact,
        e.peak,
        e.ops + 2,
    )


def _binary(c: Chooser, op: str, a: Expr, b: Expr) -> Expr:
    dt = a.dtype
    peak = max(a.peak, b.peak)
    ops = a.ops + b.ops + 1
    if op in ("+", "-"):
        bound = a.bound + b.bound
        e = Expr(f"({a.tile} {op} {b.tile})", f"({a.torch} {op} {b.torch})", dt, bound, a.exact and b.exact
                 and dt == "int32", max(peak, bound), ops)
    elif op == "*":
        bound = a.bound * b.bound
        e = Expr(
            f"({a.tile} * {b.tile})",
            f"({a.torch} * {b.torch})",
            dt,
            bound,
            a.exact and b.exact and dt == "int32",
            max(peak, bound),
            ops,
        )
    elif op == "/":   # guarded denominator: |b| + 0.5 >= 0.5
        half = "0.5" if dt == "float32" else f"T.{dt}(0.5)"
        bound = a.bound * 2
        e = Expr(
            f"({a.tile} / (T.abs({b.tile}) + {half}))",
            f"({a.torch} / (torch.abs({b.torch}) + torch.tensor(0.5, dtype=torch.{dt})))",
            dt,
            bound,
            False,
            max(peak, bound, b.bound + 0.5),
            ops + 2,
        )
    elif op in ("max", "min"):
        fn = "maximum" if op == "max" else "minimum"
        e = Expr(
            f"T.{op}({a.tile}, {b.tile})",
            f"torch.{fn}({a.torch}, {b.torch})",
            dt,
            max(a.bound, b.bound),
            a.exact and b.exact,
            peak,
            ops,
        )
    elif op in ("//", "%"):   # by a positive constant: floor division / floor modulo
        k = c.choice((3, 7, 16))
        if op == "//":
            e = Expr(f"({a.tile} // {k})", f"torch.div({a.torch}, {k}, rounding_mode='floor')", dt,
                     a.bound // k + 1, a.exact, peak, ops)
        else:
            e = Expr(f"({a.tile} % {k})", f"torch.remainder({a.torch}, {k})", dt, k - 1, a.exact, peak, ops)
    elif op in ("&", "|", "^"):
        k = c.choice((5, 12, 255))
        bound = max(a.bound, k) * 2 if op != "&" else max(a.bound, k)
        e = Expr(f"({a.tile} {op} {k})", f"({a.torch} {op} {k})", dt, bound, a.exact, peak, ops)
    elif op == ">>":
        k = c.choice((1, 2, 3))
        e = Expr(f"({a.tile} >> {k})", f"({a.torch} >> {k})", dt, a.bound / 2 ** k + 1, a.exact, peak, ops)
    elif op == "select":
        lt = "<" if c.boolean() else ">="
        e = Expr(f"T.if_then_else({a.tile} {lt} {b.tile}, {a.tile}, {b.tile})",
                 f"torch.where({a.torch} {lt} {b.torch}, {a.torch}, {b.torch})", dt, max(a.bound, b.bound),
                 a.exact and b.exact, peak, ops)
    else:
        raise ValueError(op)
    return e


def _unary(op: str, a: Expr) -> Expr:
    dt = a.dtype
    half = "0.5" if dt == "float32" else f"T.{dt}(0.5)"
    t_half = f"torch.tensor(0.5, dtype=torch.{dt})"
    forms = {
        "exp": (f"T.exp({a.tile})", f"torch.exp({a.torch})", math.exp(min(a.bound, 80))),
        "exp2": (f"T.exp2({a.tile})", f"torch.exp2({a.torch})", 2.0 ** min(a.bound, 80)),
        "log": (f"T.log(T.abs({a.tile}) + {half})", f"torch.log(torch.abs({a.torch}) + {t_half})",
                max(0.7, math.log(a.bound + 0.5))),
        "log2": (f"T.log2(T.abs({a.tile}) + {half})", f"torch.log2(torch.abs({a.torch}) + {t_half})",
                 max(1.0, math.log2(a.bound + 0.5))),
        "sqrt": (f"T.sqrt(T.abs({a.tile}))", f"torch.sqrt(torch.abs({a.torch}))", math.sqrt(a.bound)),
        "rsqrt": (f"T.rsqrt(T.abs({a.tile}) + {half})", f"torch.rsqrt(torch.abs({a.torch}) + {t_half})", 1.5),
        "sigmoid": (f"T.sigmoid({a.tile})", f"torch.sigmoid({a.torch})", 1.0),
        "tanh": (f"T.tanh({a.tile})", f"torch.tanh({a.torch})", 1.0),
        "abs": (f"T.abs({a.tile})", f"torch.abs({a.torch})", a.bound),
        "neg": (f"(-{a.tile})", f"(-{a.torch})", a.bound),
    }
    tile, torch_text, bound = forms[op]
    exact = a.exact and op in ("abs", "neg")
    return Expr(tile, torch_text, dt, bound, exact, max(a.peak, bound), a.ops + 1)


FLOAT_BINARY = ("+", "-", "*", "/", "max", "min", "select")
INT_BINARY = ("+", "-", "*", "max", "min", "//", "%", "&", "|", "^", ">>", "select")
UNARY = ("exp", "exp2", "log", "log2", "sqrt", "rsqrt", "sigmoid", "tanh", "abs", "neg")


def gen_expr(c: Chooser, dtype: str, depth: int, leaves, allow_const: bool = True, top: bool = False) -> Expr:
    """An expression of `dtype` over `leaves` (earlier leaves are likelier), at most `depth` operators deep;
    `top`: not a bare leaf."""
    kinds = ["leaf"] if depth == 0 else ["binary", "binary", "unary", "cast"] + ([] if top else ["leaf"])
    if dtype == "int32":
        kinds = [k for k in kinds if k != "unary"]
    kind = c.choice(kinds)
    if kind == "leaf":
        return _leaf(c, dtype, leaves)
    if kind == "cast":
        other = c.choice([d for d in ("float32", "float16", "bfloat16", "int32") if d != dtype])
        inner = gen_expr(c, other, depth - 1, leaves)
        if other != "int32" and dtype == "int32":
            if not inner.exact:  # truncating an inexact float could flip at an integer boundary
                return _leaf(c, dtype, leaves)
            inner = _clamp(inner, 1000)
        if other == "int32" and dtype != "int32" and inner.bound >= INT_EXACT_IN[dtype]:
            inner = _clamp(inner, INT_EXACT_IN[dtype] // 2)
        if other == "float32" and dtype != "float32" and inner.bound > LIMIT[dtype]:
            inner = _clamp(inner, LIMIT[dtype])
        return _fit(cast_to(inner, dtype))
    if kind == "unary":
        op = c.choice(UNARY)
        a = gen_expr(c, dtype, depth - 1, leaves)
        if op in ("exp", "exp2") and a.bound > 8:
            a = _clamp(a, 8)
        return _fit(_unary(op, a))
    op = c.choice(INT_BINARY if dtype == "int32" else FLOAT_BINARY)
    a = gen_expr(c, dtype, depth - 1, leaves)
    if op in ("//", "%", "&", "|", "^", ">>"):
        return _fit(_binary(c, op, a, a))
    b = _const(c, dtype) if allow_const and c.integer(0, 3) == 0 else gen_expr(c, dtype, depth - 1, leaves)
    if c.boolean() and op not in ("/",):
        a, b = b, a
    if a.tile == b.tile and op in ("-",):
        b = _const(c, dtype)
    return _fit(_binary(c, op, a, b))


def _fit(e: Expr) -> Expr:
    return _clamp(e, LIMIT[e.dtype] / 4) if e.bound > LIMIT[e.dtype] else e
