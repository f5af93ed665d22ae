"""Pipelined loops whose copy index is computed in the body: the gather pattern. Each iteration reads an index
from a tensor (`row[0] = Idx[k]` into a T.alloc_var or T.alloc_local, or `Idx[k]` inline in the copy's index)
and copies the block of rows it names (`T.copy(A[row[0] * bk, ...], A_s)`); the consumer accumulates the
gathered tiles in T.Parallel, or multiplies them with T.gemm (a gather-GEMM). Integer-valued inputs: bitwise.

A pipeline may prefetch a copy only together with the statements that compute its index; a prefetch that reads
the index of another iteration gives wrong rows (issue 10, item 2)."""
from __future__ import annotations

from dataclasses import dataclass

from ..case import Case, Source, TensorArg, exact
from ..choose import Chooser
from .common import kernel_name, times

__all__ = ["GatherSpec", "draw", "render"]


@dataclass(frozen=True)
class GatherSpec:
    rows: int                   # A is [rows, cols]
    cols: int
    block: int                  # rows per gathered tile (bk)
    width: int                  # columns per CTA (bn)
    n_idx: int                  # iterations = len(Idx)
    stages: int = 2             # T.Pipelined num_stages (0: T.serial)
    # "var" (T.alloc_var), "local" (T.alloc_local((1,))), "inline" (A[Idx[k] * bk, ...])
    index: str = "var"
    consumer: str = "accumulate"   # "accumulate" (T.Parallel) or "gemm" (X tile @ gathered tile)
    dtype: str = "float16"
    m: int = 64                 # gemm consumer: rows of X and Y (bm = 64 per CTA)


def draw(c: Chooser) -> GatherSpec:
    consumer = c.choice(("accumulate", "gemm"))
    block = c.choice((16, 32, 64)) if consumer == "gemm" else c.choice((1, 4, 8, 16, 32))
    width = c.choice((16, 32, 64)) if consumer == "gemm" else c.choice((8, 32, 64, 128))
    n_blocks = c.integer(1, 6)
    rows = n_blocks * block - c.choice((0, 0, 1, block // 2))   # the last block may be partial
    return GatherSpec(max(rows, 1), c.choice((7, 16, 33, 64, 100, 128)), block, width, c.integer(1, 9),
                      c.choice((0, 1, 2, 3)), c.choice(("var", "local", "inline")), consumer,
                      c.choice(("float16", "bfloat16", "float32")) if consumer == "accumulate" else
                      c.choice(("float16", "bfloat16")), c.choice((64, 97, 13)))


def render(spec: GatherSpec) -> Case:
    bk, bn = spec.block, spec.width
    name = kernel_name("gather", spec)
    n_blocks = -(-spec.rows // bk)
    gemm = spec.consumer == "gemm"
    args = [TensorArg("A", (spec.rows, spec.cols), spec.dtype, values="int", hi=2),
            TensorArg("Idx", (spec.n_idx,), "int32", values="index", hi=n_blocks - 1)]
    if gemm:
        args.append(TensorArg("X", (spec.m, spec.n_idx * bk), spec.dtype, values="int", hi=2))
        args.append(TensorArg("Y", (spec.m, spec.cols), "float32", values="poison", view="guarded"))
    else:
        args.append(TensorArg("Y", (bk, spec.cols), "float32", values="poison", view="guarded"))
    src = Source()
    src("@tile_nb.jit")
    with src.block(f"def {name}({', '.join(a.name for a in args)}):"):
        src("R, C, K = T.const('R, C, K')")
        src(f"A: T.Tensor[[R, C], T.{spec.dtype}]")
        src("Idx: T.Tensor[[K], T.int32]")
        if gemm:
            src("M = T.const('M')")
            src(f"X: T.Tensor[[M, K * {bk}], T.{spec.dtype}]")
            src("Y: T.Tensor[[M, C], T.float32]")
            grid, target = f"T.ceildiv(C, {bn}), T.ceildiv(M, 64)", "(bx, by)"
        else:
            src(f"Y: T.Tensor[[{bk}, C], T.float32]")
            grid, target = f"T.ceildiv(C, {bn})", "bx"
        with src.block(f"with T.Kernel({grid}, threads=128) as {target}:"):
            src(f"A_s = T.alloc_shared(({bk}, {bn}), T.{spec.dtype})")
            if gemm:
                src(f"X_s = T.alloc_shared((64, {bk}), T.{spec.dtype})")
                src(f"acc = T.alloc_fragment((64, {bn}), T.float32)")
            else:
                src(f"acc = T.alloc_fragment(({bk}, {bn}), T.float32)")
            if spec.index == "var":
                src("row = T.alloc_var(T.int32)")
            elif spec.index == "local":
                src("row = T.alloc_local((1,), T.int32)")
            src("T.clear(acc)")
            loop = f"T.Pipelined(K, num_stages={spec.stages})" if spec.stages else "T.serial(K)"
            with src.block(f"for k in {loop}:"):
                if spec.index == "inline":
                    start = times("Idx[k]", bk)
                else:
                    src("row[0] = Idx[k]")
                    start = times("row[0]", bk)
                src(f"T.copy(A[{start}, {times('bx', bn)}], A_s)")
                if gemm:
                    src(f"T.copy(X[by * 64, {times('k', bk)}], X_s)")
                    src("T.gemm(X_s, A_s, acc)")
                else:
                    with src.block(f"for i, j in T.Parallel({bk}, {bn}):"):
                        src("acc[i, j] += T.cast(A_s[i, j], T.float32)")
            src(f"T.copy(acc, Y[{'by * 64' if gemm else '0'}, {times('bx', bn)}])")

    model = Source()
    with model.block(f"def model({', '.join(a.name for a in args)}):"):
        model(f"tiles = gather_rows(A.double(), Idx, {bk}, 0, {spec.cols})")
        if gemm:
            model(f"xs = X.double().split({bk}, dim=1)")
            model("value = sum(x @ t for x, t in zip(xs, tiles))")
        else:
            model("value = sum(tiles)")
        model("return {'Y': value.float()}")
    return Case("gather", spec, name, src.text(), args, model.text(), {"Y": len(args) - 1},
                {"Y": {"model": exact(), "gpu": exact()}}, helpers=["gather_rows"],
                notes=["the copy's index is computed in the loop body (issue 10, item 2)"])
