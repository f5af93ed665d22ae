"""FlashMLA's decode (64 query heads per CTA on 256 threads, head dim 512 + 64 rotary) on the GPU: the
wgmma column split (each warpgroup multiplies all 64 rows by half of B; LoweringOptions.wgmma_column_split)
against the same kernel on mma.sync, and torch's SDPA on the same problem (query heads as query rows, one KV
head, V the first 512 columns of K), one timer (tile_nb.bench.timing).

    python benchmarks/mla_decode.py [--json out.json]
    python benchmarks/mla_decode.py --device cpu --shapes 64,70   # a smoke run on the interpreter

Results: benchmarks/results/mla-decode.md."""
import argparse
import json
import os
import sys
import time

import torch
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]
from kernels.mla import mla_decode  # noqa: E402

import tile_nb  # noqa: E402
from tile_nb.bench.timing import do_bench  # noqa: E402

D, P = 512, 64


def case(H: int, S: int, device: str) -> dict:
    g = torch.Generator().manual_seed(H + S)
    q, q_pe = torch.randn(H, D, generator=g).half(), torch.randn(H, P, generator=g).half()
    kv, k_pe = (torch.randn(S, D, generator=g) / 4).half(), (torch.randn(S, P, generator=g) / 4).half()
    q, q_pe, kv, k_pe = (t.to(device) for t in (q, q_pe, kv, k_pe))
    query = torch.cat([q, q_pe], dim=1)[None, None]            # [1, 1, H, 576]
    key = torch.cat([kv, k_pe], dim=1)[None, None]             # [1, 1, S, 576]
    value = kv[None, None]                                     # [1, 1, S, 512]
    expected = F.scaled_dot_product_attention(query.float(), key.float(), value.float(), scale=0.125)[0, 0]
    row = dict(heads=H, kv_len=S)
    flops = 2 * H * S * (D + P + D)
    for label, split in (("column split", True), ("mma.sync", False)):
        kernel = tile_nb.jit(mla_decode.fn, options={"wgmma_column_split": split})
        try:
            out = kernel(q, q_pe, kv, k_pe)
        except Exception as exc:  # noqa: BLE001 - e.g. mma.sync's P in shared memory does not fit
            row[label] = dict(error=f"{type(exc).__name__}: {exc}".splitlines()[0][:200])
            continue
        entry = dict(max_abs_err=float((out.float() - expected).abs().max()))
        if device == "cuda":
            ms = do_bench(lambda k=kernel: k(q, q_pe, kv, k_pe)).median_ms
            entry.update(ms=ms, tflops=flops / ms / 1e9)
        row[label] = entry
    if device == "cuda":
        ms = do_bench(lambda: F.scaled_dot_product_attention(query, key, value, scale=0.125)).median_ms
        row["torch sdpa"] = dict(ms=ms, tflops=flops / ms / 1e9)
        if "ms" in row["column split"]:
            row["split x sdpa"] = ms / row["column split"]["ms"]
            if "ms" in row["mma.sync"]:
                row["split x mma.sync"] = row["mma.sync"]["ms"] / row["column split"]["ms"]
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", nargs="*", default=["128,8192", "4096,8192", "8448,4096"],
                        help="heads,kv_len per case")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--json")
    args = parser.parse_args()
    name = torch.cuda.get_device_name() if args.device == "cuda" else "cpu (interpreter)"
    print(f"{name}, torch {torch.__version__}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    rows = []
    for shape in args.shapes:
        H, S = map(int, shape.split(","))
        try:
            row = case(H, S, args.device)
        except Exception as exc:  # noqa: BLE001 - one case's failure is reported, the others still run
            row = dict(heads=H, kv_len=S, error=f"{type(exc).__name__}: {exc}"[:300])
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(device=name, torch=torch.__version__, rows=rows,
                           date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())), f, indent=1)


if __name__ == "__main__":
    main()
