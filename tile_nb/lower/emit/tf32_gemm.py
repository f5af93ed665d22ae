"""`T.gemm` with a `T.tfloat32` operand on the tensor cores: mma.sync m16n8k8
.tf32 (sm_80+), float32 accumulation.

The accumulator is the mma.sync one (`layout.MmaAccLayout`, `tf32=True`): the m16n8k8 .tf32 C fragment is the
m16n8k16 one, so copies, T.Parallel loops and reductions read it unchanged. Per 8-wide k-step, each lane loads
its A and B elements from shared memory (PTX fragment layouts, g = lane / 4, t = lane % 4: A rows g and g + 8
at k t and t + 4; B k t and t + 4 at column g of each n8 atom), converts each with `cvt.rna.tf32.f32` (round
to nearest, ties away, as the interpreter's `values.round_tf32`), then issues MI x NI MMAs. ldmatrix is not
used: its .trans form moves 16-bit elements only, and plain 32-bit loads serve every storage order alike.
"""
from __future__ import annotations

from tvm import tirx
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import tirx as T

from ..errors import LoweringError
from ..irwalk import gemm_k, region_of
from . import intrin

__all__ = ["lower_gemm_tf32"]

# (a T.tfloat32 tile is float32 storage; 16-bit values are exact in TF32)
_INPUTS = ("float32", "float16", "bfloat16")


def lower_gemm_tf32(em, call):
    (c_buf, _), (a_buf, a_rng), (b_buf, b_rng) = (region_of(call.args[i]) for i in range(3))
    trans_a, trans_b = bool(call.args[4]), bool(call.args[5])
    alpha, beta = float(call.args[6].value), float(call.args[7].value)
    lay = em.plan.accumulators[c_buf]
    for op in (a_buf, b_buf):
        if str(op.dtype) not in _INPUTS:
            raise LoweringError(f"T.gemm in TF32: operand {op.name} is {op.dtype}; TF32 MMAs take float32 "
                                "(T.tfloat32) operands")
    if str(c_buf.dtype) not in ("float32", "float16", "bfloat16"):
        raise LoweringError(
            f"T.gemm in TF32: accumulator {c_buf.name} is {c_buf.dtype}; the tensor cores add in "
            "float32 (use a float32 accumulator, or T.float32 operands for a float64 one)"
        )
    if alpha != 1.0:
        raise LoweringError("T.gemm: alpha != 1 is not supported")
    k = gemm_k(a_rng, b_rng, trans_a, trans_b, lay.bm, lay.bn)
    if k % 8:
        raise LoweringError(f"T.gemm in TF32: K = {k} must be a multiple of 8 for mma.sync m16n8k8 .tf32")
    a0 = [em.expr(mn) for mn, _ in a_rng]
    b0 = [em.expr(mn) for mn, _ in b_rng]
    acc = em.registers[c_buf]
    if beta == 0.0:
        with T.unroll(0, lay.regs) as r:
            T.buffer_store(acc, tirx.const(0, "float32"), [r])

    lane = tirx.floormod(em.tx, 32)
    g, t = tirx.floordiv(lane, 4), tirx.floormod(lane, 4)
    wy, wx = lay.warp_coords(em.tx)
    mi_n, ni_n = lay.mi, lay.ni
    a_frag = T.alloc_buffer((mi_n * 4,), "uint32", scope="local")
    IRBuilder.name("a_frag", a_frag)
    b_frag = T.alloc_buffer((ni_n * 2,), "uint32", scope="local")
    IRBuilder.name("b_frag", b_frag)

    def tf32(buf, base, row, col):
        idx = list(base)
        idx[-2] = idx[-2] + row
        idx[-1] = idx[-1] + col
        value = em.load(buf, idx)
        return intrin.to_tf32(value if str(buf.dtype) == "float32" else tirx.Cast("float32", value))

    def a_at(m_, k_):
        return tf32(a_buf, a0, k_, m_) if trans_a else tf32(a_buf, a0, m_, k_)

    def b_at(k_, n_):
        return tf32(b_buf, b0, n_, k_) if trans_b else tf32(b_buf, b0, k_, n_)

    with T.unroll(0, k // 8) as kk:
        with T.unroll(0, mi_n) as mi:
            row = lay.row_base(wy, mi) + g
            for q, (dm, dk) in enumerate(((0, 0), (8, 0), (0, 4), (8, 4))):
                T.buffer_store(a_frag, a_at(row + dm, kk * 8 + t + dk), [mi * 4 + q])
        with T.unroll(0, ni_n) as ni:
            col = wx * lay.warp_n + ni * 8 + g
            for q in range(2):
                T.buffer_store(b_frag, b_at(kk * 8 + t + 4 * q, col), [ni * 2 + q])
        with T.unroll(0, mi_n) as mi, T.unroll(0, ni_n) as ni:
            T.evaluate(intrin.mma_m16n8k8_tf32(
                intrin.address_of(acc, [(mi * ni_n + ni) * 4]),
                intrin.address_of(a_frag, [mi * 4]),
                intrin.address_of(b_frag, [ni * 2])))
    em.round_accumulator(c_buf)
