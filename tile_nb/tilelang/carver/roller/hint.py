"""`tilelang.carver.roller.Hint` on tile_nb: one recommended GEMM tiling, with tilelang's field names
(`block`, `warp`, `rstep`, `pipeline_stage`, `rasterization_plan`, `use_tc`) and what tile_nb's heuristic
(tile_nb/tilelang/carver/gemm_hints.py) worked out for it: threads, shared memory, registers, waves and its
estimated time."""
from __future__ import annotations

from dataclasses import dataclass, field

from .rasterization import NoRasterization, Rasterization

__all__ = ["Hint"]


@dataclass
class Hint:
    block: list = field(default_factory=list)      # [block_M, block_N]
    warp: list = field(default_factory=list)       # [warp_M, warp_N]: the tile one warp computes
    rstep: list = field(default_factory=list)      # [block_K]
    pipeline_stage: int = 1
    rasterization_plan: Rasterization = field(default_factory=NoRasterization)
    use_tc: bool = True
    threads: int = 128
    instruction: str = ""                          # "wgmma" or "mma.sync" (what tile_nb's lowering emits)
    shared_bytes: int = 0                          # A and B stages plus the output tile, 1 KiB-aligned
    registers: int = 0                             # accumulator registers per thread
    ctas_per_sm: int = 1
    waves: int = 1
    estimated_ms: float | None = None              # the heuristic's model; None without the device's peaks
    arch: object = None

    @property
    def thread(self) -> list:
        """Threads per block as tilelang's non-tensor-core hints give them (a list)."""
        return [self.threads]

    @property
    def block_reduction_depth(self):
        return None

    def to_dict(self) -> dict:
        out = {"block": list(self.block), "warp": list(self.warp), "rstep": list(self.rstep),
               "use_tc": self.use_tc, "threads": self.threads}
        if self.pipeline_stage != 1:
            out["pipeline_stage"] = self.pipeline_stage
        return out

    def config(self) -> dict:
        """The keywords of tilelang's GEMM examples: block_M, block_N, block_K, num_stages, thread_num."""
        return {"block_M": self.block[0], "block_N": self.block[1], "block_K": self.rstep[0],
                "num_stages": self.pipeline_stage, "thread_num": self.threads}

    def __repr__(self) -> str:
        est = f", ~{self.estimated_ms:.3g} ms" if self.estimated_ms is not None else ""
        return (f"Hint(block={self.block}, warp={self.warp}, rstep={self.rstep}, "
                f"pipeline_stage={self.pipeline_stage}, threads={self.threads}, {self.instruction}, "
                f"shared {self.shared_bytes // 1024} KiB, {self.registers} acc regs/thread, "
                f"{self.ctas_per_sm} CTA/SM, {self.waves} waves{est})")
