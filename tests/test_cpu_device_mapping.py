"""`python -m tile_nb.run --cpu` (tile_nb/tilelang/cpu_device.py, cpu_triton.py) beyond the tensor factories:
`torch.random.fork_rng(devices=[0])` (torch.cuda's RNG state is the CPU generator's: tilelang's
flash_decoding varlen example), and Triton's interpreter (TRITON_INTERPRET=1), whose autotuner and do_bench
ask the active driver, which must not be Triton's NVIDIA one (it needs libcuda: tilelang's blocksparse Triton
examples). Each script runs in its own process (with this checkout's tile_nb), as the conformance runner runs
examples."""
import importlib.util
import os
import subprocess
import sys
import textwrap

import pytest

import tile_nb

ROOT = os.path.dirname(os.path.dirname(tile_nb.__file__))

FORK_RNG = '''
import torch

devices = list(range(torch.cuda.device_count()))
assert devices == [0]
torch.manual_seed(1)
before = torch.randn(3)
with torch.random.fork_rng(devices=devices):
    torch.manual_seed(0)
    torch.cuda.manual_seed_all(0)
    inside = torch.randn(4, device="cuda")
    state = torch.cuda.get_rng_state()
after = torch.randn(3)
torch.manual_seed(1)
assert torch.equal(torch.randn(3), before) and torch.equal(torch.randn(3), after)   # the state came back
torch.manual_seed(0)
assert torch.equal(torch.randn(4), inside)
torch.cuda.set_rng_state(state)
torch.cuda.set_rng_state_all([state])
assert torch.equal(torch.cuda.get_rng_state_all()[0], torch.get_rng_state())
print("fork_rng ok", torch.cuda.initial_seed() == torch.initial_seed())
'''

FAKE_DRIVER = '''
class DriverConfig:
    def __init__(self):
        self._active = None

    @property
    def active(self):
        if self._active is None:
            raise AssertionError("libcuda.so cannot found!")   # what Triton's NVIDIA driver says here
        return self._active

    def set_active(self, driver):
        self._active = driver


driver = DriverConfig()
'''

USES_FAKE = '''
import torch
from triton.runtime.driver import driver

bench = driver.active.get_benchmarker()
calls = []
times = bench(lambda: calls.append(1), quantiles=(0.5, 0.2, 0.8))
assert len(times) == 3 and calls == [1] and all(t >= 0 for t in times)
assert driver.active.get_device_interface() is torch.cuda
cache = driver.active.get_empty_cache_for_benchmark()
driver.active.clear_cache(cache)
print("driver", type(driver.active).__name__, driver.active.get_current_device())
'''

TRITON_AUTOTUNE = '''
import torch
import triton
import triton.language as tl


@triton.autotune(configs=[triton.Config({}, num_warps=w, num_stages=s) for w in (1, 2) for s in (1, 3)],
                 key=["n"])
@triton.jit
def add_one(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) + 1.0, mask=mask)


x = torch.randn(77, device="cuda")
y = torch.empty_like(x)
add_one[(triton.cdiv(77, 32),)](x, y, 77, BLOCK=32)
torch.testing.assert_close(y, x + 1.0)
assert triton.testing.do_bench(lambda: add_one[(3,)](x, y, 77, BLOCK=32), warmup=1, rep=1) >= 0
print("triton ok")
'''


def _run_cpu(tmp_path, text, extra_path=None, interpret=True):
    (tmp_path / "script.py").write_text(textwrap.dedent(text))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    env.pop("TRITON_INTERPRET", None)
    if interpret is not None:
        env["TRITON_INTERPRET"] = "1" if interpret else "0"
    if extra_path:
        env["PYTHONPATH"] = os.pathsep.join([str(extra_path), env.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, "-m", "tile_nb.run", "--cpu", "script.py"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300, env=env)


def test_fork_rng_over_the_cuda_device(tmp_path):
    out = _run_cpu(tmp_path, FORK_RNG)
    assert out.returncode == 0, out.stderr
    assert "fork_rng ok True" in out.stdout


def test_device_contexts_switch_nothing(tmp_path):
    """`with torch.cuda.device(0)` (and `torch.cpu.device(i)`, which flash-linear-attention's input guard asks
    for when Triton reports no GPU) run their block on the one device there is."""
    script = ("import torch\nwith torch.cuda.device(0):\n    x = torch.ones(2, device='cuda')\n"
              "with torch.cpu.device(None):\n    y = x + 1\nprint('devices ok', y.tolist())\n")
    out = _run_cpu(tmp_path, script)
    assert out.returncode == 0, out.stderr
    assert "devices ok [2.0, 2.0]" in out.stdout


def test_tritons_driver_is_the_interpreters(tmp_path):
    """A stand-in Triton whose driver module fails as the NVIDIA driver does without libcuda: under --cpu with
    TRITON_INTERPRET=1 the interpreter driver is set when the module is imported."""
    fake = tmp_path / "fake"
    (fake / "triton" / "runtime").mkdir(parents=True)
    (fake / "triton" / "__init__.py").write_text("")
    (fake / "triton" / "runtime" / "__init__.py").write_text("")
    (fake / "triton" / "runtime" / "driver.py").write_text(FAKE_DRIVER)
    out = _run_cpu(tmp_path, USES_FAKE, extra_path=fake)
    assert out.returncode == 0, out.stderr
    assert "driver InterpreterDriver 0" in out.stdout
    # with TRITON_INTERPRET=0 (--cpu sets 1 unless told otherwise), Triton's own driver stays
    out = _run_cpu(tmp_path, USES_FAKE, extra_path=fake, interpret=False)
    assert out.returncode != 0 and "libcuda.so cannot found!" in out.stderr
    # not set at all: --cpu runs Triton's kernels on its interpreter (tile_nb.run sets TRITON_INTERPRET=1)
    out = _run_cpu(tmp_path, USES_FAKE, extra_path=fake, interpret=None)
    assert out.returncode == 0 and "driver InterpreterDriver 0" in out.stdout, out.stderr


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="Triton is not installed")
def test_a_triton_autotuned_kernel_on_the_interpreter(tmp_path):
    out = _run_cpu(tmp_path, TRITON_AUTOTUNE)
    assert out.returncode == 0, out.stderr
    assert "triton ok" in out.stdout


FLOAT16_PRODUCTS = '''
import time
import torch
import torch.nn.functional as F

g = torch.Generator().manual_seed(0)
a, b = torch.randn(96, 80, generator=g), torch.randn(80, 64, generator=g)
h, k = a.half(), b.half()
expected = (a.half().float() @ b.half().float()).half()   # float32 sums of the float16 values, rounded once
products = {
    "@": h @ k, "matmul": torch.matmul(h, k), "mm": torch.mm(h, k), "Tensor.mm": h.mm(k),
    "bmm": torch.bmm(h[None], k[None])[0], "einsum": torch.einsum("ij,jk->ik", h, k),
    "einsum list": torch.einsum("ij,jk->ik", [h, k]), "linear": F.linear(h, k.T),
}
for name, p in products.items():
    assert p.dtype == torch.float16 and torch.equal(p, expected), name
assert torch.mm(a, b).dtype == torch.float32 and (h.bfloat16() @ k.bfloat16()).dtype == torch.bfloat16
out = torch.empty(96, 64, dtype=torch.float16)
torch.mm(h, k, out=out)                                    # out=: torch's own path
assert (out.float() - expected.float()).abs().max() <= 2 ** -5 * expected.float().abs().max()
x = torch.randn(512, 512).half()
start = time.perf_counter()
x @ x
print("float16 products ok", f"{(time.perf_counter() - start) * 1e3:.0f} ms")
'''


def test_float16_products_compute_in_float32(tmp_path):
    """torch's CPU float16 GEMM runs at ~1 GFLOP/s; under --cpu a float16 product is computed in float32
    and rounded once (what cuBLAS does on the GPU), by every spelling of a matrix product."""
    out = _run_cpu(tmp_path, FLOAT16_PRODUCTS)
    assert out.returncode == 0, out.stderr
    assert "float16 products ok" in out.stdout
