"""Where the host time of one cached call goes (GPU): the seed GEMM at 128^3 in a host-bound loop, taken apart.

    python benchmarks/host_cost.py [--n 3000] [--json out.json]

Each line times N back-to-back calls of one piece of the call path, synchronised once at the end (per-call wall
time), next to torch.matmul in the same loop:
  - `gemm(a, b, c)`: the whole cached call of the `@lazy_jit` kernel;
  - the front end alone (the launch replaced by a no-op): binding, checks, the compiled-kernel lookup;
  - `kernel(a, b, c)` and `kernel._func(a, b, c)`: the CompiledKernel and the raw tvm_ffi function on torch tensors;
  - the raw function on tensors converted to tvm_ffi once (what DLPack conversion per call costs);
  - where the bare launch goes: a no-op tvm_ffi function on the same three tensors (the FFI's own cost), the seed
    lowered with cp.async (no tensor maps to encode per call), and, with `--cuda-host`, the seed built through TVM's
    `cuda_host` target (host code as CUDA C++ with direct cudaLaunchKernelEx, compiled by nvcc; an experiment);
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


def cuda_host_launch(func):
    """The seed built with TVM's `cuda_host` host target: one CUDA C++ unit (device code and a host wrapper that
    encodes tensor maps and calls cudaLaunchKernelEx itself), built by tvm_ffi.cpp with nvcc. Returns
    (tvm_ffi function, build seconds)."""
    import tempfile

    import tvm
    import tvm_ffi
    import tvm_ffi.cpp
    from tvm.backend.cuda import export_cuda_host

    from tile_nb.lower import lower
    from tile_nb.runtime.compile import with_device_facts

    start = time.perf_counter()
    major, minor = torch.cuda.get_device_capability()
    arch = f"sm_{major}{minor}{'a' if major >= 9 else ''}"
    target = tvm.target.Target({"kind": "cuda", "arch": arch}, host="cuda_host")
    built = tvm.compile(lower(with_device_facts(func, target), target), target=target)
    source = export_cuda_host(getattr(built, "mod", built))
    folder = tempfile.mkdtemp(prefix="tnb-cuda-host-")
    with open(os.path.join(folder, "kernel.cu"), "w") as f:
        f.write(source)
    os.environ.setdefault("TVM_FFI_CUDA_ARCH_LIST", f"{major}.{minor}{'a' if major >= 9 else ''}")
    library = tvm_ffi.cpp.build("kernel", sources=[os.path.join(folder, "kernel.cu")], extra_cuda_cflags=["-O3"],
                                extra_ldflags=["-lcuda"], build_directory=folder)
    module = tvm_ffi.load_module(library)
    return module[str(func.attrs["global_symbol"])], time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=3000)
    parser.add_argument("--size", type=int, default=128)
    parser.add_argument("--json", default=None)
    parser.add_argument("--cuda-host", action="store_true", help="also time the seed built with TVM's cuda_host")
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
        try:
            direct, seconds = cuda_host_launch(seed_func(size))
        except Exception as error:  # an experiment: report why it could not be built, time the rest
            print(f"  cuda_host build failed: {type(error).__name__}: {str(error)[-600:]}")
        else:
            c.zero_()
            direct(a, b, c)
            torch.testing.assert_close(c, (a.float() @ b.float()), atol=1e-2, rtol=1e-3)
            facts["cuda_host_build_s"] = round(seconds, 2)
            print(f"  cuda_host build: {seconds:.1f} s")
            row("seed, cuda_host build: fn(a, b, c)", lambda: direct(a, b, c))
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
