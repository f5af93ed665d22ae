"""Run a CUDA-minded tilelang script on the CPU interpreter: torch's "cuda" device requests become "cpu".

`python -m tile_nb.run --cpu script.py` (and the conformance runner's `--backend interp`) installs this in the
script's process before the script runs. It patches, for that process only:
- torch's tensor factories (`torch.randn(..., device="cuda")`, `zeros`, `empty`, `*_like`, `arange`,
  `tensor`, ...) and `Tensor.to(...)`: a "cuda" / "cuda:N" / `torch.device("cuda")` / integer device
  becomes "cpu"; `Tensor.cuda()` returns the tensor itself (already on the CPU);
  `torch.Generator(device="cuda")` is a CPU one;
- `torch.cuda`: `is_available()` is True, one device, compute capability (9, 0) (tile_nb's
  main target, sm_90a), `synchronize`, `manual_seed*`, `empty_cache`, `set_device`, `with
  torch.cuda.device(i)` (and `torch.cpu.device(i)`, which fla asks for when Triton has no GPU) do nothing,
  `Event` times on the host clock, `get_rng_state` / `set_rng_state` are the CPU generator's;
- Triton, when its interpreter runs (TRITON_INTERPRET=1): a CPU driver (cpu_triton.py);
- float16 matrix products (`@`, `torch.matmul` / `mm` / `bmm` / `einsum`, `F.linear`, the Tensor methods):
  computed in float32 and rounded once to float16, as cuBLAS accumulates them on a GPU. torch's own float16
  GEMM on the CPU runs at ~1 GFLOP/s (2 cores, 2026-12-07: a 1024^3 product in 3.4 s), which made the
  references of GEMM examples, not their kernels, outlast the conformance runner's time limit. The result
  differs from torch's CPU float16 product by summation order only (1 ulp on ~0.2% of the elements).
tile_nb kernels then see CPU tensors and run on the interpreter. Nothing else changes: a script that needs a
real GPU for something else (its own CUDA extension, cuBLAS through a library) fails there, as it should.
"""
from __future__ import annotations

import functools
import time
import types

__all__ = ["install", "active", "map_device"]

_active = False
_FACTORIES = (
    "tensor",
    "as_tensor",
    "asarray",
    "empty",
    "zeros",
    "ones",
    "full",
    "rand",
    "randn",
    "randint",
    "randperm",
    "arange",
    "range",
    "linspace",
    "logspace",
    "eye",
    "empty_like",
    "zeros_like",
    "ones_like",
    "full_like",
    "rand_like",
    "randn_like",
    "randint_like",
    "empty_strided",
    "normal",
    "tril_indices",
    "triu_indices",
    "scalar_tensor",
    "frombuffer",
    "bernoulli",
    "multinomial",
    "poisson",
)


def active() -> bool:
    return _active


def map_device(device):
    """The CPU for any CUDA device spelling; other devices unchanged."""
    import torch

    if isinstance(device, bool):
        return device
    if isinstance(device, int):
        return "cpu"
    if isinstance(device, str):
        return "cpu" if device.split(":")[0] == "cuda" else device
    if isinstance(device, torch.device):
        return torch.device("cpu") if device.type == "cuda" else device
    return device


def _wrap_factory(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if "device" in kwargs:
            kwargs["device"] = map_device(kwargs["device"])
        return fn(*args, **kwargs)

    return wrapper


def _wrap_to(to):
    import torch

    dtype = torch.dtype
    devices = (str, int, torch.device)

    @functools.wraps(to)
    def wrapper(self, *args, **kwargs):
        # The interpreter calls `.to(dtype)` millions of times: that spelling goes straight through.
        if not kwargs and len(args) == 1 and type(args[0]) is dtype:
            return to(self, args[0])
        if args and isinstance(args[0], devices) and not isinstance(args[0], bool):
            args = (map_device(args[0]), *args[1:])
        if "device" in kwargs:
            kwargs["device"] = map_device(kwargs["device"])
        return to(self, *args, **kwargs)

    return wrapper


def _float16_in_float32(fn):
    """`fn` (a matrix product) with float16 tensor operands computed in float32 and the result rounded to
    float16 (the module's docstring says why); other calls (an operand not float16, an `out=`) go through."""
    import torch

    half = torch.float16

    def tensors(values):
        for v in values:
            if isinstance(v, (list, tuple)):  # einsum's operands as one list
                yield from tensors(v)
            elif isinstance(v, torch.Tensor):
                yield v

    def widen(v):
        if isinstance(v, (list, tuple)):
            return [widen(x) for x in v]
        return v.float() if isinstance(v, torch.Tensor) else v

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        operands = list(tensors([*args, *kwargs.values()]))
        if "out" in kwargs or not operands or any(t.dtype != half for t in operands):
            return fn(*args, **kwargs)
        return fn(*map(widen, args), **{k: widen(v) for k, v in kwargs.items()}).to(half)

    return wrapper


def _patch_float16_products(torch) -> None:
    for name in ("matmul", "mm", "bmm"):
        setattr(torch, name, _float16_in_float32(getattr(torch, name)))
        setattr(torch.Tensor, name, _float16_in_float32(getattr(torch.Tensor, name)))
    torch.Tensor.__matmul__ = _float16_in_float32(torch.Tensor.__matmul__)
    torch.einsum = _float16_in_float32(torch.einsum)
    torch.nn.functional.linear = _float16_in_float32(torch.nn.functional.linear)


class _Event:
    """torch.cuda.Event on the host clock."""

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False):
        self.t = None

    def record(self, stream=None):
        self.t = time.perf_counter()

    def synchronize(self):
        pass

    def wait(self, stream=None):
        pass

    def query(self):
        return True

    def elapsed_time(self, end) -> float:
        return (end.t - self.t) * 1e3


class _Stream:
    def __init__(self, *args, **kwargs):
        pass

    def synchronize(self):
        pass

    def wait_stream(self, other):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class _Device:
    """`with torch.cuda.device(i):` (and `torch.cpu.device(i)`, which torch lacks: flash-linear-attention's
    input guard asks its device module for one, `torch.cpu` when Triton has no GPU backend): one device,
    nothing to switch."""

    def __init__(self, device=None):
        self.idx = 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def install() -> None:
    """Patch torch in this process (idempotent)."""
    global _active
    if _active:
        return
    import torch

    for name in _FACTORIES:
        fn = getattr(torch, name, None)
        if fn is not None:
            setattr(torch, name, _wrap_factory(fn))
    torch.Tensor.to = _wrap_to(torch.Tensor.to)
    torch.Tensor.cuda = lambda self, *args, **kwargs: self
    base = torch.Generator

    class Generator(base):
        """torch.Generator whose "cuda" device is the CPU."""

        def __new__(cls, device="cpu"):
            return base.__new__(cls, map_device(device))

        def __init__(self, device="cpu"):
            pass

    torch.Generator = Generator

    props = types.SimpleNamespace(
        name="tile_nb interpreter (CPU)",
        major=9,
        minor=0,
        multi_processor_count=132,
        total_memory=80 * 2**30,
        L2_cache_size=50 * 2**20,
        warp_size=32,
        gcnArchName="",
        shared_memory_per_block=48 * 1024,
        shared_memory_per_block_optin=227 * 1024,
        shared_memory_per_multiprocessor=228 * 1024,
        regs_per_multiprocessor=65536,
        max_threads_per_multi_processor=2048,
    )  # an H100 SXM's facts (sm_90)
    cuda = torch.cuda

    def nothing(name):
        """A do-nothing function of its own for each name: torch.compile's trace rules map every torch object
        to one rule and refuse one function object under two names ("Duplicate torch object")."""
        def do_nothing(*args, **kwargs):
            return None

        do_nothing.__name__ = do_nothing.__qualname__ = name
        return do_nothing

    cuda.is_available = lambda: True
    cuda.device_count = lambda: 1
    cuda.current_device = lambda: 0
    cuda.set_device = nothing("set_device")
    cuda.synchronize = nothing("synchronize")
    cuda.empty_cache = nothing("empty_cache")
    cuda.manual_seed = nothing("manual_seed")
    cuda.manual_seed_all = nothing("manual_seed_all")
    # torch.cuda's generator is the CPU's: "cuda" tensors are made on the CPU, from its generator
    # (torch.random.fork_rng(devices=[0]) saves and restores the state through these)
    cuda.get_rng_state = lambda device="cuda": torch.get_rng_state()
    cuda.set_rng_state = lambda new_state, device="cuda": torch.set_rng_state(new_state)
    cuda.get_rng_state_all = lambda: [torch.get_rng_state()]
    cuda.set_rng_state_all = lambda new_states: torch.set_rng_state(new_states[0])   # one device
    cuda.initial_seed = lambda: torch.initial_seed()
    cuda.get_device_capability = lambda device=None: (9, 0)
    cuda.get_device_name = lambda device=None: props.name
    cuda.get_device_properties = lambda device=None: props
    cuda.Event = _Event
    cuda.Stream = _Stream
    cuda.current_stream = lambda device=None: _Stream()
    cuda.default_stream = lambda device=None: _Stream()
    cuda.stream = lambda stream=None: _Stream()
    cuda.device = _Device
    if not hasattr(torch.cpu, "device"):
        torch.cpu.device = _Device
    _patch_float16_products(torch)
    from . import cpu_triton

    cpu_triton.install()   # Triton's interpreter: a CPU driver for its autotuner and do_bench
    _active = True
