"""Sequential loops: `range(start, stop, step)` with positive and negative steps (`range(9, -1, -1)`),
`T.serial(start, stop)`, `T.unroll(n)`, nested, at block level (a T.alloc_var accumulator) or inside
`T.Parallel` (one accumulator per row, in a fragment). Each iteration folds the element it visits into an
order-sensitive hash `acc = (acc * 3 + x) % 1009` and counts itself, so a wrong trip count, order or index
shows. Integers throughout: bitwise."""
from __future__ import annotations

from dataclasses import dataclass

from ..case import Case, Source, TensorArg, exact
from ..choose import Chooser
from .common import kernel_name, times

__all__ = ["LoopSpec", "draw", "render"]


@dataclass(frozen=True)
class LoopSpec:
    rows: int
    length: int                 # X is [rows, length]; every index a loop visits is in [0, length)
    outer: tuple                # ("range", start, stop, step) | ("serial", start, stop) | ("unroll", n)
    inner: tuple | None = None  # a nested loop of the same forms (its variable indexes X too)
    # "block" (alloc_var, one CTA per row) or "parallel" (rows of a tile in T.Parallel)
    where: str = "block"
    tile: int = 4               # rows per CTA in "parallel"


def _loop(c: Chooser, length: int) -> tuple:
    kind = c.choice(("range", "range", "serial", "unroll"))
    if kind == "range":
        step = c.choice((1, 2, 3, -1, -2, -3))
        a, b = c.integer(0, length - 1), c.integer(0, length - 1)
        if step > 0:
            return ("range", min(a, b), max(a, b) + c.choice((0, 1)), step)
        return ("range", max(a, b), min(a, b) - c.choice((0, 1)), step)   # stop may be -1: range(9, -1, -1)
    if kind == "serial":
        a = c.integer(0, length - 1)
        return ("serial", a, c.integer(a, length))
    return ("unroll", c.integer(1, min(length, 8)))


def _values(loop: tuple) -> list[int]:
    if loop[0] == "range":
        return list(range(loop[1], loop[2], loop[3]))
    if loop[0] == "serial":
        return list(range(loop[1], loop[2]))
    return list(range(loop[1]))


def _header(var: str, loop: tuple) -> str:
    if loop[0] == "range":
        args = [loop[1], loop[2]] + ([loop[3]] if loop[3] != 1 else [])
        if args[0] == 0 and len(args) == 2:
            args = args[1:]
        return f"for {var} in range({', '.join(map(str, args))}):"
    if loop[0] == "serial":
        return f"for {var} in T.serial({loop[1]}, {loop[2]}):"
    return f"for {var} in T.unroll({loop[1]}):"


def draw(c: Chooser) -> LoopSpec:
    length = c.choice((1, 3, 10, 17))
    outer = _loop(c, length)
    inner = _loop(c, length) if c.choice((False, False, True)) else None
    return LoopSpec(c.choice((1, 2, 5, 33)), length, outer, inner, c.choice(("block", "parallel")),
                    c.choice((1, 4, 32, 128)))


def render(spec: LoopSpec) -> Case:
    name = kernel_name("loops", spec)
    X = TensorArg("X", (spec.rows, spec.length), "int32", values="natural", hi=100)
    Y = TensorArg("Y", (spec.rows, 2), "int32", values="poison", view="guarded")
    src = Source()
    src("@tile_nb.jit")
    block = spec.where == "block"
    with src.block(f"def {name}(X, Y):"):
        src("R, L = T.const('R, L')")
        src("X: T.Tensor[[R, L], T.int32]")
        src("Y: T.Tensor[[R, 2], T.int32]")
        grid = "R" if block else f"T.ceildiv(R, {spec.tile})"
        with src.block(f"with T.Kernel({grid}, threads=128) as b:"):
            if block:
                src("acc = T.alloc_var(T.int32, init=7)")
                src("cnt = T.alloc_var(T.int32, init=0)")
                acc, cnt, row, par = "acc[0]", "cnt[0]", "b", None
            else:
                src(f"acc = T.alloc_fragment(({spec.tile},), T.int32)")
                src(f"cnt = T.alloc_fragment(({spec.tile},), T.int32)")
                with src.block(f"for r in T.Parallel({spec.tile}):"):
                    src("acc[r] = 7")
                    src("cnt[r] = 0")
                acc, cnt, row = "acc[r]", "cnt[r]", f"T.min({times('b', spec.tile)} + r, R - 1)"
                par = f"for r in T.Parallel({spec.tile}):"

            def visit(var):
                if par:
                    with src.block(par):
                        src(f"{acc} = ({acc} * 3 + X[{row}, {var}]) % 1009")
                        src(f"{cnt} = {cnt} + 1")
                else:
                    src(f"{acc} = ({acc} * 3 + X[{row}, {var}]) % 1009")
                    src(f"{cnt} = {cnt} + 1")

            with src.block(_header("i", spec.outer)):
                visit("i")
                if spec.inner is not None:
                    with src.block(_header("j", spec.inner)):
                        visit("j")
            if block:
                src("Y[b, 0] = acc[0]")
                src("Y[b, 1] = cnt[0]")
            else:
                with src.block(f"for r in T.Parallel({spec.tile}):"):
                    with src.block(f"if {times('b', spec.tile)} + r < R:"):
                        src(f"Y[{times('b', spec.tile)} + r, 0] = acc[r]")
                        src(f"Y[{times('b', spec.tile)} + r, 1] = cnt[r]")

    order = []
    for i in _values(spec.outer):
        order.append(i)
        if spec.inner is not None:
            order.extend(_values(spec.inner))
    model = Source()
    with model.block("def model(X, Y):"):
        model(f"order = {order}   # the indices the loops visit, in order")
        model(
            "out = torch.tensor([[horner([x[i] for i in order], 7, 1009), len(order)] for x in X.tolist()],"
        )
        model("                   dtype=torch.int32)")
        model("return {'Y': out.view(Y.shape)}")
    notes = [f"loops: {_header('i', spec.outer)}" + (f" / {_header('j', spec.inner)}" if spec.inner else "")]
    return Case("loops", spec, name, src.text(), [X, Y], model.text(), {"Y": 1},
                {"Y": {"model": exact(), "gpu": exact()}}, helpers=["horner"], notes=notes)
