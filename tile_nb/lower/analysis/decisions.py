"""Typed facts the lowering's analyses return besides their plans: what a step declined, and why, as a value.

A `Refusal` is one analysis saying no: its `code` is what code reads ("tma.two_ctas_per_sm": plan.py counts
two CTAs per SM on it), its `text` is what people read (the plan's pipeline note, rendered by
plan.render_pipeline_note). Codes are `<area>.<reason>`, the area one of AREAS; code never matches the text.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

__all__ = ["AREAS", "PipelineKind", "Refusal", "TWO_CTAS_PER_SM"]

AREAS = ("tma", "persistent", "cluster", "stream_k", "tma_store")


class PipelineKind(str, Enum):
    """How a kernel's T.Pipelined loop was built."""

    TMA = "tma"  # warp-specialized: TMA loads and mbarriers (tma.py)
    CP_ASYNC = "cp.async"  # every thread issues its share of cp.async copies (pipeline.py)


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
