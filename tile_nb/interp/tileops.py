"""Tile primitive rules (`T.tile.copy / fill / gemm / sum / max / min`): whole-tile torch operations.

Argument order follows TVM's tile primitive classes (`tvm/tirx/operator/tile_primitive/ops.py`):
copy(dst, src), fill(dst, value), gemm(D, A, B, C, transpose_A, transpose_B, alpha, beta),
sum/max/min(dst, src, axes, accum); cumsum(dst, src, dim, reverse) is tile_nb's own (language/compute.py).
"""
from __future__ import annotations

import torch
import tvm

from . import values as V
from .compiler import Compiler, tile_rule
from .errors import InterpreterError
from .memory import clip, compile_region

__all__: list[str] = []


def _const(node, what: str):
    if isinstance(node, (bool, int, float)):
        return node  # plain Python values survive in TilePrimitiveCall args
    value = getattr(node, "value", None)
    if value is None:
        raise NotImplementedError(f"{what} must be a constant, got {node}")
    return value


def _core(exts) -> list[int]:
    """Extents without unit dims: what must agree between the two sides of a copy."""
    return [e for e in exts if e != 1]


@tile_rule("copy", "copy_async")
def _copy(comp: Compiler, node):
    dst, src = compile_region(comp, node.args[0], "T.copy"), compile_region(comp, node.args[1], "T.copy")
    location = comp.location

    def copy(f):
        tile = src.read(f, check=not dst.guarded)
        dst_t, dst_starts, dst_exts = dst.resolve(f)
        same_shape = list(tile.shape) == dst_exts   # the usual case: no unit dims to drop or add
        if not same_shape and _core(tile.shape) != _core(dst_exts):
            raise InterpreterError(
                f"T.copy between regions of different shapes: {src.name}{list(tile.shape)} -> "
                f"{dst.name}{dst_exts}", location)
        if dst.guarded and src.unwritten_possible(f):
            src.check(f, _in_range(dst_t.shape, dst_starts, dst_exts, tile.shape))
        if not same_shape:
            tile = tile.reshape(dst_exts)
        # (a per-call reshape / same-dtype .to cost as much as a small tile's copy itself)
        dst.write(f, tile if tile.dtype == dst.dtype else V.convert(tile, dst.dtype))
    return copy


def _in_range(shape, starts, exts, src_shape) -> torch.Tensor | None:
    """Which elements of a copy's source land inside a global destination (those past its edge are not stored
    on the GPU, so they need not have been written), shaped as the source region; None when all of them do."""
    src, dst = clip(shape, starts, exts)
    if src is not None and all(s.stop - s.start == e for s, e in zip(src, exts, strict=True)):
        return None
    need = torch.zeros(exts, dtype=torch.bool)
    if dst is not None:
        need[dst] = True
    return need.reshape(src_shape)


@tile_rule("fill", "memset")
def _fill(comp: Compiler, node):
    dst = compile_region(comp, node.args[0], "T.fill")
    value = comp.expr(node.args[1])

    def fill(f):
        v = value(f)
        dst.write(f, v.item() if V.is_tensor(v) else v)
    return fill


@tile_rule("zero")
def _zero(comp: Compiler, node):
    dst = compile_region(comp, node.args[0])
    return lambda f: dst.write(f, 0)


def _matrix(tile: torch.Tensor, name: str, location) -> torch.Tensor:
    """A gemm operand region as a 2-D matrix: leading unit dims (a stage of a 3-D shared buffer) dropped."""
    if tile.dim() == 2:
        return tile
    if tile.dim() > 2 and all(e == 1 for e in tile.shape[:-2]):
        return tile.reshape(tile.shape[-2:])
    raise InterpreterError(f"T.gemm operand {name} must be a 2-D tile, got shape {list(tile.shape)}",
                           location)


@tile_rule("gemm")
def _gemm(comp: Compiler, node):
    d_reg, a_reg, b_reg, c_reg = (compile_region(comp, node.args[i], "T.gemm") for i in range(4))
    trans_a, trans_b = bool(_const(node.args[4], "transpose_A")), bool(_const(node.args[5], "transpose_B"))
    alpha = float(_const(node.args[6], "alpha")) if len(node.args) > 6 else 1.0
    beta = float(_const(node.args[7], "beta")) if len(node.args) > 7 else 1.0
    acc = V.accum_dtype(d_reg.dtype)
    # A T.tfloat32 operand: both operands rounded to TF32 (as the tensor cores'
    # inputs), then an ordinary product.
    tf32 = bool(int((node.config or {}).get("tf32", 0)))
    location = comp.location
    # The usual `C_frag += A_s @ B_s`: accumulate in place in the accumulator (no temporary, no copy back).
    in_place = (d_reg.dtype == acc and alpha == 1.0 and beta in (0.0, 1.0)
                and _same_region(node.args[0], node.args[3]))

    def gemm(f):
        a = _matrix(a_reg.read(f), a_reg.name, location)
        b = _matrix(b_reg.read(f), b_reg.name, location)
        if tf32:
            a, b = V.round_tf32(a), V.round_tf32(b)
        if a.dtype != acc:
            a = a.to(acc)
        if b.dtype != acc:
            b = b.to(acc)
        if trans_a:
            a = a.T
        if trans_b:
            b = b.T
        if a.shape[1] != b.shape[0]:
            raise InterpreterError(f"T.gemm: {a_reg.name} is {list(a.shape)} and {b_reg.name} is "
                                   f"{list(b.shape)} (after transposes); inner dims differ",
                                   location)
        if in_place:
            d = d_reg.view(f)
            if d is not None and d.shape == (a.shape[0], b.shape[1]):
                if beta == 1.0:
                    # accumulates into C: it must hold values (T.clear it, or clear_accum=True)
                    c_reg.check(f)
                    d.addmm_(a, b)
                else:
                    torch.mm(a, b, out=d)
                d_reg.mark_view(f)
                return
        out = a @ b
        if alpha != 1.0:
            out *= alpha
        if beta != 0.0:
            c = c_reg.read(f)
            out += beta * c.reshape(out.shape).to(acc) if beta != 1.0 else c.reshape(out.shape).to(acc)
        _, _, d_exts = d_reg.resolve(f)
        if _core(out.shape) != _core(d_exts):
            raise InterpreterError(f"T.gemm: result {list(out.shape)} does not fit {d_reg.name}{d_exts}",
                                   location)
        d_reg.write(f, V.wrap_int(out.reshape(d_exts), d_reg.dtype))
    return gemm


def _same_region(r1, r2) -> bool:
    try:
        tvm.ir.assert_structural_equal(r1, r2, map_free_vars=False)
    except (ValueError, AssertionError, RuntimeError):
        return False
    return True


_REDUCERS = {
    "sum": (lambda x, dims: x.sum(dim=dims), torch.add),
    "max": (lambda x, dims: x.amax(dim=dims), torch.maximum),
    "min": (lambda x, dims: x.amin(dim=dims), torch.minimum),
}


def _reduce_rule(kind: str):
    reduce, combine = _REDUCERS[kind]

    def rule(comp: Compiler, node):
        op = f"T.reduce_{kind}"
        dst, src = compile_region(comp, node.args[0], op), compile_region(comp, node.args[1], op)
        axes = [int(_const(a, "reduce axis")) for a in node.args[2]]
        accum = bool(_const(node.args[3], "accum")) if len(node.args) > 3 else False
        # docs/IR.md: sums in the destination's accumulation dtype, max/min in
        # one that holds the source exactly
        acc = V.accum_dtype(dst.dtype) if kind == "sum" else V.compare_dtype(src.dtype)
        location = comp.location
        absolute = bool(int((node.config or {}).get("absolute", 0)))  # T.reduce_absmax

        def reduction(f):
            tile = src.read(f)
            dims = [a % tile.dim() for a in axes]
            tile = tile.to(acc)
            out = reduce(tile.abs() if absolute else tile, dims)
            _, _, d_exts = dst.resolve(f)
            if _core(out.shape) != _core(d_exts):
                raise InterpreterError(
                    f"T.reduce_{kind}: reducing {src.name}{list(tile.shape)} over dims {dims} gives "
                    f"{list(out.shape)}, which does not fit {dst.name}{d_exts}", location)
            out = out.reshape(d_exts)
            if accum:
                out = combine(out, dst.read(f).to(acc))
            dst.write(f, V.wrap_int(out, dst.dtype))
        return reduction
    return rule


for _kind in _REDUCERS:
    tile_rule(_kind)(_reduce_rule(_kind))



@tile_rule("cumsum")
def _cumsum(comp: Compiler, node):
    """`T.tile.cumsum(dst, src, dim, reverse)`: the inclusive prefix sum along `dim`, in the accumulation
    dtype of `dst` (docs/IR.md), each element rounded to `dst`'s dtype once."""
    dst, src = compile_region(comp, node.args[0]), compile_region(comp, node.args[1])
    dim = int(_const(node.args[2], "cumsum dim"))
    reverse = bool(_const(node.args[3], "cumsum reverse"))
    acc = V.accum_dtype(dst.dtype)
    location = comp.location

    def cumsum(f):
        tile = src.read(f).to(acc)
        _, _, d_exts = dst.resolve(f)
        if list(tile.shape) != list(d_exts):
            raise InterpreterError(
                f"T.cumsum: {src.name}{list(tile.shape)} and {dst.name}{d_exts} differ in shape", location
            )
        out = tile.flip(dim).cumsum(dim).flip(dim) if reverse else tile.cumsum(dim)
        dst.write(f, V.wrap_int(out.to(acc), dst.dtype))
    return cumsum


@tile_rule("finalize_reducer")
def _finalize_reducer(comp: Compiler, node):
    """T.finalize_reducer: every update of a reducer (language/reducers.py) was added into its one value
    already (the atomic adds of its T.Parallel loops); the GPU's per-thread copies are combined here."""
    return lambda f: None
