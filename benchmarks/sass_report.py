"""What the hot loops become in SASS: the instruction mix of the sm_90a kernels that the GEMM and
FlashAttention benchmarks time, from the cubin nvcc builds (no GPU needed; cuobjdump or nvdisasm on PATH, e.g.
the copies in Triton's wheel under triton/backends/nvidia/bin).

    python benchmarks/sass_report.py [--out benchmarks/results/sass.md]

Per kernel: ptxas registers and spills, and counts of the instructions that say the schedule is what the plan
claims: HGMMA (wgmma), UTMALDG (TMA loads), SYNCS (mbarriers), BAR (CTA / named barriers), LDGSTS (cp.async),
STL / LDL (local memory: spills).
"""
from __future__ import annotations

import argparse
import collections
import re
import sys
import time

ROOT = __file__.rsplit("/benchmarks/", 1)[0]
sys.path[:0] = [ROOT, ROOT + "/tests"]
from kernels import reference as ref  # noqa: E402
from kernels.seed import gemm_fp8, gemm_ir  # noqa: E402

from tile_nb.runtime import compile as rt_compile  # noqa: E402

FAMILIES = ("HGMMA", "QGMMA", "IGMMA", "UTMALDG", "UTMASTG", "SYNCS", "BAR", "LDGSTS", "HMMA", "STL", "LDL")

KERNELS = {
    "GEMM fp16 128x256x64, 256 threads, 4 stages (8192^3)": lambda: gemm_ir(
        8192, 8192, 8192, block_N=256, block_K=64, threads=256, num_stages=4, out_dtype="float16"
    ),
    "GEMM fp16 seed 128x128x32, 128 threads (8192^3)": lambda: gemm_ir(8192, 8192, 8192),
    "GEMM fp8 e4m3 128x256x128, 256 threads, 4 stages (8192^3)": lambda: gemm_fp8.specialize(
        M=8192, N=8192, K=8192, block_N=256, block_K=128, threads=256, num_stages=4
    ),
    "FlashAttention hd128 128x128, 256 threads (4x32x4096)": lambda: ref.flash_attention.specialize(
        B=4, H=32, S=4096, D=128, block_M=128, block_N=128, threads=256
    ),
    "FlashAttention hd64 64x128, 128 threads (4x32x4096)": lambda: ref.flash_attention.specialize(
        B=4, H=32, S=4096, D=64, block_M=64, block_N=128
    ),
}


def instruction_mix(sass: str) -> dict:
    """Counts of the instruction families above in a SASS listing (an opcode is counted under the family it
    starts with: `HGMMA.64x256x16.F32` is HGMMA)."""
    opcodes = re.findall(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)", sass)
    counts = collections.Counter(opcodes)
    return {f: counts.get(f, 0) for f in FAMILIES}


def between_mmas(sass: str) -> list[list[str]]:
    """The opcodes between each warpgroup MMA and the next one of the same group (the first not ending its
    group with `gsb0`): the per-MMA overhead of issuing a k-tile's MMAs, such as descriptor arithmetic."""
    lines = re.findall(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)([^;]*);", sass)
    gaps, current = [], None
    for opcode, operands in lines:
        if opcode.split(".")[0] in ("HGMMA", "QGMMA", "IGMMA"):
            if current is not None:
                gaps.append(current)
            current = None if "gsb0" in operands else []
        elif current is not None:
            current.append(opcode.split(".")[0])
    return gaps


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    rows = []
    for name, make in KERNELS.items():
        kernel = rt_compile(make(), "sm_90a", options={"cache": False})
        if kernel.sass is None:
            sys.exit("no disassembler (cuobjdump or nvdisasm) on PATH")
        res = kernel.resources
        rows.append((name, res, instruction_mix(kernel.sass), kernel.plan["pipeline"]))
    lines = [
        f"Built {time.strftime('%Y-%m-%d')} for sm_90a with `python benchmarks/sass_report.py` (nvcc on this "
        "machine; static counts in the whole kernel, not executed counts).",
        "",
        "| kernel | registers | spill bytes | " + " | ".join(FAMILIES) + " |",
        "| --- | --- | --- | " + " | ".join("---" for _ in FAMILIES) + " |",
    ]
    for name, res, mix, _ in rows:
        lines.append(f"| {name} | {res.registers} | {res.spill_stores + res.spill_loads} | "
                     + " | ".join(str(mix[f]) for f in FAMILIES) + " |")
    lines += ["", "Pipelines (the plan's words):"] + [
        f"- {name}: {pipeline}" for name, _, _, pipeline in rows
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(text)


if __name__ == "__main__":
    main()
