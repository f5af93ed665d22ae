"""Which output tiles of a persistent 128x256x64 GEMM are wrong, and what the kernel did with them.

    python benchmarks/gemm_tile_errors.py [--shapes 16384x4096x4096 4096x11008x4096] [--launches 2]

For each shape and lowering variant (default; stream-K off; the consumers' stores) the kernel runs
`--launches` times on fresh random inputs; every 128x256 tile whose largest error exceeds 2e-3 of the
largest |C| is reported by what produced it: a whole tile (its wave, and the CTA that ran it) or a tail
tile of stream-K (its index, its finisher, how many CTAs contributed), which is what tells a race in the
epilogue from one in stream-K's fix-up (docs/decisions.md#the-producer-warp-issues-the-epilogues-stores;
benchmarks/results/gemm-stream-k-tile-errors-*.txt). Needs an sm_90 GPU; the raster is tile_nb's default
(groups of 8 tiles down M).
"""
import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from kernels.seed import gemm_variant  # noqa: E402

import tile_nb.language as T  # noqa: E402
from tile_nb.lower.analysis.stream_k import StreamK  # noqa: E402
from tile_nb.lower.emit.stream_k import contributors, tail_range  # noqa: E402
from tile_nb.runtime import compile as rt_compile  # noqa: E402

VARIANTS = {"default": {}, "no stream-K": {"tile_nb.stream_k": 0}, "stream-K forced": {"tile_nb.stream_k": 1},
            "consumer stores": {"tile_nb.producer_stores": 0}}
GROUP = 8  # tile_nb.raster_group's default


def linear_tile(bx: int, by: int, tiles_n: int) -> int:
    """The persistent walk's linear index of tile (bx, by) (Emitter.bind_tile, grouped raster)."""
    return (bx // GROUP) * GROUP * tiles_n + by * GROUP + bx % GROUP


def stream_k_owners(waves, tail, ctas, n):
    """Tail tile -> (its finisher, its first contributor), by stream_k.py's own range
    arithmetic (constants folded)."""
    sk = StreamK(waves, tail, min(ctas, 2 * tail), n, None, 128, 256)
    finisher = {}
    for c in range(sk.ctas):
        r = tail_range(sk, c, lambda name, value: value)
        if bool(r.finishes):
            finisher[int(r.finish_tile)] = c
    return {t: (finisher[t], int(contributors(sk, t))) for t in range(tail)}


def wrong_tiles(M, N, K, attrs, launches, ctas):
    func = gemm_variant.specialize(M=M, N=N, K=K, block_N=256, block_K=64, threads=256, num_stages=4,
                                   in_dtype=T.float16, out_dtype=T.float16)
    for name, value in attrs.items():
        func = func.with_attr(name, value)
    kernel = rt_compile(func, None)
    n, tiles_m, tiles_n = -(-K // 64), -(-M // 128), -(-N // 256)
    waves, tail = divmod(tiles_m * tiles_n, ctas)
    stream_k = bool(kernel.plan and kernel.plan.get("stream_k"))
    owners = stream_k_owners(waves, tail, ctas, n) if stream_k else {}
    for launch in range(launches):
        torch.manual_seed(launch)
        a, b = torch.randn(M, K, device="cuda").half(), torch.randn(K, N, device="cuda").half()
        c = torch.full((M, N), float("nan"), device="cuda", dtype=torch.float16)
        kernel(a, b, c)
        torch.cuda.synchronize()
        ref = a.float() @ b.float()
        err = (c.float() - ref).abs() / ref.abs().max()
        bad = {}
        for bx in range(tiles_m):
            for by in range(tiles_n):
                worst = err[bx * 128:(bx + 1) * 128, by * 256:(by + 1) * 256].max().item()
                if worst < 2e-3:
                    continue
                lin = linear_tile(bx, by, tiles_n)
                if lin < waves * ctas or not stream_k:
                    bad.setdefault(("whole tile, wave", lin // ctas), []).append(
                        (f"CTA {lin % ctas}", round(worst, 3))
                    )
                else:
                    t = lin - waves * ctas
                    finisher, first = owners[t]
                    bad.setdefault(("tail tile, contributors", finisher - first), []).append(
                        (f"tile {t}, finisher {finisher}", round(worst, 3)))
        summary = {k: (len(v), v[:4]) for k, v in bad.items()} or "none"
        print(
            f"{M}x{N}x{K} {attrs or 'default'} launch {launch + 1}: waves {waves}, tail {tail}: wrong "
            f"tiles: {summary}",
            flush=True,
        )


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", nargs="+", default=["16384x4096x4096", "4096x11008x4096"])
    ap.add_argument("--variants", nargs="+", default=["default", "stream-K forced"], choices=sorted(VARIANTS))
    ap.add_argument("--launches", type=int, default=2)
    args = ap.parse_args()
    ctas = torch.cuda.get_device_properties(0).multi_processor_count
    for shape in args.shapes:
        M, N, K = (int(x) for x in shape.split("x"))
        for variant in args.variants:
            wrong_tiles(M, N, K, VARIANTS[variant], args.launches, ctas)


if __name__ == "__main__":
    main()
