"""Where the FlashAttention backward's time goes (GPU): each kernel of attention_backward
(tests/kernels/attention_backward.py) timed alone: the Delta preprocess, the dK/dV kernel and the dQ kernel.

    python benchmarks/attention_bwd_parts.py     # B=4 H=32 S=4096 fp16, head dims 64 and 128, causal and not

One JSON line per case: [ms, TFLOP/s] per kernel (the dK/dV kernel's 4 GEMMs count 2x the forward's
4 B H S^2 D, the dQ kernel's 3 count 1.5x; halved for causal). Results: benchmarks/results/backward.md."""
import json
import os
import sys

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]
from kernels import attention_backward as ab  # noqa: E402

from tile_nb.bench.timing import do_bench  # noqa: E402


def case(D: int, causal: bool, B: int = 4, H: int = 32, S: int = 4096) -> dict:
    torch.manual_seed(0)
    q, k, v, dO = (torch.randn(B, H, S, D, dtype=torch.float16, device="cuda") for _ in range(4))
    O, LSE = ab.flash_attention_fwd(q, k, v, causal=causal)
    Delta = ab.attention_bwd_preprocess(O, dO)
    forward_flops = 4 * B * H * S * S * D * (0.5 if causal else 1.0)
    row = dict(D=D, causal=causal)
    for name, fn, share in (
        ("preprocess", lambda: ab.attention_bwd_preprocess(O, dO), 0.0),
        ("dK, dV", lambda: ab.attention_bwd_dkdv(q, k, v, dO, LSE, Delta, causal=causal), 2.0),
        ("dQ", lambda: ab.attention_bwd_dq(q, k, v, dO, LSE, Delta, causal=causal), 1.5),
    ):
        ms = do_bench(fn).median_ms
        row[name] = [round(ms, 3), round(share * forward_flops / ms / 1e9, 1)]
    return row


def main():
    for D in (64, 128):
        for causal in (False, True):
            print(json.dumps(case(D, causal)), flush=True)


if __name__ == "__main__":
    main()
