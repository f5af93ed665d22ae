"""Elementwise kernels: a generated typed expression (exprs.py) over one to three inputs, a broadcast row
vector and the element's indices, evaluated in `T.Parallel` either straight from global memory behind an
`if` guard, or on fragment / shared tiles copied in and out (edges handled by the copies); the output is an
in-place argument or a `T.empty` result."""
from __future__ import annotations

from dataclasses import dataclass

from ..case import Case, Source, TensorArg, close, exact
from ..choose import Chooser
from .common import (
    SIZES,
    STRIDED_VIEWS,
    annotate,
    declare_dims,
    dim_names,
    int_values,
    kernel_name,
    numel,
    times,
)
from .exprs import EPS, Expr, Leaf, cast_to, gen_expr

__all__ = ["ElementwiseSpec", "draw", "render"]


@dataclass(frozen=True)
class ElementwiseSpec:
    shape: tuple                     # (N,) or (M, N)
    tile: tuple
    inputs: tuple                    # (dtype, view) of X0, X1, ...
    expr: Expr                       # over the leaves named in its text; already of out dtype
    out_dtype: str
    row: str | None = None           # dtype of a row vector R[N] (direct mode only)
    mode: str = "direct"             # "direct" (global loads in T.Parallel), "fragment" or "shared" tiles
    guard: str = "and"               # direct mode: one `if a & b:` or nested ifs
    output: str = "inplace"          # "inplace" (argument Y) or "empty" (T.empty, returned)
    threads: int = 128
    dynamic: tuple = ()              # dim names declared with T.dynamic


def _leaves(shape, tile, inputs, row, mode) -> list[Leaf]:
    rank = len(shape)
    loop = ["i", "j"][:rank]
    glob = [f"({times(f'b{d}', t)} + {v})" for d, (t, v) in enumerate(zip(tile, loop, strict=True))]
    leaves = []
    for k, (dtype, _) in enumerate(inputs):
        bound = 12.0 if dtype in ("float32", "float16", "bfloat16") else (200 if dtype == "uint8" else 100)
        text = f"X{k}[{', '.join(glob)}]" if mode == "direct" else f"x{k}[{', '.join(loop)}]"
        leaves.append(Leaf(text, f"X{k}", dtype, bound))
    if row is not None:
        leaves.append(Leaf(f"R[{glob[-1]}]", "R", row, 12.0))
    for d in range(rank):
        leaves.append(Leaf(glob[d], f"I{d}", "int32", shape[d]))
        leaves.append(Leaf(loop[d], f"L{d}", "int32", tile[d]))
    return leaves


def draw(c: Chooser) -> ElementwiseSpec:
    rank = c.choice((2, 1, 2))
    shape = tuple(c.choice(SIZES) for _ in range(rank))
    tile = [c.choice((1, 2, 4, 8, 16, 32, 64, 128, 256)) for _ in range(rank)]
    while numel(tile) > 2048:
        tile[tile.index(max(tile))] //= 2
    tile = tuple(tile)
    n_inputs = c.integer(1, 3)
    dtypes = ("float32", "float16", "bfloat16", "int32", "int8", "uint8")
    inputs = tuple(
        (c.choice(dtypes), c.choice(("contiguous", "contiguous") + (STRIDED_VIEWS if rank == 2 else ())))
        for _ in range(n_inputs)
    )
    mode = c.choice(("direct", "fragment", "shared"))
    row = c.choice((None, None, "float32", "float16")) if mode == "direct" and rank == 2 else None
    work = c.choice(("float32", "float32", "float16", "bfloat16", "int32"))
    expr = gen_expr(c, work, c.integer(1, 4), _leaves(shape, tile, inputs, row, mode), top=True)
    outs = ("float32", "float16", "bfloat16") + (("int32", "int8") if expr.exact else ())
    out_dtype = c.choice((work,) + outs) if work != "int32" or expr.exact else "float32"
    if out_dtype in ("int32", "int8") and not expr.exact:
        out_dtype = "float32"
    final = cast_to(expr, out_dtype) if out_dtype != "int8" else cast_to(_clamped(expr), "int8")
    guard, output, threads = c.choice(("and", "nested")), c.choice(("inplace", "inplace", "empty")), \
        c.choice((128, 128, 64, 256))
    dynamic = tuple(n for n in dim_names(rank) if c.choice((False, False, True)))
    return ElementwiseSpec(shape, tile, inputs, final, out_dtype, row, mode, guard, output, threads, dynamic)


def _clamped(e: Expr) -> Expr:
    """Keep a value that becomes int8 inside [-100, 100] (int8 conversion of a larger value wraps)."""
    inner = cast_to(e, "int32")
    return Expr(
        f"T.max(T.min({inner.tile}, 100), -100)",
        f"torch.clamp({inner.torch}, -100, 100)",
        "int32",
        min(inner.bound, 100),
        inner.exact,
        inner.peak,
        inner.ops,
    )


def _rules(spec: ElementwiseSpec) -> dict:
    e = spec.expr
    if e.exact:
        return {"model": exact(), "gpu": exact()}
    text = e.torch
    eps = EPS["float32"]
    for dt in ("float16", "bfloat16"):
        if f"torch.{dt}" in text or spec.out_dtype == dt:
            eps = max(eps, EPS[dt])
    peak = min(max(e.peak, 1.0), 1e3)
    model_rtol = 8 * eps
    gpu_rtol = 2e-3 if eps == EPS["float32"] else 16 * eps
    return {"model": close(model_rtol, model_rtol * peak), "gpu": close(gpu_rtol, gpu_rtol * peak)}


def render(spec: ElementwiseSpec) -> Case:
    rank = len(spec.shape)
    names = dim_names(rank)
    loop = ["i", "j"][:rank]
    blocks = [f"b{d}" for d in range(rank)]
    name = kernel_name("elementwise", spec)
    args = [
        TensorArg(
            f"X{k}",
            spec.shape,
            dt,
            view=view,
            **({"values": "normal", "scale": 3.0} if dt.startswith(("float", "bfloat")) else int_values(dt)),
        )
        for k, (dt, view) in enumerate(spec.inputs)
    ]
    if spec.row is not None:
        args.append(TensorArg("R", spec.shape[-1:], spec.row, scale=3.0))
    inplace = spec.output == "inplace"
    if inplace:
        args.append(TensorArg("Y", spec.shape, spec.out_dtype, values="poison", view="guarded"))
    params = [a.name for a in args]
    glob = [f"{times(b, t)} + {v}" for b, t, v in zip(blocks, spec.tile, loop, strict=True)]

    src = Source()
    src("@tile_nb.jit")
    with src.block(f"def {name}({', '.join(params)}):"):
        declare_dims(src, names, spec.dynamic)
        for a in args:
            annotate(src, a, names[-1:] if a.name == "R" else names)
        if not inplace:
            src(f"Y = T.empty(({', '.join(names)}{',' if rank == 1 else ''}), T.{spec.out_dtype})")
        grid = ", ".join(f"T.ceildiv({n}, {t})" for n, t in zip(names, spec.tile, strict=True))
        target = blocks[0] if rank == 1 else f"({', '.join(blocks)})"
        with src.block(f"with T.Kernel({grid}, threads={spec.threads}) as {target}:"):
            corner = ", ".join(times(b, t) for b, t in zip(blocks, spec.tile, strict=True))
            if spec.mode == "direct":
                with src.block(f"for {', '.join(loop)} in T.Parallel({', '.join(map(str, spec.tile))}):"):
                    conds = [f"{g} < {n}" for g, n in zip(glob, names, strict=True)]
                    if spec.guard == "and" or rank == 1:
                        cond = " & ".join(f"({x})" for x in conds) if rank > 1 else conds[0]
                        with src.block(f"if {cond}:"):
                            src(f"Y[{', '.join(glob)}] = {spec.expr.tile}")
                    else:
                        with src.block(f"if {conds[0]}:"):
                            with src.block(f"if {conds[1]}:"):
                                src(f"Y[{', '.join(glob)}] = {spec.expr.tile}")
            else:
                alloc = "T.alloc_fragment" if spec.mode == "fragment" else "T.alloc_shared"
                for k, (dt, _) in enumerate(spec.inputs):
                    src(f"x{k} = {alloc}({spec.tile}, T.{dt})")
                    src(f"T.copy(X{k}[{corner}], x{k})")
                src(f"y = {alloc}({spec.tile}, T.{spec.out_dtype})")
                with src.block(f"for {', '.join(loop)} in T.Parallel({', '.join(map(str, spec.tile))}):"):
                    src(f"y[{', '.join(loop)}] = {spec.expr.tile}")
                src(f"T.copy(y, Y[{corner}])")
        if not inplace:
            src("return Y")

    model = Source()
    with model.block(f"def model({', '.join(params)}):"):
        shape = tuple(spec.shape)
        for d in range(rank):
            view = ["1"] * rank
            view[d] = "-1"
            model(
                f"I{d} = torch.arange({shape[d]}, dtype=torch.int32).view({', '.join(view)}).expand({shape})"
            )
            model(f"L{d} = I{d} % {spec.tile[d]}")
        if spec.row is not None:
            model("R = R.view(1, -1)")
        model(f"value = torch.broadcast_to({spec.expr.torch}, {shape}).to(torch.{spec.out_dtype})")
        model("return {'Y': value}")
    outputs = {"Y": len(args) - 1} if inplace else {"Y": "return"}
    return Case("elementwise", spec, name, src.text(), args, model.text(), outputs, {"Y": _rules(spec)})
