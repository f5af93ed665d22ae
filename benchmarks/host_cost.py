"""Where the host time of one cached call goes (GPU): the seed GEMM at 128^3 in a host-bound loop, taken apart.

    python benchmarks/host_cost.py [--n 3000] [--cuda-host] [--json out.json]

Each line times N back-to-back calls of one piece of the call path, synchronised once at the end (per-call wall
time), next to torch.matmul in the same loop:
  - `gemm(a, b, c)`: the whole cached call of the `@lazy_jit` kernel;
  - the front end alone (the launch replaced by a no-op): binding, checks, the compiled-kernel lookup;
  - `kernel(a, b, c)` and `kernel._func(a, b, c)`: the CompiledKernel and the raw tvm_ffi function on torch tensors;
  - the raw function on tensors converted to tvm_ffi once (what DLPack conversion per call costs);
  - where the bare launch goes: a no-op tvm_ffi function on the same three tensors (the FFI's own cost), and the
    seed lowered with cp.async (no tensor maps to encode per call);
  - with `--cuda-host`, the same kernel built with host='cuda_host' (backend/cuda_host.py: TVM's host function as
    CUDA C++ calling cuTensorMapEncodeTiled and cudaLaunchKernelEx itself): the whole call and the bare launch;
  - the GPU time of one launch (launches queued behind `torch.cuda._sleep`, so the host is never waited on).
A loop is host-bound when its per-call time is above the GPU time per launch.
Results: benchmarks/results/dispatch.md ("Host cost of a cached GPU call").
"""
import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
import tile_nb  # noqa: E402
from kernels.seed import gemm, gemm_variant  # noqa: E402
from launch import per_call_us  # noqa: E402  (benchmarks/launch.py: N calls, one synchronisation)
from tile_nb.runtime.kernel import CompiledKernel  # noqa: E402


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


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=3000)
    parser.add_argument("--size", type=int, default=128)
    parser.add_argument("--json", default=None)
    parser.add_argument("--cuda-host", action="store_true", help="also time the build option host='cuda_host'")
    args = parser.parse_args()
    import tvm_ffi

    size = args.size
    a = torch.randn(size, size, device="cuda", dtype=torch.float16)
    b = torch.randn(size, size, device="cuda", dtype=torch.float16)
    c = torch.empty(size, size, device="cuda", dtype=torch.float32)
    c16 = torch.empty(size, size, device="cuda", dtype=torch.float16)
    gemm(a, b, c)
    torch.testing.assert_close(c, (a.float() @ b.float()), atol=1e-2, rtol=1e-3)
    kernel = gemm.compile(a, b, c)   # the very kernel the call above launched (same facts, from spec.compiled)
    raw = kernel._func
    ta, tb, tc = (tvm_ffi.from_dlpack(t) for t in (a, b, c))

    facts = {
        "device": torch.cuda.get_device_name(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "torch": torch.__version__, "tvm_ffi": getattr(tvm_ffi, "__version__", "?"), "size": size, "n": args.n,
        "torch_has_dlpack_c_exchange_api": hasattr(torch.Tensor, "__dlpack_c_exchange_api__")
        or hasattr(torch.Tensor, "__c_dlpack_exchange_api__"),
    }
    rows = {}

    def row(name, fn):
        rows[name] = per_call_us(fn, args.n)
        print(f"  {name:44s} {rows[name]:7.2f} us per call", flush=True)

    print(json.dumps(facts))
    row("empty loop", lambda: None)
    row("torch.matmul(a, b, out=c16)", lambda: torch.matmul(a, b, out=c16))
    row("gemm(a, b, c)  (whole cached call)", lambda: gemm(a, b, c))
    row("kernel(a, b, c)  (CompiledKernel)", lambda: kernel(a, b, c))
    row("kernel._func(a, b, c)  (tvm_ffi, torch)", lambda: raw(a, b, c))
    row("kernel._func(ta, tb, tc)  (tvm_ffi tensors)", lambda: raw(ta, tb, tc))
    row("tvm_ffi.from_dlpack(a)", lambda: tvm_ffi.from_dlpack(a))
    nop = tvm_ffi.get_global_func("testing.nop", allow_missing=True)
    if nop is not None:
        row("testing.nop(a, b, c)  (tvm_ffi call alone)", lambda: nop(a, b, c))
    from tile_nb.runtime import compile as rt_compile
    cp_async = rt_compile(seed_func(size, **{"tile_nb.tma": 0}), None)._func
    cp_async(a, b, c)
    torch.testing.assert_close(c, (a.float() @ b.float()), atol=1e-2, rtol=1e-3)
    row("seed, cp.async: _func(a, b, c)  (no tensor maps)", lambda: cp_async(a, b, c))
    if args.cuda_host:
        lean_gemm = tile_nb.jit(gemm.fn, compile_options={"host": "cuda_host"})
        c.zero_()
        lean_gemm(a, b, c)
        torch.testing.assert_close(c, (a.float() @ b.float()), atol=1e-2, rtol=1e-3)
        lean = lean_gemm.compile(a, b, c)
        facts["cuda_host_build_s"] = round(lean.timings.get("cuda_host", float("nan")), 2)
        print(f"  cuda_host launcher build: {facts['cuda_host_build_s']} s")
        row("host='cuda_host': gemm(a, b, c)  (whole call)", lambda: lean_gemm(a, b, c))
        row("host='cuda_host': kernel._func(a, b, c)", lambda: lean._func(a, b, c))
    row("torch.cuda.current_stream()", torch.cuda.current_stream)
    row("a.data_ptr(), a.shape, a.dtype", lambda: (a.data_ptr(), a.shape, a.dtype))
    # The front end alone: every launch the call could reach (the CompiledKernel, and the direct launches the
    # fast path keeps per specialization) replaced by a no-op.
    specs = [s for t in gemm._templates.values() for s in t.specializations.values()]
    facts["direct_launches"] = sum(len(s.launches) for s in specs)
    saved, launch = [dict(s.launches) for s in specs], CompiledKernel.__call__
    CompiledKernel.__call__ = lambda self, *args: None
    entries = list(gemm._fast.values())
    saved_direct = [dict(e.direct) for e in entries]
    for s in specs:
        s.launches.update({key: (lambda *args: None) for key in s.launches})
    for e in entries:
        e.direct.update({key: (lambda *args: None) for key in e.direct})
    try:
        row("gemm(a, b, c) with a no-op launch (front end)", lambda: gemm(a, b, c))
    finally:
        CompiledKernel.__call__ = launch
        for s, kept in zip(specs, saved):
            s.launches.update(kept)
        for e, kept in zip(entries, saved_direct):
            e.direct.update(kept)
    print(f"  direct launches kept by the fast path: {facts['direct_launches']}")
    gpu = {"seed kernel": gpu_us_per_launch(lambda: raw(a, b, c)),
           "torch.matmul": gpu_us_per_launch(lambda: torch.matmul(a, b, out=c16))}
    for name, us in gpu.items():
        print(f"  GPU time per launch, {name:23s} {us:7.2f} us")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({**facts, "per_call_us": rows, "gpu_us_per_launch": gpu}, f, indent=1)


if __name__ == "__main__":
    main()
