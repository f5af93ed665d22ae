"""Where the FlashAttention backward's time goes (GPU): attention_bwd (tests/kernels/attention_backward.py)
against variants made by editing its source text: the dQ atomics replaced by plain stores, and dQ's GEMM
and atomics left out (both give wrong results: timing only); then the preprocess kernel, dQ's zeroing and
its cast.

    python benchmarks/attention_bwd_parts.py     # B=4 H=32 S=4096 fp16, head dims 64 and 128, causal and not

One JSON line per case: [ms, TFLOP/s counting 2.5x the forward's 4 B H S^2 D, halved for causal] per variant.
Results: benchmarks/results/backward.md."""
import importlib.util
import json
import os
import sys
import tempfile

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]
from kernels import attention_backward as ab  # noqa: E402

from tile_nb.bench.timing import do_bench  # noqa: E402

SRC = open(os.path.join(ROOT, "tests", "kernels", "attention_backward.py")).read()
ATOMIC = """            for i, j in T.Parallel(block_M, D):
                if m * block_M + i < S:
                    T.atomic_add(dQ[bz, h, m * block_M + i, j], dq[i, j])
"""
assert ATOMIC in SRC
DQ_GEMM = """            T.clear(dq)
            T.gemm(dS_s, K_s, dq, transpose_A=True)           # dQ = dS K
"""
assert DQ_GEMM in SRC
VARIANTS = {
    "default": SRC,
    "dq stored, no atomics": SRC.replace(ATOMIC, "            T.copy(dq, dQ[bz, h, m * block_M, 0])\n"),
    "no dq at all": SRC.replace(ATOMIC, "").replace(DQ_GEMM, ""),
}


def load(name, text):
    """The kernel module with `text` as its source (tile_nb reads a kernel's source from its file)."""
    path = os.path.join(tempfile.mkdtemp(), f"variant_{abs(hash(name))}.py")
    with open(path, "w") as f:
        f.write(text)
    spec = importlib.util.spec_from_file_location(os.path.basename(path)[:-3], path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def case(D: int, causal: bool, B: int = 4, H: int = 32, S: int = 4096) -> dict:
    torch.manual_seed(0)
    q, k, v, dO = (torch.randn(B, H, S, D, dtype=torch.float16, device="cuda") for _ in range(4))
    O, LSE = ab.flash_attention_fwd(q, k, v, causal=causal)
    Delta = ab.attention_bwd_preprocess(O, dO)
    dQ = torch.zeros(q.shape, dtype=torch.float32, device="cuda")
    flops = 2.5 * 4 * B * H * S * S * D * (0.5 if causal else 1.0)
    row = dict(D=D, causal=causal)
    for name, text in VARIANTS.items():
        try:
            mod = load(name, text)
            kernel = mod.attention_bwd
            ms = do_bench(lambda kernel=kernel: kernel(q, k, v, dO, LSE, Delta, dQ, causal=causal)).median_ms
            row[name] = [round(ms, 3), round(flops / ms / 1e9, 1)]
        except Exception as exc:  # noqa: BLE001 - one variant's failure is reported, the others still run
            row[name] = f"{type(exc).__name__}: {exc}"[:200]
    parts = (lambda: ab.attention_bwd_preprocess(O, dO), dQ.zero_, lambda: dQ.to(torch.float16))
    row["preprocess, zero, cast ms"] = [round(do_bench(fn).median_ms, 3) for fn in parts]
    return row


def main():
    for D in (64, 128):
        for causal in (False, True):
            print(json.dumps(case(D, causal)), flush=True)


if __name__ == "__main__":
    main()
