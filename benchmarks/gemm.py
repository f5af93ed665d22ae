"""GEMM throughput: tile_nb (the seed kernel through tile_nb.lower + TVM) vs torch.matmul (cuBLAS), same run.

    python benchmarks/gemm.py [--sizes 1024 2048 4096x11008x4096 ...] [--dtype bfloat16] [--variants]
                              [--small] [--split-k] [--only NAME ...] [--rounds 5] [--out results.json]

A size is N (square) or MxNxK. `--dtype float32` times the FMA path (exact products on the CUDA cores) against
torch with TF32 off, `--dtype tfloat32` the TF32 tensor-core path (T.tfloat32 shared tiles)
against torch with TF32 on; both with float32 tensors and the FP32 table (float32 tiles take twice
the shared memory of 16-bit ones).

Timing: CUDA events around each launch, L2 flushed (a 512 MiB write) before every timed launch, warm-up first,
median of 30 launches per round; rounds interleave all configs and torch; the median over rounds is reported.
TFLOP/s = 2 M N K / time.
"""
from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
import time

import torch

ROOT = __file__.rsplit("/benchmarks/", 1)[0]
sys.path[:0] = [ROOT, ROOT + "/tests"]
from kernels.seed import gemm_split_k, gemm_variant  # noqa: E402  (the seed GEMM with its launch shape as parameters)

import tile_nb.language as T  # noqa: E402

# fp16 in and out, fp32 accumulation (the CUDA is identical to the kernel this
# file defined before 2026-12-02 13:40)
SEED = dict(block_M=128, block_N=128, block_K=32, threads=128, num_stages=3, out_dtype=T.float16)
BIG = dict(block_M=128, block_N=256, block_K=64, threads=256, num_stages=3, out_dtype=T.float16)
# name -> (kernel config, lowering attributes)
CONFIGS = {
    "seed 128x128x32 t128 s3": (SEED, {}),
    "128x256x64 t256 s3": (BIG, {}),
}
# --variants: what each lowering choice is worth (sm_90a default: wgmma + TMA + producer warp, and
VARIANTS = {
    #            persistent CTAs where the grid has more tiles than the GPU has SMs)
    "seed, TMA forced": (SEED, {"tile_nb.tma": 1}),  # loads issued by the warpgroup's own first thread
    "seed, TMA forced, producer warp": (SEED, {"tile_nb.tma": 1, "tile_nb.producer_warp": 1}),
    "seed, TMA forced, no TMA store": (SEED, {"tile_nb.tma": 1, "tile_nb.tma_store": 0}),
    "seed s4, TMA forced": (dict(SEED, num_stages=4), {"tile_nb.tma": 1}),
    "seed s4": (dict(SEED, num_stages=4), {}),
    "seed, mma.sync": (SEED, {"tile_nb.wgmma": 0}),
    "big, cp.async": (BIG, {"tile_nb.tma": 0}),
    "big s4": (dict(BIG, num_stages=4), {}),
    "big s2": (dict(BIG, num_stages=2), {}),
    "big, no raster": (BIG, {"tile_nb.raster_group": 1}),
    "big, raster 16": (BIG, {"tile_nb.raster_group": 16}),
    "big, not persistent": (BIG, {"tile_nb.persistent": 0}),
    "big s4, not persistent": (dict(BIG, num_stages=4), {"tile_nb.persistent": 0}),
    "big, no TMA store": (BIG, {"tile_nb.tma_store": 0}),
    # also where the grid fits in one wave (not persistent)
    "big, TMA store": (BIG, {"tile_nb.tma_store": 1}),
    "big s4, TMA store": (dict(BIG, num_stages=4), {"tile_nb.tma_store": 1}),
    "big s4, no TMA store": (dict(BIG, num_stages=4), {"tile_nb.tma_store": 0}),
    # the epilogue until 12-03
    "big s4, consumer stores": (dict(BIG, num_stages=4), {"tile_nb.producer_stores": 0}),
    "big, consumer stores": (BIG, {"tile_nb.producer_stores": 0}),
    # the last wave's tiles whole (to 12-03)
    "big s4, no stream-K": (dict(BIG, num_stages=4), {"tile_nb.stream_k": 0}),
    "big, no stream-K": (BIG, {"tile_nb.stream_k": 0}),
    "big, cluster": (BIG, {"tile_nb.cluster": 2}),  # 2-CTA clusters, B multicast (persistent kernels)
    "big s4, cluster": (dict(BIG, num_stages=4), {"tile_nb.cluster": 2}),
    # probes: is the cluster kernel short of co-resident clusters? (fewer persistent CTAs than SMs)
    "big s4, cluster, 120 CTAs": (dict(BIG, num_stages=4), {"tile_nb.cluster": 2, "tile_nb.sm_count": 120}),
    "big s4, cluster, 66 CTAs": (dict(BIG, num_stages=4), {"tile_nb.cluster": 2, "tile_nb.sm_count": 66}),
    "big s4, 120 CTAs": (dict(BIG, num_stages=4), {"tile_nb.sm_count": 120}),
    "big s4, 66 CTAs": (dict(BIG, num_stages=4), {"tile_nb.sm_count": 66}),
}

FP32 = {  # --dtype float32 / tfloat32 (the 16-bit tables' tiles need more shared memory than a block has)
    "seed 128x128x32 t128 s3": (dict(SEED, out_dtype=T.float32), {}),
    "128x128x16 t256 s3": (dict(block_M=128, block_N=128, block_K=16, threads=256, num_stages=3), {}),
    "64x64x32 t128 s3": (dict(block_M=64, block_N=64, block_K=32, threads=128, num_stages=3), {}),
    # the operand tiles row-major (8-way bank conflicts at 32 floats a row)
    # instead of swizzled: what it is worth
    "seed 128x128x32 t128 s3, no swizzle": (dict(SEED, out_dtype=T.float32), {"tile_nb.wide_swizzle": 0}),
    "128x128x16 t256 s3, no swizzle": (dict(block_M=128, block_N=128, block_K=16, threads=256, num_stages=3),
                                       {"tile_nb.wide_swizzle": 0}),
}

SMALL = {  # --small: tiles that give small problems more CTAs (sizes <= 2048)
    "64x128x64 t128 s4": (
        dict(block_M=64, block_N=128, block_K=64, threads=128, num_stages=4, out_dtype=T.float16),
        {},
    ),
    "64x128x64 t128 s4 TMA": (
        dict(block_M=64, block_N=128, block_K=64, threads=128, num_stages=4, out_dtype=T.float16),
        {"tile_nb.tma": 1},
    ),
    "64x128x64 t128 s4 TMA, producer warp": (
        dict(block_M=64, block_N=128, block_K=64, threads=128, num_stages=4, out_dtype=T.float16),
        {"tile_nb.tma": 1, "tile_nb.producer_warp": 1},
    ),
    "64x256x64 t128 s3": (
        dict(block_M=64, block_N=256, block_K=64, threads=128, num_stages=3, out_dtype=T.float16),
        {},
    ),
    "128x128x64 t256 s4": (
        dict(block_M=128, block_N=128, block_K=64, threads=256, num_stages=4, out_dtype=T.float16),
        {},
    ),
    "128x64x64 t128 s4": (
        dict(block_M=128, block_N=64, block_K=64, threads=128, num_stages=4, out_dtype=T.float16),
        {},
    ),
    "128x256x64 t256 s4": (dict(BIG, num_stages=4), {}),
}
# --split-k: slices of K over a third grid axis, summed with atomics into a zeroed fp32 C (timed with it)
SPLIT_K = {
    "split-K 128x256x64 k2": dict(block_N=256, split_K=2),
    "split-K 128x256x64 k4": dict(block_N=256, split_K=4),
    "split-K 128x128x64 k2": dict(block_N=128, split_K=2, threads=128),
    "split-K 128x128x64 k4": dict(block_N=128, split_K=4, threads=128),
}


def build(shape, cfg, attrs, dtype="float16"):
    """Compile through tile_nb.runtime (lower + build), with extra lowering attributes on the PrimFunc."""
    from tile_nb.runtime import compile as rt_compile

    m, n, k = shape
    func = gemm_variant.specialize(M=m, N=n, K=k, **dict(cfg, in_dtype=dtype, out_dtype=dtype))
    for k, v in attrs.items():
        func = func.with_attr(k, v)
    return rt_compile(func, None)


def bench(fn, reps=30, warmup=5):
    flush = torch.empty(512 * 2**20, dtype=torch.uint8, device="cuda")
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        flush.zero_()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e) * 1e-3)
    return statistics.median(times), min(times), max(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "--sizes", nargs="+", default=["1024", "2048", "4096", "8192"], help="N (square) or MxNxK"
    )
    ap.add_argument("--dtype", default="float16", choices=["float16", "bfloat16", "float32", "tfloat32"],
                    help="A, B and C (fp32 accumulation); tfloat32: float32 tensors, TF32 products")
    ap.add_argument("--out", default=None)
    ap.add_argument("--variants", action="store_true", help="also time the VARIANTS table")
    ap.add_argument("--rounds", type=int, default=5, help="timing rounds, configs interleaved in each")
    ap.add_argument(
        "--cooldown",
        type=float,
        default=0.0,
        help="seconds of GPU idle before timing each config: burst (boost clock) instead of sustained "
        "(power-capped) figures; the H200 hits its 700 W cap within ~1 s of back-to-back 8192^3 GEMMs",
    )
    ap.add_argument("--probe", action="store_true", help="check wgmma descriptor variants first")
    ap.add_argument("--small", action="store_true", help="also time the SMALL table (sizes <= 2048)")
    ap.add_argument("--split-k", action="store_true", help="also time the SPLIT_K table (sizes <= 4096)")
    ap.add_argument(
        "--only", nargs="+", default=None, help="time only these configurations (names of the tables)"
    )
    args = ap.parse_args()
    rows = []
    if args.probe:
        a = torch.randn(512, 512, device="cuda", dtype=torch.float16)
        b = torch.randn(512, 512, device="cuda", dtype=torch.float16)
        ref = a.float() @ b.float()
        for cfg in (SEED, BIG):
            for swap in (0, 1):
                c = torch.full((512, 512), float("nan"), device="cuda", dtype=torch.float16)
                try:
                    build((512, 512, 512), cfg, {"tile_nb.wgmma_swap_lbo_sbo": swap})(a, b, c)
                    torch.cuda.synchronize()
                    print(
                        "probe",
                        cfg["block_N"],
                        "swap",
                        swap,
                        "err",
                        ((c.float() - ref).norm() / ref.norm()).item(),
                    )
                except Exception as exc:  # noqa: BLE001
                    print("probe", cfg["block_N"], "swap", swap, "failed:", str(exc)[:300])
    print(
        f"device: {torch.cuda.get_device_name()}  date: {time.strftime('%Y-%m-%d')}  rounds: {args.rounds}  "
        f"cooldown: {args.cooldown} s  dtype: {args.dtype}"
    )
    wide = args.dtype in ("float32", "tfloat32")
    dtype = torch.float32 if wide else getattr(torch, args.dtype)
    torch.backends.cuda.matmul.allow_tf32 = args.dtype == "tfloat32"  # cuBLAS does what the kernel does
    for size in args.sizes:
        shape = tuple(int(d) for d in size.split("x")) if "x" in size else (int(size),) * 3
        m, n, k = shape
        a = torch.randn(m, k, device="cuda", dtype=dtype)
        b = torch.randn(k, n, device="cuda", dtype=dtype)
        c = torch.empty(m, n, device="cuda", dtype=dtype)
        flop = 2.0 * m * n * k
        ref = torch.matmul(a.double(), b.double()).float() if wide else torch.matmul(a.float(), b.float())
        small = max(shape) <= 2048
        configs = dict(CONFIGS, **(VARIANTS if args.variants and not small else {}),
                       **(SMALL if args.small and small else {})) if not wide else dict(FP32)
        if args.only:
            tables = dict(FP32) if wide else {**CONFIGS, **VARIANTS, **SMALL}
            unknown = set(args.only) - set(tables)
            if unknown:
                sys.exit(f"--only: no configuration named {sorted(unknown)}; known: {sorted(tables)}")
            configs = {name: spec for name, spec in tables.items() if name in args.only}
        kernels, firsts, errs = {"torch.matmul": functools.partial(torch.matmul, a, b, out=c)}, {}, {}
        for name, (cfg, attrs) in configs.items():
            t0 = time.perf_counter()
            kern = build(shape, cfg, attrs, args.dtype)
            c.fill_(float("nan"))
            kern(a, b, c)
            torch.cuda.synchronize()
            firsts[name] = time.perf_counter() - t0
            errs[name] = ((c.float() - ref).norm() / ref.norm()).item()
            kernels[name] = functools.partial(kern, a, b, c)
        for name, cfg in (
            SPLIT_K.items() if args.split_k and max(shape) <= 4096 and args.dtype == "float16" else ()
        ):
            c32 = torch.empty(m, n, device="cuda")
            t0 = time.perf_counter()
            kern = gemm_split_k.compile(a, b, c32, **cfg)
            c32.zero_()
            kern(a, b, c32)
            torch.cuda.synchronize()
            firsts[name] = time.perf_counter() - t0
            errs[name] = ((c32 - ref).norm() / ref.norm()).item()
            kernels[name] = functools.partial(
                lambda k, a, b, c32: (c32.zero_(), k(a, b, c32)), kern, a, b, c32
            )
            configs[name] = (cfg, {})
        # Round-robin: every config (torch included) is timed once per round, so clock and thermal drift
        # over the run hit all of them alike; the reported time is the median of the round medians.
        per_round = {name: [] for name in kernels}
        for _ in range(args.rounds):
            for name, fn in kernels.items():
                if args.cooldown:
                    torch.cuda.synchronize()
                    time.sleep(args.cooldown)
                per_round[name].append(bench(fn)[0])
        t_ref = statistics.median(per_round["torch.matmul"])
        for name in configs:
            t = statistics.median(per_round[name])
            lo, hi = min(per_round[name]), max(per_round[name])
            row = dict(
                size=size,
                dtype=args.dtype,
                config=name,
                tflops=flop / t / 1e12,
                torch_tflops=flop / t_ref / 1e12,
                ms=t * 1e3,
                round_ms_min=lo * 1e3,
                round_ms_max=hi * 1e3,
                rel_err=errs[name],
                first_call_s=firsts[name],
                rounds=args.rounds,
                cooldown_s=args.cooldown,
            )
            row["ratio"] = row["tflops"] / row["torch_tflops"]
            rows.append(row)
            print(f"{size:>16} {name:26s} {row['tflops']:7.1f} TFLOP/s  torch {row['torch_tflops']:7.1f}  "
                  f"ratio {row['ratio']:.2f}  ({row['ms']:.3f} ms; rounds {lo * 1e3:.3f}..{hi * 1e3:.3f})  "
                  f"err {errs[name]:.1e}  first call {firsts[name]:.2f}s")
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(rows, fh, indent=1)


if __name__ == "__main__":
    main()
