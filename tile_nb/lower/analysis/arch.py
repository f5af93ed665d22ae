"""What each CUDA architecture offers the lowering: one frozen value per arch,
read by the plan and the emitters.

    caps = ArchCaps.of("sm_75")
    caps.cp_async, caps.mma_k16   # False, False
    caps.lacks("cp_async")        # "sm_75 lacks cp.async (...), which needs sm_80 or newer"

tile_nb builds for sm_75 (Turing) and newer; the paths by architecture (docs/architectures.md):
- sm_90a: wgmma, TMA pipelines, clusters, persistent CTAs (the H200, measured and GPU-tested);
- sm_80 and newer: mma.sync m16n8k16 with ldmatrix, cp.async pipelines (compile-tested; sm_100a and sm_120
  take this path too, no tcgen05);
- sm_75: no bfloat16 and no 8-bit floats; mma.sync m16n8k8 (two per m16n8k16 step, float16) with ldmatrix, and
  global->shared copies as plain loads and stores (cp.async is sm_80): a `T.Pipelined` loop keeps its stages,
  but a copy completes before the next instruction of its thread, so loads overlap the MMAs only across warps.
What a target lacks is refused with a LoweringError at the user's line that names the arch and the instruction
(`refuse`), never left to ptxas. Facts from the PTX ISA (9.0, "Target ISA notes" of each instruction) and the
CUDA C Programming Guide's table of compute capabilities.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["KNOWN_SM", "MIN_SM", "ArchCaps", "UnsupportedArchError", "parse_arch"]

MIN_SM = 75
# The compute capabilities nvcc 13.0 builds (`nvcc --list-gpu-code`); 'a' / 'f' variants of 90 and up too.
KNOWN_SM = (75, 80, 86, 87, 88, 89, 90, 100, 103, 110, 120, 121)

_ARCH = re.compile(r"^sm_(\d+)([af]?)$")

# Dynamic shared memory a block may opt into, by compute capability (CUDA C Programming Guide, "Features and
# Technical Specifications"); budget.py reads it.
SHARED_PER_BLOCK = {
    70: 96 * 1024,
    72: 48 * 1024,
    75: 64 * 1024,
    80: 163 * 1024,
    86: 99 * 1024,
    87: 163 * 1024,
    88: 99 * 1024,
    89: 99 * 1024,
    90: 227 * 1024,
    100: 227 * 1024,
    103: 227 * 1024,
    110: 227 * 1024,
    120: 99 * 1024,
    121: 99 * 1024,
}

# feature -> (the first compute capability that has it, what it is, for messages)
_FEATURES = {
    "mma_k16": (80, "mma.sync m16n8k16 (sm_75 has m16n8k8 for float16 only)"),
    "bf16": (80, "bfloat16 (conversions, arithmetic and tensor-core MMAs)"),
    "cp_async": (80, "cp.async (asynchronous global->shared copies)"),
    "tf32": (80, "TF32 tensor-core MMAs (mma.sync m16n8k8 .tf32, cvt.rna.tf32.f32)"),
    "fp8": (89, "8-bit float types (e4m3 / e5m2 conversions and MMAs)"),
}


class UnsupportedArchError(ValueError):
    """An architecture tile_nb does not build for (older than sm_75, or not a CUDA arch nvcc knows)."""


def parse_arch(text: str, where: str = "") -> tuple[int, str]:
    """`"sm_90a"` -> (90, "a"); anything else tile_nb cannot build for raises UnsupportedArchError naming it
    (and `where` it came from, e.g. "TILE_NB_ARCH")."""
    said = f"unsupported CUDA arch {str(text)!r}" + (f" ({where})" if where else "")
    m = _ARCH.match(str(text).strip())
    if not m:
        raise UnsupportedArchError(f"{said}: expected sm_XY (a cubin for that GPU, e.g. sm_80, sm_90a) or "
                                   f"compute_XY (PTX the driver compiles for any newer GPU, e.g. compute_80)")
    sm, variant = int(m.group(1)), m.group(2)
    if sm < MIN_SM:
        raise UnsupportedArchError(
            f"{said}: tile_nb builds for sm_{MIN_SM} (Turing: T4, RTX 20) and newer; older GPUs lack the "
            "tensor-core instructions its T.gemm uses (mma.sync m16n8k8 and ldmatrix), and CUDA "
            "13 builds no "
            f"code for them"
        )
    if sm not in KNOWN_SM:
        raise UnsupportedArchError(f"{said}: not a CUDA architecture nvcc 13 builds; known: "
                                   + ", ".join(f"sm_{n}" for n in KNOWN_SM))
    if variant and sm < 90:
        raise UnsupportedArchError(f"{said}: the 'a' / 'f' variants exist from sm_90 on; use sm_{sm}")
    return sm, variant


@dataclass(frozen=True)
class ArchCaps:
    """The instructions and limits of one architecture that change what the lowering emits."""

    arch: str      # "sm_90a"
    sm: int        # 90
    variant: str   # "a" (arch-specific: wgmma, setmaxnreg), "f" (family), or ""

    @classmethod
    def of(cls, arch: str) -> ArchCaps:
        sm, variant = parse_arch(arch)
        return cls(str(arch), sm, variant)

    # ---- features ------------------------------------------------------------------------------------------
    @property
    def mma_k16(self) -> bool:
        return self.sm >= _FEATURES["mma_k16"][0]

    @property
    def bf16(self) -> bool:
        """bfloat16 in the hardware (cvt .bf16, mma.sync .bf16); TVM's CUDA code declares nv_bfloat16 only for
        such targets, so below sm_80 a bfloat16 kernel would not even compile."""
        return self.sm >= _FEATURES["bf16"][0]

    @property
    def cp_async(self) -> bool:
        return self.sm >= _FEATURES["cp_async"][0]

    @property
    def tf32(self) -> bool:
        return self.sm >= _FEATURES["tf32"][0]

    @property
    def fp8(self) -> bool:
        return self.sm >= _FEATURES["fp8"][0]

    @property
    def wgmma(self) -> bool:
        """Hopper warpgroup MMAs (and with them tile_nb's TMA pipelines): sm_90a only; Blackwell has tcgen05
        instead, which tile_nb does not build (sm_100a takes the mma.sync path)."""
        return self.sm == 90 and self.variant == "a"

    @property
    def max_shared_bytes(self) -> int:
        return SHARED_PER_BLOCK[max(cc for cc in SHARED_PER_BLOCK if cc <= self.sm)]

    def lacks(self, feature: str) -> str:
        """`"sm_75 lacks cp.async (...), which needs sm_80 or newer"` (for messages)."""
        first, what = _FEATURES[feature]
        return f"{self.arch} lacks {what}, which needs sm_{first} or newer"
