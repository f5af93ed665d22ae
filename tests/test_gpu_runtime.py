"""Launching compiled kernels on a CUDA GPU: results against torch on random inputs, torch's current stream,
a kernel with >= 48 KB of dynamic shared memory, the disk cache across processes, and CUDA-event timing."""
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from kernels.hopper import needs_hopper_plan, why_no_hopper_plan
from kernels.tirx_modules import add_module, rowsum_module

import tile_nb.runtime as rt

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parent.parent
TESTS = Path(__file__).resolve().parent
PYPATH = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])   # keep e.g. the GPU kit's TVM


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TILE_NB_CACHE_DIR", str(tmp_path / "cache"))
    rt.clear_memory_cache()
    yield tmp_path / "cache"
    rt.clear_memory_cache()


def rel_err(out, ref):
    out, ref = out.double(), ref.double()
    return float((out - ref).norm() / ref.norm())


@pytest.mark.parametrize("compiler", ["nvrtc", "nvcc"])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_elementwise_add_matches_torch(dtype, compiler):
    from tile_nb.backend import available_compiler

    if available_compiler(compiler) != compiler:
        pytest.skip(f"{compiler} is not available")
    kernel = rt.compile(add_module(dtype=dtype), None, options={"compiler": compiler})
    assert kernel.launchable, kernel.not_launchable_reason
    tdtype = getattr(torch, dtype)
    for n in (1, 1000, 1 << 20):                      # not multiples of the block: the guard must hold
        a = torch.randn(n, device="cuda", dtype=tdtype)
        b = torch.randn(n, device="cuda", dtype=tdtype)
        # poisoned: every element must be written
        c = torch.full((n,), float("nan"), device="cuda", dtype=tdtype)
        kernel(a, b, c, n)
        torch.cuda.synchronize()
        assert not torch.isnan(c).any()
        assert rel_err(c, a.double() + b.double()) < (1e-6 if dtype == "float32" else 1e-3)


def test_shared_memory_kernel_matches_torch():
    kernel = rt.compile(rowsum_module(rows=64, cols=256), None)
    a = torch.randn(64, 256, device="cuda", dtype=torch.float32)
    b = torch.full((64,), float("nan"), device="cuda")
    kernel(a, b)
    torch.cuda.synchronize()
    assert rel_err(b, a.double().sum(1)) < 1e-5


def test_runs_on_torchs_current_stream():
    """Queue a long sleep and then new inputs on a side stream: a kernel launched on that stream sees them;
    one on another stream would run first and read the old inputs."""
    kernel = rt.compile(add_module(), None)
    n = 1 << 22
    a = torch.zeros(n, device="cuda")
    b = torch.ones(n, device="cuda")
    c = torch.empty(n, device="cuda")
    new_a = torch.full((n,), 2.0, device="cuda")
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        torch.cuda._sleep(200_000_000)            # ~0.1 s of GPU time on the side stream
        a.copy_(new_a)
        kernel(a, b, c, n)
    side.synchronize()
    assert torch.equal(c, torch.full_like(c, 3.0))


def test_wrong_arguments_raise_instead_of_launching():
    kernel = rt.compile(add_module(), None)
    a = torch.randn(128, device="cuda")
    with pytest.raises(TypeError, match="takes 4 arguments"):
        kernel(a, a, a)
    with pytest.raises((ValueError, TypeError, RuntimeError)):   # TVM's host-side checks: dtype
        kernel(a.half(), a, a, 128)


def test_seed_gemm_through_the_runtime():
    """The front end + tile_nb.lower path; 49200 B of dynamic shared memory (the >= 48 KB attribute path)."""
    from kernels.seed import fresh_gemm

    gemm = fresh_gemm()
    M, N, K = 512, 384, 256
    A = torch.randn(M, K, device="cuda", dtype=torch.float16)
    B = torch.randn(K, N, device="cuda", dtype=torch.float16)
    C = torch.full((M, N), float("nan"), device="cuda", dtype=torch.float32)
    kernel = gemm.compile(A, B, C)
    # 3 stages of A and B tiles, and on sm_90a a full and an empty mbarrier per stage (the TMA pipeline)
    barriers = 48 if why_no_hopper_plan() is None else 0
    assert kernel.launchable and kernel.resources.dynamic_shared_bytes == 49152 + barriers
    kernel(A, B, C)
    torch.cuda.synchronize()
    assert rel_err(C, A.double() @ B.double()) < 1e-3
    # tensor-core instructions: mma.sync (HMMA) or, on sm_90a, wgmma (HGMMA)
    assert kernel.sass is None or "HMMA" in kernel.sass or "HGMMA" in kernel.sass


def test_disk_cache_hit_in_a_new_process_launches(own_cache):
    first = rt.compile(add_module(), None)
    assert "module.so" in os.listdir(first.cache_path)
    script = textwrap.dedent(f"""
        import json, sys, time
        sys.path[:0] = [{str(ROOT)!r}, {str(TESTS)!r}]
        import torch, tvm
        import tile_nb.runtime as rt
        from kernels.tirx_modules import add_module
        mod = add_module()
        t = time.perf_counter()
        k = rt.compile(mod, None)
        seconds = time.perf_counter() - t
        n = 5000
        a = torch.randn(n, device="cuda"); b = torch.randn(n, device="cuda"); c = torch.empty(n, device="cuda")
        k(a, b, c, n); torch.cuda.synchronize()
        print(json.dumps({{"from_cache": k.from_cache, "seconds": seconds, "ok": bool(torch.allclose(c, a + b)),
                           "timings": k.timings}}))
    """)
    env = dict(os.environ, TILE_NB_CACHE_DIR=str(own_cache), PYTHONPATH=PYPATH)
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300, check=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["from_cache"] and out["ok"]
    assert set(out["timings"]) == {"key", "cache_load"}
    assert out["seconds"] < 0.5, out              # the target (50 ms) is measured in benchmarks/compile.py


@needs_hopper_plan
def test_tma_gemm_from_the_disk_cache_in_a_new_process(own_cache):
    """The exported module of a TMA kernel carries the host code that encodes its tensor maps per call."""
    from kernels.seed import gemm_ir

    first = rt.compile(gemm_ir(1000, 1032, 1000, block_N=256, block_K=64, threads=256), None)
    assert "cp.async.bulk.tensor" in first.cuda_source and "module.so" in os.listdir(first.cache_path)
    script = textwrap.dedent(f"""
        import json, sys
        sys.path[:0] = [{str(ROOT)!r}, {str(TESTS)!r}]
        import torch
        import tile_nb.runtime as rt
        from kernels.seed import gemm_ir
        k = rt.compile(gemm_ir(1000, 1032, 1000, block_N=256, block_K=64, threads=256), None)
        a = torch.randn(1000, 1000, device="cuda").half(); b = torch.randn(1000, 1032, device="cuda").half()
        c = torch.full((1000, 1032), float("nan"), device="cuda")
        k(a, b, c); torch.cuda.synchronize()
        ref = a.double() @ b.double()
        print(json.dumps({{"from_cache": k.from_cache, "err": float((c.double() - ref).norm() / ref.norm())}}))
    """)
    env = dict(os.environ, TILE_NB_CACHE_DIR=str(own_cache), PYTHONPATH=PYPATH)
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300, check=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["from_cache"] and out["err"] < 1e-3, out


def test_do_bench_with_events_and_l2_flush():
    from tile_nb.bench import do_bench, gemm_flops, l2_flush_bytes, tflops

    props = torch.cuda.get_device_properties(0)
    assert l2_flush_bytes() > getattr(props, "L2_cache_size", 0)
    a = torch.randn(2048, 2048, device="cuda", dtype=torch.float16)
    t = do_bench(lambda: a @ a, rep_ms=50)
    assert t.device == "cuda" and t.n >= 10 and 0 < t.p20 <= t.median_ms <= t.p80
    assert 1 < tflops(gemm_flops(2048, 2048, 2048), t) < 2000


def test_repeated_calls_launch_directly_and_new_call_facts_still_compile_their_kernel():
    """The fast path: a call on tensors like an earlier one's (shapes, dtypes, alignment, divisibility of
    T.dynamic dims) launches the kernel directly; a misaligned view or a non-multiple-of-16 dynamic dim still
    gets its own kernel, and CPU tensors still run the interpreter."""
    import tile_nb
    import tile_nb.language as T

    @tile_nb.jit
    def axpy(X, Y, Z, block: int = 128):
        N = T.dynamic('N')
        X: T.Tensor[[N], T.float32]
        Y: T.Tensor[[N], T.float32]
        Z: T.Tensor[[N], T.float32]
        with T.Kernel(T.ceildiv(N, block), threads=128) as bx:
            for i in T.Parallel(block):
                if bx * block + i < N:
                    Z[bx * block + i] = X[bx * block + i] * 2.0 + Y[bx * block + i]

    def check(n, offset=0, device="cuda"):
        x = torch.randn(n + offset, device=device)[offset:]
        y, z = torch.randn(n, device=device), torch.full((n,), float("nan"), device=device)
        axpy(x, y, z)
        torch.testing.assert_close(z, 2 * x + y)

    check(4096)
    (spec,) = [s for t in axpy._templates.values() for s in t.specializations.values()]
    assert len(spec.launches) == 1 and axpy.stats["compilations"] == 1
    for _ in range(3):
        check(4096)                 # direct launches: nothing new compiled
    assert axpy.stats["compilations"] == 1
    check(4096, offset=1)           # a misaligned view: its own kernel, without vector access
    check(4000)                     # 4000 % 16 == 0: divisible, as 4096
    check(4001)                     # not divisible: its own kernel
    assert axpy.stats["compilations"] == 3 and len(spec.launches) == 3
    check(4096, offset=1)
    check(4001)
    assert axpy.stats["compilations"] == 3
    check(4096, device="cpu")       # same shapes on the CPU: the interpreter, not a launch
    # The direct path leaves dtype, strides and device to the kernel's host function; when it refuses, the
    # checked path names the problem (and nothing was launched).
    from tile_nb.errors import ArgumentError

    (fast,) = axpy._fast.values()
    assert len(fast.direct) >= 2
    x, y = torch.randn(4096, device="cuda"), torch.randn(4096, device="cuda")
    z = torch.full((4096,), float("nan"), device="cuda")
    with pytest.raises(ArgumentError, match="float64"):
        axpy(x.double(), y, z)
    with pytest.raises(ArgumentError, match="contiguous"):
        axpy(torch.randn(8192, device="cuda")[::2], y, z)
    with pytest.raises(ArgumentError, match="device|cpu"):
        axpy(x, y.cpu(), z)
    assert torch.isnan(z).all()


def test_pointer_arguments_without_tensors_find_their_memory():
    """`T.ptr` parameters called with bare `data_ptr()` ints: device pointers launch the kernel, host pointers
    run the interpreter (no tensor argument says which; CUDA is asked)."""
    import tile_nb
    import tile_nb.language as T

    @tile_nb.jit
    def add_one(X: T.ptr, Y: T.ptr, block: int = 64):
        N = T.const('N')
        Xt = T.make_tensor(X, (N,), T.float32)
        Yt = T.make_tensor(Y, (N,), T.float32)
        with T.Kernel(T.ceildiv(N, block), threads=64) as bx:
            for i in T.Parallel(block):
                if bx * block + i < N:
                    Yt[bx * block + i] = Xt[bx * block + i] + 1.0

    for device in ("cuda", "cpu"):
        x, y = torch.randn(100, device=device), torch.zeros(100, device=device)
        add_one(x.data_ptr(), y.data_ptr(), N=100)
        torch.cuda.synchronize()
        assert torch.equal(y, x + 1), device
    assert add_one.stats["compilations"] == 1   # the CUDA call only


CUDA_HOST = {"host": "cuda_host"}


@needs_hopper_plan  # the TMA GEMMs
@pytest.mark.parametrize("config", [
    dict(block_N=128, block_K=32, threads=128, num_stages=3),    # the seed: TMA + producer warp + TMA store
    # persistent CTAs over two consumer warpgroups
    dict(block_N=256, block_K=64, threads=256, num_stages=4),
], ids=["seed", "persistent-128x256"])
@pytest.mark.parametrize("shape", [(1000, 1032, 1000), (1, 8, 4096), (128, 128, 128)])
def test_cuda_host_launcher_runs_tma_gemms_and_loads_from_the_disk_cache(own_cache, config, shape):
    """host='cuda_host' (TVM's CUDA C++ host function, built by nvcc): the same results as the default launch
    on ragged and one-row shapes, from a fresh build and from the disk cache in this process."""
    from kernels.seed import gemm_ir

    M, N, K = shape
    func = gemm_ir(M, N, K, **config)
    lean = rt.compile(func, None, options=CUDA_HOST)
    assert lean.launchable and "cuda_host" in lean.timings and "module.so" in os.listdir(lean.cache_path)
    a = torch.randn(M, K, device="cuda", dtype=torch.float16)
    b = torch.randn(K, N, device="cuda", dtype=torch.float16)
    ref = a.double() @ b.double()
    for kernel in (lean, _reloaded(func, CUDA_HOST)):
        c = torch.full((M, N), float("nan"), device="cuda")
        kernel(a, b, c)
        torch.cuda.synchronize()
        assert rel_err(c, ref) < 1e-3
    assert _reloaded(func, CUDA_HOST).from_cache
    with pytest.raises((TypeError, ValueError), match="dtype"):
        lean(a.float(), b, c)        # the launcher's own argument checks


def _reloaded(func, options):
    rt.clear_memory_cache()
    return rt.compile(func, None, options=options)


def test_cuda_host_launcher_through_the_jit_with_dynamic_dims():
    """`@tile_nb.jit(compile_options={"host": "cuda_host"})`: a cp.async-free elementwise kernel
    over a T.dynamic dim; repeated calls take the direct path to the launcher, and a refused call
    still gets the checked error."""
    import tile_nb
    import tile_nb.language as T
    from tile_nb.backend.target import resolve_target, target_embeds_ptx
    from tile_nb.errors import ArgumentError

    if target_embeds_ptx(resolve_target(None)):  # refused by design (test_architectures checks the refusal)
        pytest.skip("host='cuda_host' builds machine code for one GPU; TILE_NB_ARCH asks for PTX")

    @tile_nb.jit(compile_options=CUDA_HOST)
    def axpy(X, Y, Z):
        N = T.dynamic('N')
        X: T.Tensor[[N], T.float32]
        Y: T.Tensor[[N], T.float32]
        Z: T.Tensor[[N], T.float32]
        with T.Kernel(T.ceildiv(N, 128), threads=128) as bx:
            for i in T.Parallel(128):
                if bx * 128 + i < N:
                    Z[bx * 128 + i] = X[bx * 128 + i] * 2.0 + Y[bx * 128 + i]

    for n in (1, 4096, 4096, 4096, 1001):
        x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
        z = torch.full((n,), float("nan"), device="cuda")
        axpy(x, y, z)
        torch.cuda.synchronize()
        torch.testing.assert_close(z, 2 * x + y)
    assert "cuda_host" in axpy.compile(x, y, z).timings
    (fast,) = axpy._fast.values()
    assert fast.direct
    with pytest.raises(ArgumentError, match="float64"):
        axpy(x.double(), y, z)
