"""Grouped-query FlashAttention forward: `flash_attention_gqa` of tests/kernels/reference.py
(unchanged source: HK KV heads shared by H query heads, a T.dynamic sequence length, fp16 or
bf16) vs torch.nn.functional.scaled_dot_product_attention(..., enable_gqa=True) on the same
inputs, same run, same timing.

    python benchmarks/attention_gqa.py [--shapes 1,32,8,8192 4,32,8,4096] [--dims 128 64] [--dtypes fp16 bf16]
                                       [--out r.json]

A shape is B,H,HK,S. TFLOP/s = 4 B H S^2 D / time (halved for causal). Each output is checked against SDPA
first (max abs error). tile_nb is the best of benchmarks/attention.py's CONFIGS.
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import torch
import torch.nn.functional as F

ROOT = __file__.rsplit("/benchmarks/", 1)[0]
sys.path[:0] = [ROOT, ROOT + "/tests", ROOT + "/benchmarks"]
from attention import CONFIGS  # noqa: E402 - benchmarks/attention.py: the same (block_M, block_N, threads, stages)
from kernels import reference as ref  # noqa: E402

import tile_nb.language as T  # noqa: E402
from tile_nb.bench.timing import do_bench  # noqa: E402

DTYPES = {"fp16": (torch.float16, T.float16), "bf16": (torch.bfloat16, T.bfloat16)}


def bench_tile_nb(q, k, v, o, dtype, causal: bool, expected):
    """(seconds, max abs error, config) of the fastest configuration that builds, or None."""
    best = None
    for cfg in CONFIGS:
        try:
            o.fill_(float("nan"))
            ref.flash_attention_gqa(q, k, v, o, dtype=dtype, causal=causal, **cfg)
            torch.cuda.synchronize()
        except Exception as exc:  # noqa: BLE001 - a configuration that does not build is reported
            print(f"  {cfg}: {type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}")
            continue
        err = (o.float() - expected.float()).abs().max().item()
        t = do_bench(lambda cfg=cfg: ref.flash_attention_gqa(q, k, v, o, dtype=dtype, causal=causal, **cfg),
                     warmup_ms=10, rep_ms=60).median_ms * 1e-3
        if best is None or t < best[0]:
            best = (t, err, cfg)
    return best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", nargs="+", default=["1,32,8,8192"], help="B,H,HK,S (HK divides H)")
    ap.add_argument("--dims", type=int, nargs="+", default=[128, 64])
    ap.add_argument("--dtypes", nargs="+", default=["fp16", "bf16"], choices=list(DTYPES))
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    info = {
        "device": torch.cuda.get_device_name(),
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "torch": torch.__version__,
    }
    print(f"device: {info['device']}  date: {info['date']}  torch: {info['torch']}")
    rows = []
    for shape in args.shapes:
        b, h, hk, s = (int(x) for x in shape.split(","))
        if h % hk:
            raise SystemExit(f"--shapes {shape}: KV heads ({hk}) must divide query heads ({h})")
        for d in args.dims:
            for dtype_name in args.dtypes:
                torch_dtype, dtype = DTYPES[dtype_name]
                q = torch.randn(b, h, s, d, device="cuda", dtype=torch_dtype)
                k, v = (torch.randn(b, hk, s, d, device="cuda", dtype=torch_dtype) for _ in range(2))
                o = torch.empty_like(q)
                for causal in (False, True):
                    flop = 4.0 * b * h * s * s * d * (0.5 if causal else 1.0)

                    def sdpa(causal=causal):
                        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)

                    expected = sdpa()
                    t_sdpa = do_bench(sdpa, warmup_ms=10, rep_ms=60).median_ms * 1e-3
                    best = bench_tile_nb(q, k, v, o, dtype, causal, expected)
                    expected = None
                    row = dict(batch=b, heads=h, kv_heads=hk, seq=s, dim=d, dtype=dtype_name, causal=causal,
                               sdpa_tflops=flop / t_sdpa / 1e12, tflops=None, max_abs_err=None, config=None,
                               vs_sdpa=None)
                    if best is not None:
                        row.update(tflops=flop / best[0] / 1e12, max_abs_err=best[1], config=best[2],
                                   vs_sdpa=t_sdpa / best[0])
                    rows.append(row)
                    nan = float("nan")
                    print(
                        f"b{b} h{h} hk{hk} s{s} d{d} {dtype_name} causal={causal!s:5}: tile_nb "
                        f"{nan if best is None else row['tflops']:6.1f} TFLOP/s ({row['config']}, err "
                        f"{nan if best is None else row['max_abs_err']:.1e})  sdpa "
                        f"{row['sdpa_tflops']:6.1f}  "
                        f"x{nan if best is None else row['vs_sdpa']:.2f}"
                    )
                q = k = v = o = None  # free before the next shape
    print()
    print(
        f"{'B':>3} {'H':>3} {'HK':>3} {'S':>6} {'D':>4} {'dtype':>5} {'causal':>6} {'tile_nb':>8} "
        f"{'sdpa':>8} "
        f"{'x sdpa':>7} {'err':>8}  config"
    )
    for r in rows:
        tf = "-" if r["tflops"] is None else f"{r['tflops']:.1f}"
        x = "-" if r["vs_sdpa"] is None else f"{r['vs_sdpa']:.2f}"
        err = "-" if r["max_abs_err"] is None else f"{r['max_abs_err']:.1e}"
        print(
            f"{r['batch']:>3} {r['heads']:>3} {r['kv_heads']:>3} {r['seq']:>6} {r['dim']:>4} {r['dtype']:>5} "
            f"{r['causal']!s:>6} {tf:>8} {r['sdpa_tflops']:>8.1f} {x:>7} {err:>8}  {r['config']}"
        )
    if args.out:
        with open(args.out, "w") as fh:
            json.dump({"info": info, "rows": rows}, fh, indent=1)


if __name__ == "__main__":
    main()
