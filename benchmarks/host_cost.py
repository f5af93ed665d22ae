"""Where the host time of one cached call goes (GPU): the seed GEMM at 128^3
in a host-bound loop, taken apart.

    python benchmarks/host_cost.py [--n 3000] [--cuda-host] [--json out.json]

Each line times N back-to-back calls of one piece of the call path, synchronised once at the end (per-call
wall time), next to torch.matmul in the same loop; rounds interleave the lines and the median is reported:
  - `gemm(a, b, c)`: the whole cached call of the `@lazy_jit` kernel;
  - the front end alone (a second JIT of the kernel whose launches are no-ops): the fast path's lookups;
  - `kernel(a, b, c)` and `kernel._func(a, b, c)`: the CompiledKernel and the raw
    tvm_ffi function on torch tensors;
  - the raw function on tensors converted to tvm_ffi once (what DLPack conversion per call costs);
  - where the bare launch goes: a no-op tvm_ffi function on the same three tensors (the FFI's own cost), and
    the seed lowered with cp.async (no tensor maps to encode per call);
  - with `--cuda-host`, the same kernel built with host='cuda_host' (backend/cuda_host.py:
    TVM's host function as CUDA C++ calling cuTensorMapEncodeTiled and cudaLaunchKernelEx
    itself): the whole call and the bare launch;
  - the GPU time of one launch (launches queued behind `torch.cuda._sleep`, so the host is never waited on).
A loop is host-bound when its per-call time is above the GPU time per launch.
Results: benchmarks/results/dispatch.md ("Host cost of a cached GPU call").
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
from kernels.seed import gemm, gemm_variant  # noqa: E402
from launch import per_call_us  # noqa: E402  (benchmarks/launch.py: N calls, one synchronisation)

import tile_nb  # noqa: E402


def gpu_us_per_launch(fn, n=200):
    """GPU time of one launch: the launches wait behind a ~20 ms sleep kernel, so they run back to back."""
    for _ in range(10):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(40_000_000)
    start.record()
    for _ in range(n):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1e3 / n


SEED = dict(block_M=128, block_N=128, block_K=32, threads=128, num_stages=3, in_dtype="float16",
            out_dtype="float32")


def seed_func(size, **attrs):
    func = gemm_variant.specialize(M=size, N=size, K=size, **SEED)
    for key, value in attrs.items():
        func = func.with_attr(key, value)
    return func


def front_end_only(fn, a, b, c):
    """A second JIT of the same kernel whose launches are no-ops: what the front end alone costs per call (it
    compiles nothing new: the kernel comes from the runtime's memory cache)."""
    jitted = tile_nb.jit(fn)
    jitted(a, b, c)
    jitted(a, b, c)   # the second call keeps the launch under its direct key
    for template in jitted._templates.values():
        for spec in template.specializations.values():
            spec.launches.update({key: _no_launch for key in spec.launches})
    for entry in jitted._fast.values():
        entry.direct.update({key: _no_launch for key in entry.direct})
    return jitted


def _no_launch(*args):
    return None


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, default=3000)
    parser.add_argument("--size", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--json", default=None)
    parser.add_argument(
        "--cuda-host", action="store_true", help="also time the build option host='cuda_host'"
    )
    args = parser.parse_args()
    import tvm_ffi

    size = args.size
    a = torch.randn(size, size, device="cuda", dtype=torch.float16)
    b = torch.randn(size, size, device="cuda", dtype=torch.float16)
    c = torch.empty(size, size, device="cuda", dtype=torch.float32)
    c16 = torch.empty(size, size, device="cuda", dtype=torch.float16)
    gemm(a, b, c)
    torch.testing.assert_close(c, (a.float() @ b.float()), atol=1e-2, rtol=1e-3)
    # the very kernel the call above launched (same facts, from spec.compiled)
    kernel = gemm.compile(a, b, c)
    raw = kernel._func
    ta, tb, tc = (tvm_ffi.from_dlpack(t) for t in (a, b, c))

    facts = {
        "device": torch.cuda.get_device_name(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "torch": torch.__version__,
        "tvm_ffi": getattr(tvm_ffi, "__version__", "?"),
        "size": size,
        "n": args.n,
        "torch_has_dlpack_c_exchange_api": hasattr(torch.Tensor, "__dlpack_c_exchange_api__")
        or hasattr(torch.Tensor, "__c_dlpack_exchange_api__"),
    }
    print(json.dumps(facts))
    from tile_nb.runtime import compile as rt_compile

    cp_async = rt_compile(seed_func(size, **{"tile_nb.tma": 0}), None)._func
    cp_async(a, b, c)
    torch.testing.assert_close(c, (a.float() @ b.float()), atol=1e-2, rtol=1e-3)
    nop = tvm_ffi.get_global_func("testing.nop", allow_missing=True)
    front_end = front_end_only(gemm.fn, a, b, c)
    rows = {
        "empty loop": lambda: None,
        "torch.matmul(a, b, out=c16)": lambda: torch.matmul(a, b, out=c16),
        "gemm(a, b, c)  (whole cached call)": lambda: gemm(a, b, c),
        "gemm(a, b, c) with a no-op launch (front end)": lambda: front_end(a, b, c),
        "kernel(a, b, c)  (CompiledKernel)": lambda: kernel(a, b, c),
        "kernel._func(a, b, c)  (tvm_ffi, torch)": lambda: raw(a, b, c),
        "kernel._func(ta, tb, tc)  (tvm_ffi tensors)": lambda: raw(ta, tb, tc),
        "tvm_ffi.from_dlpack(a)": lambda: tvm_ffi.from_dlpack(a),
        "seed, cp.async: _func(a, b, c)  (no tensor maps)": lambda: cp_async(a, b, c),
        "torch.cuda.current_stream()": torch.cuda.current_stream,
        "a.data_ptr(), a.shape, a.dtype": lambda: (a.data_ptr(), a.shape, a.dtype),
    }
    if nop is not None:
        rows["testing.nop(a, b, c)  (tvm_ffi call alone)"] = lambda: nop(a, b, c)
    if args.cuda_host:
        lean_gemm = tile_nb.jit(gemm.fn, compile_options={"host": "cuda_host"})
        c.zero_()
        lean_gemm(a, b, c)
        torch.testing.assert_close(c, (a.float() @ b.float()), atol=1e-2, rtol=1e-3)
        lean = lean_gemm.compile(a, b, c)
        facts["cuda_host_build_s"] = lean.timings.get("cuda_host")   # None: loaded from the disk cache
        print(f"  cuda_host launcher build: {facts['cuda_host_build_s'] or 'from the disk cache'} s")
        rows["host='cuda_host': gemm(a, b, c)  (whole call)"] = lambda: lean_gemm(a, b, c)
        rows["host='cuda_host': kernel._func(a, b, c)"] = lambda: lean._func(a, b, c)
    # Rounds interleave the rows: the host's speed drifts by 20-30% over a minute on the lent machines, so
    # rows timed one after the other once are not comparable.
    times: dict = {name: [] for name in rows}
    for _ in range(args.rounds):
        for name, fn in rows.items():
            times[name].append(per_call_us(fn, args.n))
    per_call = {name: statistics.median(ts) for name, ts in times.items()}
    for name, ts in times.items():
        print(f"  {name:48s} {per_call[name]:7.2f} us per call  (rounds {min(ts):.2f}..{max(ts):.2f})")
    gpu = {"seed kernel": gpu_us_per_launch(lambda: raw(a, b, c)),
           "torch.matmul": gpu_us_per_launch(lambda: torch.matmul(a, b, out=c16))}
    for name, us in gpu.items():
        print(f"  GPU time per launch, {name:23s} {us:7.2f} us")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({**facts, "rounds": args.rounds, "per_call_us": per_call, "per_round_us": times,
                       "gpu_us_per_launch": gpu}, f, indent=1)


if __name__ == "__main__":
    main()
