"""Typed facts the lowering's analyses return besides their plans: what a step declined, and why, as a value.

A `Refusal` is one analysis saying no: its `code` is what code reads ("tma.two_ctas_per_sm": plan.py counts
two CTAs per SM on it), its `text` is what people read (the plan's pipeline note, rendered by
plan.render_pipeline_note). Codes are `<area>.<reason>`, the area one of AREAS; code never matches the text.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

__all__ = ["AREAS", "GemmKind", "PipelineKind", "Refusal", "TWO_CTAS_PER_SM"]

AREAS = ("tma", "persistent", "cluster", "stream_k", "tma_store")


class PipelineKind(str, Enum):
    """How a kernel's T.Pipelined loop was built."""

    TMA = "tma"  # warp-specialized: TMA loads and mbarriers (tma.py)
    CP_ASYNC = "cp.async"  # every thread issues its share of cp.async copies (pipeline.py)


class GemmKind(str, Enum):
    """Which instruction one T.gemm runs on (mma.py's `gemm_kind`, the plan's `gemms`; emit/gemm.py follows
    it)."""

    WGMMA = "wgmma"  # Hopper wgmma, asynchronous, into a WgmmaAccLayout (emit/wgmma.py)
    MMA_SYNC = "mma.sync"  # mma.sync m16n8k16 (two m16n8k8 on sm_75) on 16-bit inputs (emit/gemm.py)
    FMA = "fma"  # float32 / float64 (8-bit ones off wgmma) products by FMA on the CUDA cores (fma_gemm.py)
    TF32 = "tf32"  # T.tfloat32 operands: mma.sync m16n8k8 .tf32 (emit/tf32_gemm.py)


@dataclass(frozen=True)
class Refusal:
    """An analysis declined to build something: `code` (`<area>.<reason>`) for code, `text` for people."""

    code: str
    text: str

    @property
    def area(self) -> str:
        return self.code.split(".", 1)[0]

    def to_dict(self) -> dict:
        return {"code": self.code, "text": self.text}


# tma.py: cp.async kept where two CTAs of a loop with several T.gemm share an SM
# (then the launch bounds promise 2)
TWO_CTAS_PER_SM = "tma.two_ctas_per_sm"
