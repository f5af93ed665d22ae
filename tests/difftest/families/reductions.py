"""Reductions: T.reduce_sum / max / min over either dim of a tile, accumulated over a serial or pipelined loop
of tiles (with clear=False, or into a partial combined in T.Parallel), edges read as 0 or masked to the
identity, fragment or shared sources, float or integer inputs, accumulators of the input's or a wider dtype.

Integer-valued inputs make every partial sum exact, so sums are compared bitwise whatever the order; sums of
random floats within a tolerance that grows with the number of terms (README.md)."""
from __future__ import annotations

from dataclasses import dataclass

from ..case import Case, Source, TensorArg, close, exact
from ..choose import Chooser
from .common import SIZES, declare_dims, kernel_name, times
from .exprs import EPS

__all__ = ["ReduceSpec", "draw", "render"]

_IDENTITY = {"sum": 0, "max": -1000, "min": 1000}   # integers: inputs stay within +-100


@dataclass(frozen=True)
class ReduceSpec:
    shape: tuple            # (M, N)
    tile: tuple             # (bm, bn)
    op: str                 # "sum", "max", "min"
    dim: int                # the reduced dim
    in_dtype: str
    acc_dtype: str
    out_dtype: str
    # "int": integer-valued inputs (exact sums), "normal": randn * 3, and (known.py only)
    values: str = "int"
    #                         "wrap": int32 up to 2^30 (sums wrap around), "nan": randn * 3 with NaNs
    buffer: str = "shared"  # scope of the tile the reduction reads
    masked: bool = False    # edges set to the identity (else they are read as 0 and take part)
    combine: str = "accum"  # "accum": reduce with clear=False; "partial": reduce into a partial, then combine
    loop: str = "serial"    # "serial", "pipelined" (T.Pipelined(num_stages=2)) or "range"
    threads: int = 128
    dynamic: tuple = ()     # dim names declared with T.dynamic


def draw(c: Chooser) -> ReduceSpec:
    shape = (c.choice(SIZES), c.choice(SIZES))
    tile = (c.choice((1, 2, 4, 8, 16, 32, 64)), c.choice((1, 2, 4, 8, 16, 32, 64, 128)))
    op = c.choice(("sum", "max", "min"))
    in_dtype = c.choice(("float32", "float16", "bfloat16", "int32"))
    if in_dtype == "int32":
        acc = "int32"
    else:
        acc = c.choice(("float32", in_dtype))
    values = "int" if in_dtype == "int32" else c.choice(("int", "normal"))
    if values == "normal" and acc != "float32" and op == "sum":
        acc = "float32"
    out = acc if acc != "float32" else c.choice(("float32", "float32", "float16"))
    if out == "float16" and values == "normal" and op == "sum":
        out = "float32"
    return ReduceSpec(shape, tile, op, c.choice((0, 1)), in_dtype, acc, out, values,
                      c.choice(("shared", "fragment")), c.boolean(), c.choice(("accum", "partial")),
                      c.choice(("serial", "pipelined", "range")), c.choice((128, 128, 64, 256)),
                      tuple(n for n in "MN" if c.choice((False, False, False, True))))


def _identity(op: str, dtype: str) -> str:
    # bfloat16: a finite identity, because T.infinity(T.bfloat16) fails in TVM (FINDINGS.md); inputs stay
    # far inside +-1000 (integers within 100, randn * 3)
    if dtype in ("int32", "bfloat16") or op == "sum":
        return str(_IDENTITY[op])
    sign = "-" if op == "max" else ""
    return f"{sign}T.infinity(T.{dtype})"


def _torch_identity(op: str, dtype: str) -> str:
    if dtype in ("int32", "bfloat16") or op == "sum":
        return str(_IDENTITY[op])
    return "float('-inf')" if op == "max" else "float('inf')"


def render(spec: ReduceSpec) -> Case:
    bm, bn = spec.tile
    keep = 1 - spec.dim                 # the dim that stays
    name = kernel_name("reduce", spec)
    # integer sums stay exact: |sum| <= 130 * hi must be below 2048 (float16) or 256 (bfloat16)
    hi = {"float16": 4, "bfloat16": 1}.get(spec.acc_dtype, 100)
    values = {"int": {"values": "int", "hi": hi}, "wrap": {"values": "int", "hi": 2 ** 30},
              "nan": {"values": "nan", "scale": 3.0}}.get(spec.values, {"values": "normal", "scale": 3.0})
    X = TensorArg("X", spec.shape, spec.in_dtype, **values)
    out_len = spec.shape[keep]
    Y = TensorArg("Y", (out_len,), spec.out_dtype, values="poison", view="guarded")
    n_tiles_expr = f"T.ceildiv({'MN'[spec.dim]}, {spec.tile[spec.dim]})"
    src = Source()
    src("@tile_nb.jit")
    with src.block(f"def {name}(X, Y):"):
        declare_dims(src, ["M", "N"], spec.dynamic)
        src(f"X: T.Tensor[[M, N], T.{spec.in_dtype}]")
        src(f"Y: T.Tensor[[{'MN'[keep]}], T.{spec.out_dtype}]")
        with src.block(
            f"with T.Kernel(T.ceildiv({'MN'[keep]}, {spec.tile[keep]}), threads={spec.threads}) as b0:"
        ):
            alloc = "T.alloc_shared" if spec.buffer == "shared" else "T.alloc_fragment"
            src(f"x = {alloc}(({bm}, {bn}), T.{spec.in_dtype})")
            src(f"acc = T.alloc_fragment(({spec.tile[keep]},), T.{spec.acc_dtype})")
            if spec.combine == "partial":
                src(f"part = T.alloc_fragment(({spec.tile[keep]},), T.{spec.acc_dtype})")
            if spec.op == "sum":
                src("T.clear(acc)")
            else:
                src(f"T.fill(acc, {_identity(spec.op, spec.acc_dtype)})")
            loop = {
                "serial": f"T.serial({n_tiles_expr})",
                "pipelined": f"T.Pipelined({n_tiles_expr}, num_stages=2)",
                "range": f"range({n_tiles_expr})",
            }[spec.loop]
            with src.block(f"for k in {loop}:"):
                corner = ["b0", "k"] if spec.dim == 1 else ["k", "b0"]
                src(f"T.copy(X[{times(corner[0], bm)}, {times(corner[1], bn)}], x)")
                if spec.masked:
                    with src.block(f"for i, j in T.Parallel({bm}, {bn}):"):
                        idx = f"{times('k', bn)} + j < N" if spec.dim == 1 else f"{times('k', bm)} + i < M"
                        src(f"x[i, j] = T.if_then_else({idx}, x[i, j], {_identity(spec.op, spec.in_dtype)})")
                if spec.combine == "accum":
                    src(f"T.reduce_{spec.op}(x, acc, dim={spec.dim}, clear=False)")
                else:
                    src(f"T.reduce_{spec.op}(x, part, dim={spec.dim})")
                    with src.block(f"for i in T.Parallel({spec.tile[keep]}):"):
                        fn = {"sum": "acc[i] + part[i]", "max": "T.max(acc[i], part[i])",
                              "min": "T.min(acc[i], part[i])"}[spec.op]
                        src(f"acc[i] = {fn}")
            src(f"T.copy(acc, Y[{times('b0', spec.tile[keep])}])")

    model = Source()
    with model.block("def model(X, Y):"):
        fill = _torch_identity(spec.op, spec.in_dtype) if spec.masked else "0"
        model(
            f"value = tiled_reduce(X, {spec.tile}, {spec.dim}, {spec.op!r}, torch.{spec.acc_dtype}, {fill})"
        )
        model(f"return {{'Y': value.to(torch.{spec.out_dtype})}}")
    if spec.op != "sum" or spec.values in ("int", "wrap"):
        rules = {"model": exact(), "gpu": exact()}
    else:
        terms = spec.shape[spec.dim]
        eps = max(EPS[spec.acc_dtype], EPS[spec.out_dtype])
        rules = {"model": close(4 * eps, terms * eps * 16), "gpu": close(4 * eps, terms * eps * 16)}
    return Case("reduce", spec, name, src.text(), [X, Y], model.text(), {"Y": 1}, {"Y": rules},
                helpers=["padded_tiles", "tiled_reduce"])
