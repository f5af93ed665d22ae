"""8-bit GEMM: tile_nb's `gemm_fp8` (tests/kernels/seed.py) vs torch._scaled_mm, or with --int8 its
`gemm_int8` vs torch._int_mm, same run.

    python benchmarks/gemm_fp8.py [--sizes 1024 4096x14336x4096 ...] [--int8] [--rounds 5]
                                  [--out results.json]

fp8: A is [M, K] e4m3, B is [N, K] e4m3 (K-major, what torch._scaled_mm takes as `B.t()`), C is bf16, scales
are one-element float32 tensors. Each tile_nb kernel is compared with cuBLAS accumulating the same way: the
default kernel with `use_fast_accum=True`, `precise_accum` with cuBLAS's default (docs/IR.md, "8-bit floats").
int8: A [M, K], B [N, K] int8, C int32 (exact). Timing as in gemm.py (its `bench`: CUDA events, L2 flushed
before every launch, median of 30 launches per round, configs and torch interleaved in each round, median over
rounds). TFLOP/s = 2 M N K / time.
"""
from __future__ import annotations

import argparse
import contextlib
import functools
import json
import statistics
import sys
import time

import torch

ROOT = __file__.rsplit("/benchmarks/", 1)[0]
sys.path[:0] = [ROOT, ROOT + "/tests", ROOT + "/benchmarks"]
from gemm import bench  # noqa: E402  (one timing loop for every GEMM benchmark)
from kernels.seed import gemm_fp8, gemm_int8  # noqa: E402

import tile_nb  # noqa: E402

FAST = "torch._scaled_mm fast_accum"
CONFIGS = {  # name -> gemm_fp8 compile-time arguments
    "128x256x128 t256 s4": dict(block_M=128, block_N=256, block_K=128, threads=256, num_stages=4),
    "128x256x64 t256 s6": dict(block_M=128, block_N=256, block_K=64, threads=256, num_stages=6),
    "128x128x128 t256 s5": dict(block_M=128, block_N=128, block_K=128, threads=256, num_stages=5),
    "64x256x128 t128 s4": dict(block_M=64, block_N=256, block_K=128, threads=128, num_stages=4),
    "128x256x128 t256 s4 not persistent": dict(
        block_M=128,
        block_N=256,
        block_K=128,
        threads=256,
        num_stages=4,
        # lowering switches while compiling
        env={"TILE_NB_PERSISTENT": "0"},
    ),
    "128x256x128 t256 s4 no TMA store": dict(
        block_M=128, block_N=256, block_K=128, threads=256, num_stages=4, env={"TILE_NB_TMA_STORE": "0"}
    ),
    "128x256x128 t256 s4 consumer stores": dict(
        block_M=128,
        block_N=256,
        block_K=128,
        threads=256,
        num_stages=4,
        # the epilogue until 12-03
        env={"TILE_NB_PRODUCER_STORES": "0"},
    ),
    "128x256x128 t256 s4 no stream-K": dict(
        block_M=128,
        block_N=256,
        block_K=128,
        threads=256,
        num_stages=4,
        # the last wave's tiles whole (to 12-03)
        env={"TILE_NB_STREAM_K": "0"},
    ),
    "128x256x128 t256 s4 cluster": dict(
        block_M=128, block_N=256, block_K=128, threads=256, num_stages=4, env={"TILE_NB_CLUSTER": "2"}
    ),
    # small problems (1024^3: 128x128 tiles give 64 CTAs for 132 SMs): 128 CTAs of 64x128 or 128x64
    "64x128x128 t128 s4": dict(block_M=64, block_N=128, block_K=128, threads=128, num_stages=4),
    "64x128x128 t128 s4 TMA": dict(
        block_M=64,
        block_N=128,
        block_K=128,
        threads=128,
        num_stages=4,
        # the warpgroup's own first thread issues the loads
        env={"TILE_NB_TMA": "1"},
    ),
    "64x128x128 t128 s4 TMA, producer warp": dict(
        block_M=64,
        block_N=128,
        block_K=128,
        threads=128,
        num_stages=4,
        env={"TILE_NB_TMA": "1", "TILE_NB_PRODUCER_WARP": "1"},
    ),
    "128x64x128 t256 s4": dict(block_M=128, block_N=64, block_K=128, threads=256, num_stages=4),
    "128x128x128 t256 s5 precise": dict(
        block_M=128, block_N=128, block_K=128, threads=256, num_stages=5, precise_accum=True
    ),  # fp8 only: float32 sums per k-tile (docs/IR.md)
}


@contextlib.contextmanager
def switches(env: dict):
    """The lowering options these TILE_NB_* variables spell (tile_nb.LoweringOptions), set while inside."""
    with tile_nb.options(**tile_nb.LoweringOptions.from_environment(env)):
        yield


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "--sizes", nargs="+", default=["1024", "2048", "4096", "8192"], help="N (square) or MxNxK"
    )
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--int8", action="store_true", help="int8 x int8 -> int32 against torch._int_mm")
    ap.add_argument("--only", nargs="+", default=None, help="time only these configurations (and cuBLAS)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    if args.only and set(args.only) - set(CONFIGS):
        sys.exit(
            f"--only: no configuration named {sorted(set(args.only) - set(CONFIGS))}; known: "
            f"{sorted(CONFIGS)}"
        )
    what = "int8 x int8 -> int32" if args.int8 else "e4m3 x e4m3 -> bf16, per-tensor scales"
    print(
        f"device: {torch.cuda.get_device_name()}  date: {time.strftime('%Y-%m-%d %H:%M')}  rounds: "
        f"{args.rounds}  "
        f"{what}"
    )
    torch_name = "torch._int_mm" if args.int8 else "torch._scaled_mm"
    rows = []
    for size in args.sizes:
        m, n, k = tuple(int(d) for d in size.split("x")) if "x" in size else (int(size),) * 3
        if args.int8:
            a = torch.randint(-128, 128, (m, k), device="cuda", dtype=torch.int8)
            b = torch.randint(-128, 128, (n, k), device="cuda", dtype=torch.int8)
            c = torch.empty(m, n, device="cuda", dtype=torch.int32)
            args_of = (a, b, c)
            kernel_fn, ref = gemm_int8, (a.double() @ b.double().T)
            kernels = {torch_name: functools.partial(torch._int_mm, a, b.T)}
        else:
            a = (torch.randn(m, k, device="cuda") * 2).to(torch.float8_e4m3fn)
            b = (torch.randn(n, k, device="cuda") * 2).to(torch.float8_e4m3fn)
            sa, sb = torch.tensor([0.5], device="cuda"), torch.tensor([0.25], device="cuda")
            c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
            args_of = (a, b, c, sa, sb)
            kernel_fn, ref = gemm_fp8, (a.double() @ b.double().T) * 0.125
            # cuBLAS both ways: its default keeps float32 sums across k-tiles (like precise_accum); fast
            # accumulation keeps the MMAs' own (like tile_nb's default). Ratios
            # are like for like (docs/IR.md).
            kernels = {torch_name: functools.partial(torch._scaled_mm, a, b.T, scale_a=sa, scale_b=sb,
                                                     out_dtype=torch.bfloat16),
                       FAST: functools.partial(torch._scaled_mm, a, b.T, scale_a=sa, scale_b=sb,
                                               out_dtype=torch.bfloat16, use_fast_accum=True)}
        flop = 2.0 * m * n * k
        errs, firsts = {}, {}
        configs = {name: cfg for name, cfg in CONFIGS.items() if not (args.int8 and "precise_accum" in cfg)
                   and (not args.only or name in args.only)}
        for name, cfg in configs.items():
            t0 = time.perf_counter()
            cfg = dict(cfg)
            with switches(cfg.pop("env", {})):
                kern = kernel_fn.compile(*args_of, **cfg)
            c.fill_(-1)
            kern(*args_of)
            torch.cuda.synchronize()
            firsts[name] = time.perf_counter() - t0
            errs[name] = ((c.double() - ref).norm() / ref.norm()).item()
            kernels[name] = functools.partial(kern, *args_of)
        per_round = {name: [] for name in kernels}
        for _ in range(args.rounds):
            for name, fn in kernels.items():
                per_round[name].append(bench(fn)[0])
        for name in configs:
            precise = args.int8 or configs[name].get("precise_accum", False)
            t_ref = statistics.median(per_round[torch_name if precise else FAST])
            t = statistics.median(per_round[name])
            row = dict(
                size=size,
                dtype="int8" if args.int8 else "float8_e4m3fn",
                config=name,
                reference=torch_name if precise else FAST,
                tflops=flop / t / 1e12,
                torch_tflops=flop / t_ref / 1e12,
                ms=t * 1e3,
                rel_err=errs[name],
                first_call_s=firsts[name],
                rounds=args.rounds,
            )
            row["ratio"] = row["tflops"] / row["torch_tflops"]
            rows.append(row)
            print(
                f"{size:>16} {name:28s} {row['tflops']:7.1f} TFLOP/s  {row['reference']} "
                f"{row['torch_tflops']:7.1f}  "
                f"ratio {row['ratio']:.2f}  ({row['ms']:.3f} ms)  err {errs[name]:.1e}  "
                f"first call {firsts[name]:.2f}s"
            )
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(rows, fh, indent=1)


if __name__ == "__main__":
    main()
