"""What a kernel asks of its target architecture, checked before anything is planned (plan.make_plan).

Each rule refuses a kernel with a LoweringError at the user's line that names the target, the instruction it
lacks and the first architecture that has it, where ptxas would otherwise print
`Feature '...' requires .target sm_80` about a line of generated PTX:
- 8-bit floats below sm_89 (no e4m3 / e5m2 conversions or MMAs in the hardware);
- bfloat16 below sm_80 (no bfloat16 conversions or MMAs; TVM's CUDA code then lacks the type altogether);
- a TF32 `T.gemm` (a T.tfloat32 operand) below sm_80;
- a tensor-core `T.gemm` on anything but float16 below sm_80 (sm_75's mma.sync is m16n8k8 on float16 only;
  float32 / float64 ones, and 8-bit ones off wgmma, run on the CUDA cores everywhere, fma_gemm.py).
Each at the first statement, in program order, that touches such a buffer or computes such a value (a
`T.cast(x, T.bfloat16)` inside an expression: on sm_75 nvrtc either rejects the conversion or, seen on the
H100 as compute_75 PTX, leaves the value unrounded, a silent difference from the interpreter).
Paths that exist on one architecture only are chosen, not refused: wgmma and the TMA
pipelines where the target is sm_90a (wgmma.wgmma_eligible, tma.plan_tma), cp.async copies
from sm_80 on (plain loads and stores before).
"""
from __future__ import annotations

import tvm
from tvm import tirx

from ..errors import LoweringError
from ..irwalk import buffers_touched, iter_stmts, region_of
from .arch import ArchCaps
from .mma import eight_bit_gemm, fma_gemm, is_tf32

__all__ = ["check_target"]

# (dtype prefix, the ArchCaps feature it needs, the arch to suggest): float8_e4m3fn, float8_e5m2, ... start
# with "float8"
_TYPES = (("float8", "fp8", "sm_89"), ("bfloat16", "bf16", "sm_80"))


_LEAVES = (tirx.TilePrimitiveCall, tirx.BufferStore, tirx.Evaluate)


# the fields of an expression node that hold its operands
_OPERANDS = ("a", "b", "value", "condition", "true_value", "false_value", "args", "indices", "base", "stride",
             "body")


def _first_value_of(expr, prefixes: tuple):
    """The first sub-expression of `expr` (pre-order) whose dtype starts with one of `prefixes`, else None."""
    if not isinstance(expr, tvm.ir.Expr):
        return None
    if str(getattr(expr, "ty", "")).startswith(prefixes):
        return expr
    for field in _OPERANDS:
        child = getattr(expr, field, None)
        for c in child if isinstance(child, (list, tuple, tvm.ir.Array)) else (child,):
            found = _first_value_of(c, prefixes)
            if found is not None:
                return found
    return None


def _exprs_of(s) -> list:
    """The expressions a statement computes itself (not those of statements nested in it)."""
    if isinstance(s, tirx.BufferStore):
        return [s.value, *s.indices]
    if isinstance(s, tirx.Evaluate):
        return [s.value]
    if isinstance(s, tirx.TilePrimitiveCall):
        return [a for a in s.args if isinstance(a, tvm.ir.Expr)]
    if isinstance(s, tirx.Bind):
        return [s.value]
    if isinstance(s, (tirx.IfThenElse, tirx.While)):
        return [s.condition]
    return []


def check_target(func: tirx.PrimFunc, caps: ArchCaps, lines) -> None:
    """Raise a LoweringError (at the statement's line) for the first thing in
    `func` that `caps` cannot run."""
    missing = [(prefix, feature, arch) for prefix, feature, arch in _TYPES if not getattr(caps, feature)]
    prefixes = tuple(prefix for prefix, _, _ in missing)
    for s in iter_stmts(func.body):
        if missing and isinstance(s, _LEAVES):
            reads, writes = buffers_touched(s)
            for prefix, feature, arch in missing:
                buf = next((b for b in writes + reads if str(b.dtype).startswith(prefix)), None)
                if buf is not None:
                    raise lines.locate(
                        LoweringError(
                            f"{buf.name} is {buf.dtype}: the target {caps.lacks(feature)}; build for "
                            f"{arch} or newer "
                            f"(target='{arch}', TILE_NB_ARCH={arch}), or keep the data in float16"
                        ),
                        s,
                    )
        if missing:
            for e in _exprs_of(s):
                value = _first_value_of(e, prefixes)
                if value is not None:
                    prefix, feature, arch = next(m for m in missing if str(value.ty).startswith(m[0]))
                    raise lines.locate(
                        LoweringError(
                            f"a {value.ty} value ({_short(value)}): the target {caps.lacks(feature)}; build "
                            f"for {arch} or newer (target='{arch}', TILE_NB_ARCH={arch}), or compute in "
                            "float16 / float32"
                        ),
                        s,
                    )
        if (
            isinstance(s, tirx.TilePrimitiveCall)
            and s.op.name == "tirx.tile.gemm"
            and is_tf32(s)
            and not caps.tf32
        ):
            raise lines.locate(
                LoweringError(
                    f"T.gemm on T.tfloat32 operands: the target {caps.lacks('tf32')}; build for sm_80 or "
                    "newer, or use "
                    "T.float32 operands (exact products on the CUDA cores)"
                ),
                s,
            )
        # (8-bit T.gemm run on the CUDA cores off wgmma, as float32 / float64 ones do)
        if isinstance(s, tirx.TilePrimitiveCall) and s.op.name == "tirx.tile.gemm" and not caps.mma_k16 \
                and not fma_gemm(s) and not eight_bit_gemm(s):
            a, b = region_of(s.args[1])[0], region_of(s.args[2])[0]
            for op in (a, b):
                if str(op.dtype) != "float16":
                    raise lines.locate(
                        LoweringError(
                            f"T.gemm: operand {op.name} is {op.dtype}; the target {caps.arch} has "
                            "tensor-core MMAs for "
                            f"float16 inputs only (mma.sync m16n8k8); use float16 inputs on {caps.arch}, "
                            "or build for "
                            f"sm_80 or newer"
                        ),
                        s,
                    )


def _short(expr, limit: int = 60) -> str:
    text = " ".join(str(expr).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
