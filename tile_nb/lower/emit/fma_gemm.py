"""`T.gemm` on the CUDA cores: float32 / float64 products by FMA, no tensor cores (exact products, as torch's
float32 matmul with TF32 off and as the interpreter computes them).

Taken for every `T.gemm` the tensor cores cannot multiply exactly (`fma_gemm`): a float32 or float64 operand,
or a float64 accumulator (the tensor cores add in float32); and for 8-bit operands wgmma does not take
(`eight_bit_gemm`: block_N 16, B stored [K, N], no sm_90a, ...), converted exactly to float32 (8-bit floats)
or int32 (int8 / uint8, whose int32 sums wrap as wgmma's do). The accumulator keeps the register layout of the
mma.sync path (`layout.MmaAccLayout`, with `fma=True`), so T.Parallel loops, copies and reductions treat it
exactly as they treat a tensor-core accumulator. Each thread computes its own registers of that layout: per k,
it reads the rows of A and the columns of B that its registers cover from shared memory (converted to the
register dtype) and does one FMA per register. The loops inside the k loop are unrolled; nvcc keeps the
operands in registers.
"""
from __future__ import annotations

from tvm import tirx
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import tirx as T

from ..analysis.fragments import FragmentLayout
from ..analysis.layout import accumulator_register_dtype
from ..errors import LoweringError
from ..irwalk import gemm_k, region_of

__all__ = ["K_UNROLL", "lower_gemm_fma", "position", "reg_digits", "register_part"]

K_UNROLL = 8  # k steps unrolled together (fewer where K is not a multiple)


def _fd(a, b):
    return a // b if isinstance(a, int) else tirx.floordiv(a, b)


def _fm(a, b):
    return a % b if isinstance(a, int) else tirx.floormod(a, b)


def reg_digits(layout: FragmentLayout, dim: int) -> list:
    """The register digits of `layout` that move `dim` (least significant first)."""
    return [d for d in layout.of("reg") if d.dim == dim]


def register_part(layout: FragmentLayout, r, dim: int):
    """Register `r`'s digits along `dim`, as a compact index over `reg_digits(layout, dim)`: which of the
    thread's A rows (dim 0) or B columns (dim 1) register `r` needs."""
    compact, place, reg_place = 0, 1, 1
    for d in layout.of("reg"):
        if d.dim == dim:
            compact = compact + _fm(_fd(r, reg_place), d.extent) * place
            place *= d.extent
        reg_place *= d.extent
    return compact


def position(digits: list, index, base):
    """The tile coordinate of compact index `index` over `digits` (one dim's register digits), from `base`
    (the thread's first element along that dim)."""
    place, out = 1, base
    for d in digits:
        out = out + _fm(_fd(index, place), d.extent) * d.stride
        place *= d.extent
    return out


def _count(digits: list) -> int:
    n = 1
    for d in digits:
        n *= d.extent
    return n


def lower_gemm_fma(em, call):
    (c_buf, _), (a_buf, a_rng), (b_buf, b_rng) = (region_of(call.args[i]) for i in range(3))
    trans_a, trans_b = bool(call.args[4]), bool(call.args[5])
    alpha, beta = float(call.args[6].value), float(call.args[7].value)
    if alpha != 1.0:
        raise LoweringError("T.gemm: alpha != 1 is not supported")
    lay = em.plan.accumulators[c_buf]
    layout = em.plan.layout(c_buf)
    k = gemm_k(a_rng, b_rng, trans_a, trans_b, lay.bm, lay.bn)
    if layout.padded or any(d.source == "reg" and d.dim is None for d in layout.digits):
        raise LoweringError(
            f"T.gemm: the accumulator layout of {c_buf.name} has padding or replicated registers"
        )
    reg_dtype = accumulator_register_dtype(c_buf)
    acc = em.registers[c_buf]
    if beta == 0.0:
        with T.unroll(0, layout.regs) as r:
            T.buffer_store(acc, tirx.const(0, reg_dtype), [r])

    rows, cols = reg_digits(layout, 0), reg_digits(layout, 1)
    row0, col0 = layout.element(em.tx, 0)  # this thread's first element; its registers step from there
    a0 = [em.expr(mn) for mn, _ in a_rng]
    b0 = [em.expr(mn) for mn, _ in b_rng]

    def operand(buf, base, row, col):
        idx = list(base)
        idx[-2] = idx[-2] + row
        idx[-1] = idx[-1] + col
        value = em.load(buf, idx)
        return value if str(buf.dtype) == reg_dtype else tirx.Cast(reg_dtype, value)

    a_val = T.alloc_buffer((_count(rows),), reg_dtype, scope="local")
    IRBuilder.name("a_val", a_val)
    b_val = T.alloc_buffer((_count(cols),), reg_dtype, scope="local")
    IRBuilder.name("b_val", b_val)
    # The k loop stays a loop over groups of K_UNROLL steps, each group unrolled (room for nvcc to load the
    # next step's operands during this one's FMAs): unrolled whole it made tens of thousands of lines for a
    # large tile (an int8 128x256x128 tile: 20k lines, a minute in ptxas). The loops inside a step are
    # unrolled, so the registers are indexed by constants.
    step = next(u for u in (K_UNROLL, 4, 2, 1) if k % u == 0)
    with T.serial(0, k // step) as ko, T.unroll(0, step) as ki:
        kk = ko * step + ki
        with T.unroll(0, _count(rows)) as i:
            row = position(rows, i, row0)
            T.buffer_store(
                a_val, operand(a_buf, a0, kk, row) if trans_a else operand(a_buf, a0, row, kk), [i]
            )
        with T.unroll(0, _count(cols)) as j:
            col = position(cols, j, col0)
            T.buffer_store(
                b_val, operand(b_buf, b0, col, kk) if trans_b else operand(b_buf, b0, kk, col), [j]
            )
        with T.unroll(0, layout.regs) as r:
            # a * b + c in one rounding: nvcc contracts it to an FMA (fmad is on by default, fast math or not)
            prod = tirx.BufferLoad(a_val, [register_part(layout, r, 0)]) * \
                tirx.BufferLoad(b_val, [register_part(layout, r, 1)])
            T.buffer_store(acc, tirx.BufferLoad(acc, [r]) + prod, [r])
    em.round_accumulator(c_buf)
