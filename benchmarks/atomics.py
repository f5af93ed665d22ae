"""Vector atomics (GPU): FlashAttention backward's dQ accumulation, an MMA accumulator added into a float32
global tensor with one atomic per element, with `tile_nb.vector_atomics` on (two registers per
atomicAdd(float2*), sm_90) and off (one atomicAdd per element), in one process with one timer.

    python benchmarks/atomics.py [--json out.json]

The kernel: for each 64-row block of A and each of `adders` CTAs along the grid's second dim (the key blocks
of a backward pass adding into one query block's dQ), dQ[rows, :] += A_blk @ B^T. torch's `dQ += A @ B^T`,
once per adder, is timed beside it as the yardstick.
"""
import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import tile_nb  # noqa: E402
import tile_nb.language as T  # noqa: E402
from tile_nb.bench.timing import do_bench  # noqa: E402


@tile_nb.jit
def add_products(A, B, G, adders=8):
    M, N = T.const("M, N")
    A: T.Tensor[[M, 64], T.float16]
    B: T.Tensor[[N, 64], T.float16]
    G: T.Tensor[[M, N], T.float32]
    with T.Kernel(T.ceildiv(M, 64), adders, threads=128) as (bx, by):
        a = T.alloc_shared((64, 64), T.float16)
        b = T.alloc_shared((N, 64), T.float16)
        acc = T.alloc_fragment((64, N), T.float32)
        T.copy(A[bx * 64, 0], a)
        T.copy(B, b)
        T.clear(acc)
        T.gemm(a, b, acc, transpose_B=True)
        for i, j in T.Parallel(64, N):
            if bx * 64 + i < M:
                T.atomic_add(G[bx * 64 + i, j], acc[i, j])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--json")
    args = parser.parse_args()
    rows = []
    print(f"device: {torch.cuda.get_device_name()}  date: {time.strftime('%Y-%m-%d %H:%M')}")
    for M, N, adders in ((4096, 128, 8), (16384, 128, 8), (4096, 192, 16)):
        a = torch.randn(M, 64, device="cuda", dtype=torch.float16)
        b = torch.randn(N, 64, device="cuda", dtype=torch.float16)
        g = torch.zeros(M, N, device="cuda")
        times = {}
        for vector in (True, False):
            with tile_nb.options(vector_atomics=vector):
                add_products(a, b, g, adders=adders)  # build outside the timing
                times[vector] = do_bench(lambda: add_products(a, b, g, adders=adders)).median_ms
        g.zero_()
        with tile_nb.options(vector_atomics=True):
            add_products(a, b, g, adders=adders)
        torch.testing.assert_close(g, adders * (a.float() @ b.float().T), atol=1e-2, rtol=1e-3)

        def torch_adds():
            for _ in range(adders):
                g.add_(a @ b.T)

        yard = do_bench(torch_adds).median_ms
        row = {"M": M, "N": N, "adders": adders, "vector_ms": times[True], "scalar_ms": times[False],
               "torch_ms": yard, "vector_over_scalar": times[False] / times[True]}
        rows.append(row)
        print(f"M {M:6d} N {N} adders {adders:2d}: float2 atomics {times[True]:.4f} ms, one per element "
              f"{times[False]:.4f} ms ({row['vector_over_scalar']:.2f}x), torch {yard:.4f} ms")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "date": time.strftime("%Y-%m-%d %H:%M"),
                       "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
