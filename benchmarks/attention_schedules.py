"""What each schedule of the FlashAttention loop brings: the same kernel and configuration compiled with
lowering switches on and off, timed in interleaved rounds (one round times every variant once; median of the
rounds), so that drifting clocks and power caps hit every variant alike.

    python benchmarks/attention_schedules.py [--shape 4,32,4096] [--dims 64 128] [--rounds 7]
                                             [--variants default ...] [--out r.json]

Variants (environment switches of tile_nb.lower, read when a kernel compiles): the default, the loop in order
(no softmax/MMA overlap, TILE_NB_SOFTMAX_OVERLAP=0), ping-pong (TILE_NB_PINGPONG=1), cp.async instead of TMA
(TILE_NB_TMA=0), TMA wherever legal (TILE_NB_TMA=1), causal CTAs heaviest first in groups of heads
(TILE_NB_HEAVY_FIRST=1, the default) or in launch order (TILE_NB_HEAVY_FIRST=0), TMA loads issued by
the first consumer thread instead of a producer warp (TILE_NB_PRODUCER_WARP=0). Each variant is its
own `tile_nb.jit` of the reference kernel, compiled under its switches at its first call (the JIT keeps one
kernel per call).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch
import torch.nn.functional as F

ROOT = __file__.rsplit("/benchmarks/", 1)[0]
sys.path[:0] = [ROOT, ROOT + "/tests"]
from kernels import reference as ref  # noqa: E402

import tile_nb  # noqa: E402
from tile_nb.bench.timing import do_bench  # noqa: E402

VARIANTS = {
    "default": {},
    "in-order": {"TILE_NB_SOFTMAX_OVERLAP": "0"},
    "ping-pong": {"TILE_NB_PINGPONG": "1"},
    "cp.async": {"TILE_NB_TMA": "0"},
    "tma": {"TILE_NB_TMA": "1"},
    "heavy-first": {"TILE_NB_HEAVY_FIRST": "1"},
    "launch-order": {"TILE_NB_HEAVY_FIRST": "0"},
    "tma-inline": {"TILE_NB_PRODUCER_WARP": "0"},  # TMA loads issued by the first consumer thread
    # a producer warp (cp.async where two CTAs fit an SM)
    "producer-warp": {"TILE_NB_PRODUCER_WARP": "1"},
}
CONFIG = dict(block_M=128, block_N=128, num_stages=2, threads=256)


def compiled_variant(switches: dict, *args, **kwargs):
    """A fresh JIT of the reference kernel with the lowering options `switches` spell (TILE_NB_* variables,
    read as tile_nb.LoweringOptions fields: the kernel's own options), called once on these arguments, and the
    pipeline note of the kernel compiled then."""
    kernel = tile_nb.jit(ref.flash_attention.fn, options=tile_nb.LoweringOptions.from_environment(switches))
    kernel(*args, **kwargs)
    torch.cuda.synchronize()
    pipeline = kernel.compile(*args, **kwargs).pipeline  # the same specialization, options and facts
    return kernel, pipeline or ""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="4,32,4096")
    ap.add_argument("--dims", type=int, nargs="+", default=[64, 128])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    ap.add_argument("--config", default=None, help=f"block_M,block_N,threads,num_stages (default: {CONFIG})")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    if args.config:
        CONFIG.update(
            zip(
                ("block_M", "block_N", "threads", "num_stages"),
                (int(x) for x in args.config.split(",")),
                strict=True,
            )
        )
    b, h, s = (int(x) for x in args.shape.split(","))
    info = {
        "device": torch.cuda.get_device_name(),
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "torch": torch.__version__,
        "config": CONFIG,
        "rounds": args.rounds,
    }
    print(f"device: {info['device']}  date: {info['date']}  {CONFIG}")
    rows = []
    for d in args.dims:
        q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.float16) for _ in range(3))
        o = torch.empty_like(q)
        for causal in (False, True):
            flop = 4.0 * b * h * s * s * d * (0.5 if causal else 1.0)
            expected = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            variants = {name: VARIANTS[name] for name in args.variants}
            kernels, times = {}, {name: [] for name in variants}
            for name, switches in variants.items():
                kernels[name], pipeline = compiled_variant(switches, q, k, v, o, causal=causal, **CONFIG)
                err = (o.float() - expected.float()).abs().max().item()
                print(f"  d{d} causal={causal} {name}: max abs err {err:.1e}; {pipeline[:100]}")
            times["sdpa"] = []
            for _ in range(args.rounds):
                for name, f in kernels.items():
                    times[name].append(do_bench(lambda f=f: f(q, k, v, o, causal=causal, **CONFIG),
                                                warmup_ms=5, rep_ms=40).median_ms)
                times["sdpa"].append(
                    do_bench(
                        lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal),
                        warmup_ms=5,
                        rep_ms=40,
                    ).median_ms
                )
            row = dict(batch=b, heads=h, seq=s, dim=d, causal=causal)
            for name, ts in times.items():
                row[name] = dict(tflops=flop / statistics.median(ts) / 1e9,
                                 spread=(max(ts) - min(ts)) / statistics.median(ts))
            rows.append(row)
            print(f"d{d} causal={causal!s:5}: " + "  ".join(
                f"{n} {row[n]['tflops']:6.1f} (+-{row[n]['spread'] * 50:.0f}%)" for n in times))
        q = k = v = o = None
    if args.out:
        with open(args.out, "w") as fh:
            json.dump({"info": info, "rows": rows}, fh, indent=1)


if __name__ == "__main__":
    main()
