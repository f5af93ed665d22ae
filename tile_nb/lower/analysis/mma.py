"""Which instruction each `T.gemm` gets: wgmma (`wgmma_eligible`, sm_90a, with A from registers where
`wgmma_register_a_ok`), FMAs on the CUDA cores (`fma_gemm`: float32 / float64; `eight_bit_gemm`: 8-bit floats
or integers that wgmma does not take), TF32 mma.sync (`is_tf32`), or mma.sync otherwise; `plan._choose_mma`
asks these and records each call's `gemm_kind` (decisions.GemmKind) in the plan, which the emitters
(emit/gemm.py, wgmma.py, fma_gemm.py, tf32_gemm.py) follow.
"""
from __future__ import annotations

from ..errors import LoweringError
from ..irwalk import region_of, scope_of
from .decisions import GemmKind
from .layout import WgmmaAccLayout

__all__ = ["EIGHT_BIT", "FMA_INPUTS", "FP8_FLOATS", "INT8S", "WGMMA_TYPES", "eight_bit_fma_reason",
           "eight_bit_gemm", "elem_bytes", "fma_gemm", "gemm_k", "gemm_kind", "is_tf32", "k_major_panels",
           "narrow_b", "read_as_panels", "wgmma_eligible", "wgmma_operand_types", "wgmma_refusal",
           "wgmma_register_a_ok", "wgmma_split"]


# wgmma operand types by tile IR dtype. 8-bit types may be mixed within their kind (e4m3 x e5m2, s8 x u8);
# 16-bit ones may not.
WGMMA_TYPES = {"float16": "f16", "bfloat16": "bf16", "float8_e4m3fn": "e4m3", "float8_e5m2": "e5m2",
               "int8": "s8", "uint8": "u8"}
EIGHT_BIT = {"e4m3": "float", "e5m2": "float", "s8": "int", "u8": "int"}


def wgmma_operand_types(a_dtype: str, b_dtype: str) -> tuple[str, str] | None:
    """The wgmma type names of A and B (`f16`, `e4m3`, ...), or None when wgmma cannot multiply them."""
    ta, tb = WGMMA_TYPES.get(str(a_dtype)), WGMMA_TYPES.get(str(b_dtype))
    if ta is None or tb is None:
        return None
    if ta in EIGHT_BIT and EIGHT_BIT[ta] == EIGHT_BIT.get(tb):
        return ta, tb
    return (ta, tb) if ta == tb else None


def wgmma_eligible(target, call, threads, transpose_a: bool = False) -> bool:
    return wgmma_refusal(target, call, threads, transpose_a) is None


def wgmma_refusal(target, call, threads, transpose_a: bool = False) -> str | None:
    """Why this T.gemm cannot run on wgmma, for people (the plan's note of an 8-bit T.gemm on the CUDA cores),
    or None where it can (`wgmma_eligible`). `transpose_a`: the lowering option wgmma_transpose_a (an A
    stored [K, M] is taken)."""
    if target is None or "sm_90a" not in str(target.attrs.get("arch", "")):
        arch = str(target.attrs.get("arch", "")) if target is not None else "none"
        return f"the target {arch} has no wgmma (tile_nb emits 8-bit MMAs on Hopper sm_90a only)"
    (c, c_rng), (a, a_rng), (b, b_rng) = (region_of(call.args[i]) for i in range(3))
    trans_a, trans_b = bool(call.args[4]), bool(call.args[5])
    types = wgmma_operand_types(a.dtype, b.dtype)
    if trans_a and types is not None and types[0] in EIGHT_BIT:
        return "transpose_A=True with 8-bit A (wgmma reads 8-bit A stored [M, K] only)"
    if trans_a and not transpose_a:
        return "transpose_A=True (wgmma reads A stored [M, K]; the option wgmma_transpose_a takes [K, M])"
    if trans_a and types is None:
        return f"transpose_A=True with {a.dtype} x {b.dtype} (wgmma has no such product)"
    if trans_a and scope_of(a) != "shared.dyn":
        return "transpose_A=True with A in registers (wgmma's register A is [M, K])"
    if threads % 128:
        return f"threads={threads} is not whole warpgroups of 128"
    if types is None:
        return f"wgmma has no {a.dtype} x {b.dtype} product"
    if types[0] in EIGHT_BIT and not trans_b:
        # 8-bit operands are read K-major only: B must be stored [N, K] (transpose_B=True)
        return "B is stored [K, N]; wgmma reads 8-bit B stored [N, K] only (transpose_B=True)"
    if (EIGHT_BIT.get(types[0]) == "int") != (str(c.dtype) == "int32"):
        # integer products accumulate in int32, float ones in a float accumulator
        return f"the accumulator is {c.dtype} (wgmma adds 8-bit integers in int32, other products in floats)"
    bm, bn = int(c.shape[0]), int(c.shape[1])
    a_ext = [int(e) for _, e in a_rng]
    b_ext = [int(e) for _, e in b_rng]
    bk = gemm_k(call)
    elem = elem_bytes(a.dtype)
    split = wgmma_split(bm, bn, threads // 128, trans_b, narrow_b=narrow_b(call))
    if isinstance(split, str):
        return split
    if trans_a:  # A stored [K, M], MN-major: 64-column panels of M, any K of whole k16 steps
        if a_ext[-1] != bm or bk % 16:
            return (f"A stored [K, M] is [{bk}, {a_ext[-1]}]: wgmma reads it as whole k16 steps of all {bm} "
                    "rows")
    if (trans_b or not trans_a) and not (bk * elem in (64, 128) or k_major_panels(a.dtype, bk)):
        return f"block_K={bk}: wgmma reads K rows of 64 or 128 bytes"  # of a K-major A or B
    if [int(x) for x in a.shape[-2:]] != a_ext[-2:] or [int(x) for x in b.shape[-2:]] != b_ext[-2:]:
        return "an operand is part of its shared tile (wgmma's descriptors address whole tiles)"
    if trans_b and b_ext[-1] != bk:
        return f"B's K extent {b_ext[-1]} is not A's {bk}"
    return None


def wgmma_split(bm: int, bn: int, warpgroups: int, trans_b: bool,
                narrow_b: bool = False) -> tuple[int, int] | str:
    """How the warpgroups share a wgmma accumulator: (row groups, column groups), or why no way works. Rows
    first, 64 per warpgroup; the warpgroups the rows leave over split the columns (64 rows over two
    warpgroups: tilelang's FullCol policy, MLA decode's shape), each taking a slice of B that starts on a
    whole 8-row atom of a K-major B ([N, K], transpose_B=True) or a whole 64-column panel of a [K, N] one.
    `narrow_b` (a 16-bit B stored [N, K]): one warpgroup's wgmma may take any multiple of 16 columns
    (m64n16k16 .. m64n256k16); other operands keep N a multiple of 64."""
    rows = next(r for r in range(warpgroups, 0, -1) if warpgroups % r == 0 and bm % (64 * r) == 0) \
        if bm % 64 == 0 else 0
    if not rows:
        return f"block_M={bm}: wgmma needs 64 rows per warpgroup (block_M a multiple of 64)"
    cols = warpgroups // rows
    group_n = bn // cols
    step = 16 if narrow_b else 64
    if cols == 1 and (bn % step or bn > 256):
        return (f"block_N={bn}: no wgmma shape tile_nb emits (N a multiple of {step} up to 256"
                f"{' with a 16-bit B stored [N, K]' if narrow_b else ''})")
    if cols > 1 and (bn % cols or group_n > 256 or group_n % (16 if trans_b else 64)):
        return (f"block_M={bm} over {warpgroups} warpgroups: {cols} of them would split block_N={bn} into "
                f"{cols} slices of {bn / cols:g} columns, and wgmma here takes slices that are multiples of "
                f"{16 if trans_b else 64} (B stored {'[N, K]' if trans_b else '[K, N]'}) up to 256")
    return rows, cols


def gemm_k(call) -> int:
    """The K extent of a T.gemm: A's last dim, or its second-to-last where A is stored [K, M]
    (transpose_A)."""
    a_rng = region_of(call.args[1])[1]
    return int(a_rng[-2][1] if bool(call.args[4]) else a_rng[-1][1])


def narrow_b(call) -> bool:
    """Whether a T.gemm's B is 16-bit and stored [N, K]: one warpgroup's wgmma may take any multiple of 16 of
    its columns (wgmma_split)."""
    b = region_of(call.args[2])[0]
    return bool(call.args[5]) and elem_bytes(b.dtype) == 2


def wgmma_register_a_ok(call) -> bool:
    """Whether a wgmma T.gemm can take its A operand from registers (`wgmma ... d, {a0..a3}, b-desc`): a
    16-bit float A, not transposed, whole, with a K of whole k16 steps."""
    a, a_rng = region_of(call.args[1])
    if bool(call.args[4]) or str(a.dtype) not in ("float16", "bfloat16"):
        return False
    ext = [int(e) for _, e in a_rng]
    return len(a.shape) == 2 and [int(x) for x in a.shape] == ext and ext[-1] % 16 == 0


def k_major_panels(dtype, bk: int) -> bool:
    """Whether a K-major operand with `bk` columns is stored in 64-column panels ([bk/64][rows][64], each a
    128-byte-swizzled tile): 16-bit rows longer than the 128 bytes one swizzle atom spans (head dim 128)."""
    return elem_bytes(dtype) == 2 and bk > 64 and bk % 64 == 0


def read_as_panels(call) -> tuple[bool, bool]:
    """Whether a wgmma T.gemm's descriptors read its A and its B as 64-column panels: an MN-major operand
    ([K, M] A, [K, N] B) and a K-major one of more than 128-byte rows (`k_major_panels`). The plan stores such
    tiles so (plan._add_panels) and the emitter checks it (emit/wgmma.py)."""
    a, b = (region_of(call.args[i])[0] for i in (1, 2))
    bk = gemm_k(call)
    return (bool(call.args[4]) or k_major_panels(a.dtype, bk),
            not bool(call.args[5]) or k_major_panels(b.dtype, bk))


def elem_bytes(dtype) -> int:
    return 1 if WGMMA_TYPES.get(str(dtype)) in EIGHT_BIT else 2

# Operand dtypes the CUDA-core path multiplies (converted to the accumulator's register dtype first).
FMA_INPUTS = ("float16", "bfloat16", "float32", "float64")
_TENSOR_CORE_FLOATS = ("float16", "bfloat16")


def fma_gemm(call) -> bool:
    """Whether this `T.gemm` runs on the CUDA cores: float operands and accumulator, and not the
    tensor cores' case (A and B both float16 or both bfloat16 into a float32 / 16-bit
    accumulator), and not a TF32 product."""
    if is_tf32(call):
        return False
    c, a, b = (str(region_of(call.args[i])[0].dtype) for i in range(3))
    if a not in FMA_INPUTS or b not in FMA_INPUTS or c not in FMA_INPUTS:
        return False
    return not (a == b and a in _TENSOR_CORE_FLOATS and c != "float64")


FP8_FLOATS = ("float8_e4m3fn", "float8_e5m2")
INT8S = ("int8", "uint8")


def eight_bit_gemm(call) -> bool:
    """8-bit float A and B (e4m3 / e5m2, mixed allowed) into a float accumulator, or 8-bit integer ones
    (int8 / uint8, mixed) into an int32 one: wgmma where the plan gives the accumulator wgmma's layout, FMAs
    on the CUDA cores otherwise (each 8-bit value converts exactly to the accumulator's registers, float32 or
    int32, and so does each product); tile_nb emits no mma.sync for 8-bit inputs."""
    if is_tf32(call):
        return False
    c, a, b = (str(region_of(call.args[i])[0].dtype) for i in range(3))
    if a in FP8_FLOATS and b in FP8_FLOATS:
        return c in FMA_INPUTS
    return a in INT8S and b in INT8S and c == "int32"


def eight_bit_fma_reason(call, target, threads, use_wgmma: bool) -> str:
    """Why an 8-bit T.gemm (`eight_bit_gemm`) runs on the CUDA cores, for the plan's note."""
    if not use_wgmma:
        return "wgmma is off (tile_nb.wgmma / TILE_NB_WGMMA)"
    return wgmma_refusal(target, call, threads) or (
        "another T.gemm into the same accumulator cannot run on wgmma (one register layout serves both)"
    )


def is_tf32(call) -> bool:
    """A `T.gemm` with a T.tfloat32 operand (`T.tile.gemm(..., tf32=1)`): TF32
    tensor-core MMAs (tf32_gemm.py)."""
    return bool(int((call.config or {}).get("tf32", 0)))


def gemm_kind(call, acc) -> GemmKind:
    """The instruction of one T.gemm, given its accumulator's layout `acc` (chosen by the first T.gemm into
    it): by this call's operands first (FMAs work in any register layout: each thread computes the registers
    it holds), then by the layout. Raises LoweringError for a TF32 product into a wgmma accumulator."""
    if fma_gemm(call) or (eight_bit_gemm(call) and not isinstance(acc, WgmmaAccLayout)):
        return GemmKind.FMA
    if is_tf32(call):
        if isinstance(acc, WgmmaAccLayout):  # plan._choose_mma keeps these off wgmma (defensive)
            c = region_of(call.args[0])[0]
            raise LoweringError(
                f"T.gemm in TF32 into {c.name}: an earlier T.gemm into it runs on wgmma, whose "
                "accumulator layout mma.sync .tf32 cannot add to; accumulate the TF32 product in its "
                "own fragment and add the two in a T.Parallel loop"
            )
        return GemmKind.TF32
    return GemmKind.WGMMA if isinstance(acc, WgmmaAccLayout) else GemmKind.MMA_SYNC
