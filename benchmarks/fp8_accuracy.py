"""How precisely 8-bit float GEMMs accumulate on this GPU: tile_nb's `gemm_fp8` (default and `precise_accum`)
and torch._scaled_mm (cuBLAS, with and without `use_fast_accum`), float32 output, against a float64 product.

    python benchmarks/fp8_accuracy.py [--k 256 1024 4096 16384] [--out results.json]

The error of each element is measured against sum_k |a_ik b_jk| (what bounds any summation error), and the
worst and median ratios are printed: docs/IR.md's fp8 bound comes from this table.
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import torch

ROOT = __file__.rsplit("/benchmarks/", 1)[0]
sys.path[:0] = [ROOT, ROOT + "/tests"]
from kernels.seed import gemm_fp8  # noqa: E402

import tile_nb.language as T  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--k", nargs="+", type=int, default=[256, 1024, 4096, 16384])
    ap.add_argument("--mn", type=int, default=1024)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    print(f"device: {torch.cuda.get_device_name()}  date: {time.strftime('%Y-%m-%d %H:%M')}  "
          f"M = N = {args.mn}, e4m3 x e4m3 -> float32, |err| / sum|a b|")
    torch.manual_seed(0)
    rows = []
    m = n = args.mn
    for k in args.k:
        a = (torch.randn(m, k, device="cuda") * 3).to(torch.float8_e4m3fn)
        b = (torch.randn(n, k, device="cuda") * 3).to(torch.float8_e4m3fn)
        sa, sb = torch.tensor([0.37], device="cuda"), torch.tensor([1.9], device="cuda")
        ref = (a.double() @ b.double().T) * (0.37 * 1.9)
        magnitude = (a.double().abs() @ b.double().abs().T) * (0.37 * 1.9)
        results = {}
        for name, precise in (("tile_nb default", False), ("tile_nb precise_accum", True)):
            c = torch.empty(m, n, device="cuda")
            gemm_fp8(
                a, b, c, sa, sb, out_dtype=T.float32, precise_accum=precise, block_N=128 if precise else 256
            )
            results[name] = c
        for fast in (False, True):
            results[f"torch._scaled_mm fast_accum={fast}"] = torch._scaled_mm(
                a, b.T, scale_a=sa, scale_b=sb, out_dtype=torch.float32, use_fast_accum=fast)
        for name, c in results.items():
            ratio = ((c.double() - ref).abs() / magnitude).flatten()
            row = dict(k=k, m=m, n=n, kernel=name, worst=ratio.max().item(), median=ratio.median().item())
            rows.append(row)
            print(
                f"K={k:6d}  {name:34s} worst {row['worst']:.2e} "
                f"(2^{torch.tensor(row['worst']).log2().item():6.1f})"
                f"  median {row['median']:.2e}"
            )
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(rows, fh, indent=1)


if __name__ == "__main__":
    main()
