"""CPU interpreter speed: the seed GEMM (128x128x32 tiles, 3 stages) and a few tile kernels on CPU tensors.

    python benchmarks/interp.py [--sizes 1024] [--reps 5] [--threads 1 2] [--cpu-device] [--out results.json]

For each case: the first call through `tile_nb.jit` (elaboration + interpretation), then the median / min /
max of `--reps` warm calls of `tile_nb.interp.run` on the specialized PrimFunc (wall clock, and the process's
CPU time), per torch thread count (the
interpreter sets torch's intra-op threads while it runs; `--threads` compares settings).
Goal (issue 4): the seed GEMM at 1024^3 in <= 2 s on a 2-core machine.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time

import torch

ROOT = __file__.rsplit("/benchmarks/", 1)[0]
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))
from kernels import reference  # noqa: E402  FlashAttention forward and friends, as tests/kernels has them
from kernels.seed import gemm  # noqa: E402  the seed GEMM exactly as the feature discussion writes it

import tile_nb  # noqa: E402
import tile_nb.language as T  # noqa: E402
from tile_nb import interp  # noqa: E402


@tile_nb.jit
def softmax(X, block_M: int = 4, block_N: int = 1024):
    M, N = T.const('M, N')
    X: T.Tensor[[M, N], T.float32]
    out = T.empty((M, N), T.float32)
    with T.Kernel(T.ceildiv(M, block_M)) as bx:
        S = T.alloc_fragment((block_M, block_N), T.float32)
        row_max = T.alloc_fragment((block_M,), T.float32)
        row_sum = T.alloc_fragment((block_M,), T.float32)
        T.copy(X[bx * block_M, 0], S)
        T.reduce_max(S, row_max, dim=1)
        for i, j in T.Parallel(block_M, block_N):
            S[i, j] = T.exp(S[i, j] - row_max[i])
        T.reduce_sum(S, row_sum, dim=1)
        for i, j in T.Parallel(block_M, block_N):
            S[i, j] = S[i, j] / row_sum[i]
        T.copy(S, out[bx * block_M, 0])
    return out


@tile_nb.jit
def add(X, Y, block: int = 1024):
    N = T.const('N')
    X: T.Tensor[[N], T.float32]
    Y: T.Tensor[[N], T.float32]
    out = T.empty((N,), T.float32)
    with T.Kernel(T.ceildiv(N, block)) as bx:
        for i in T.Parallel(block):
            if bx * block + i < N:
                out[bx * block + i] = X[bx * block + i] + Y[bx * block + i]
    return out


def timed(fn, reps: int):
    """Wall-clock median / min / max, and the median CPU time of this process
    (steadier on a shared machine)."""
    times, cpu = [], []
    for _ in range(reps):
        t, c = time.perf_counter(), time.process_time()
        fn()
        times.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    return statistics.median(times), min(times), max(times), statistics.median(cpu)


def cases(sizes):
    for n in sizes:
        A = torch.randn(n, n).half()
        B = torch.randn(n, n).half()
        C = torch.zeros(n, n)
        yield f"seed gemm {n}^3 fp16->fp32", gemm, [A, B, C], {}, (n // 128) ** 2
        # 32x32x32 tiles: 16x the CTAs and 4x the k-steps of tiny tile ops (per-op Python overhead dominates)
        yield (f"seed gemm {n}^3, 32x32x32 tiles", gemm, [A, B, C],
               dict(block_M=32, block_N=32, block_K=32), (n // 32) ** 2)
    X = torch.randn(4096, 1024)
    yield "softmax 4096x1024 (1024 CTAs)", softmax, [X], {}, 1024
    Y = torch.randn(1 << 20)
    yield "add 2^20 (1024 CTAs)", add, [Y, Y.clone()], {}, 1024
    Q, K, V = (torch.randn(1, 8, 1024, 64).half() for _ in range(3))
    yield (
        "flash attention fwd b1 h8 s1024 d64 (64x64 tiles)",
        reference.flash_attention,
        [Q, K, V, torch.empty_like(Q)],
        {},
        128,
    )


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1024])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--out")
    ap.add_argument("--cpu-device", action="store_true",
                    help="patch torch as `python -m tile_nb.run --cpu` does (its Tensor.to wrapper included)")
    args = ap.parse_args()
    if args.cpu_device:
        from tile_nb.tilelang import cpu_device

        cpu_device.install()
    info = {"date": time.strftime("%Y-%m-%d %H:%M"), "machine": platform.node(), "cpu": _cpu_model(),
            "cores": os.cpu_count(), "torch": torch.__version__, "python": platform.python_version(),
            "loadavg_before": os.getloadavg()}
    print(json.dumps(info))
    rows = []
    for name, kernel, call_args, kwargs, ctas in cases(args.sizes):
        t = time.perf_counter()
        kernel(*call_args, **kwargs)          # first call: template + specialization + interpretation
        first = time.perf_counter() - t
        spec_func = kernel.specialize(*call_args, **kwargs)
        run_args = call_args + _outputs(kernel, call_args)
        for threads in args.threads:
            def call(f=spec_func, a=run_args, t=threads):
                interp.run(f, a, threads=t)

            med, lo, hi, cpu = timed(call, args.reps)
            row = dict(
                case=name,
                ctas=ctas,
                threads=threads,
                first_call_s=round(first, 3),
                median_s=round(med, 3),
                min_s=round(lo, 3),
                max_s=round(hi, 3),
                cpu_median_s=round(cpu, 3),
            )
            rows.append(row)
            print(json.dumps(row), flush=True)
    info["loadavg_after"] = os.getloadavg()
    print(json.dumps({"loadavg_after": info["loadavg_after"]}))
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"info": info, "rows": rows}, f, indent=1)


def _outputs(kernel, call_args):
    """`T.empty` outputs: the specialized PrimFunc takes them as trailing parameters."""
    func = kernel.specialize(*call_args)
    names = [str(n) for n in func.attrs["tile_nb.outputs"]] if "tile_nb.outputs" in func.attrs else []
    outs = []
    for p in func.params[len(call_args):]:
        assert p.name in names
        outs.append(torch.empty([int(d) for d in p.shape], dtype=interp.values.torch_dtype(p.dtype)))
    return outs


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


if __name__ == "__main__":
    main()
