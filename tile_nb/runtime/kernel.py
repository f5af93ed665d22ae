"""CompiledKernel: one built kernel, every stage's text, and a launcher for torch CUDA tensors.

Launching goes through the TVM module's host function via `tvm_ffi`: torch tensors pass by DLPack
without a copy, and tvm_ffi runs the kernel on torch's current stream of the tensors' device (it
asks torch for the stream at each call), so the kernel is ordered with the surrounding torch work
and with CUDA graphs under capture.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..backend.resources import Resources
from ..errors import TileNBError

__all__ = ["CompiledKernel", "KernelNotLaunchableError", "OneStreamAtATime"]

class KernelNotLaunchableError(TileNBError, RuntimeError):
    """The kernel was built (source, cubin, resources) but cannot run in this
    process; the message says why."""


@dataclass(eq=False)
class CompiledKernel:
    """A compiled kernel. Build one with `tile_nb.runtime.compile(func, target)`.

    Attributes hold every stage's text so views render without recompiling: `lowered_ir` (TVMScript handed to
    `tvm.compile`), `cuda_source`, `ptx`, `sass` (made on first access when cuobjdump/nvdisasm
    exist), `resources` (registers, shared memory, spills, stack of the kernel), `timings` (stage
    -> seconds spent in this process).

    Example::

        kernel = tile_nb.runtime.compile(func, "sm_90a")
        kernel(a, b, c)            # torch CUDA tensors, in func.params order
        print(kernel.resources)    # 12 registers, 0 B shared, 0 B spill stores, ...
    """

    name: str                                   # the host entry (the PrimFunc's global_symbol)
    target: Any                                 # tvm.target.Target
    arch: str
    params: tuple[str, ...]                     # parameter names, in call order
    cuda_source: str
    lowered_ir: str
    cubin: bytes | None = None
    compiler: str | None = None
    resources_by_kernel: dict[str, Resources] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    build_timings: dict[str, float] = field(default_factory=dict)   # what the original build spent
    key: str | None = None
    cache_path: str | None = None
    from_cache: bool = False
    not_launchable_reason: str | None = None
    # the lowering's decisions (tile_nb.lower.KernelPlan.summary())
    plan: dict | None = None
    # "lowered" / "cuda" -> {region id: [1-based lines of that text]}: the code each statement of the phase-2
    # IR became (tile_nb.lower.sourcemap; the views turn region ids into the user's lines)
    source_regions: dict = field(default_factory=dict)
    _ptx: str | None = None
    _sass: str | None = None
    _module: Any = None                          # TVM runtime module (kept alive while the function is used)
    _func: Any = None

    # ------------------------------------------------------------------ artifacts

    @property
    def pipeline(self) -> str | None:
        """How the lowering built the kernel's `T.Pipelined` loop, and why (e.g. "TMA + mbarriers, producer
        warp (warp-specialized)" or "cp.async (...)"); None when the kernel has no pipelined loop."""
        return (self.plan or {}).get("pipeline") or None

    @property
    def resources(self) -> Resources | None:
        """Resource use of the kernel (the largest of each figure if the module holds several kernels)."""
        from ..backend.resources import combine

        return combine(self.resources_by_kernel)

    @property
    def ptx(self) -> str | None:
        """PTX text: kept from the compile, else made with `nvcc -ptx`; None when no tool can make it."""
        if self._ptx is None:
            from ..backend.cuda_compile import compile_ptx

            self._ptx = compile_ptx(self.cuda_source, self.arch)
        return self._ptx

    @property
    def sass(self) -> str | None:
        """SASS disassembly of the cubin (cuobjdump or nvdisasm); None without
        a cubin or without the tools."""
        if self._sass is None and self.cubin is not None:
            from ..backend.cuda_compile import disassemble

            self._sass = disassemble(self.cubin)
        return self._sass

    @property
    def launchable(self) -> bool:
        return self._func is not None

    @property
    def asm(self) -> dict[str, str | None]:
        """Every stage's text by name (Triton's `kernel.asm`)."""
        return {"lowered_ir": self.lowered_ir, "cuda": self.cuda_source, "ptx": self.ptx, "sass": self.sass}

    # ------------------------------------------------------------------ launch

    def __call__(self, *args):
        """Launch on torch CUDA tensors (and Python numbers for scalar parameters), in `params` order."""
        func = self._func
        if func is None:
            raise KernelNotLaunchableError(
                f"kernel {self.name!r} cannot run here: {self.not_launchable_reason}"
            )
        if len(args) != len(self.params):
            raise TypeError(
                f"kernel {self.name!r} takes {len(self.params)} arguments ({', '.join(self.params)}); "
                f"got {len(args)}"
            )
        return func(*args)

    def _set_launch(self, module, func) -> None:
        """Keep `module` alive and launch through `func`; a kernel whose module holds state across a launch
        (stream-K's workspace and flags) launches through `OneStreamAtATime`, one whose plan lists hand
        layouts of parameters through their permutations (runtime/layouts.py)."""
        self._module = module
        self._func = OneStreamAtATime(func) if (self.plan or {}).get("stream_k") else func
        from .debug import DebugLaunch, debug_ops_of

        prints, asserts = debug_ops_of(self.cuda_source)
        if prints or asserts:  # T.print / T.device_assert: output into the notebook cell, asserts as errors
            self._func = DebugLaunch(self._func, self.name, asserts)
        from .layouts import HandLayouts

        hand = HandLayouts.of_plan(self.name, self.params, self.plan)
        if hand is not None:  # T.Layout on a parameter: the tensor is permuted around each launch
            self._func = hand.wrap(self._func)

    def __repr__(self) -> str:
        where = "from cache" if self.from_cache else "built"
        run = "launchable" if self.launchable else "not launchable"
        return f"<CompiledKernel {self.name}({', '.join(self.params)}) {self.arch}, {where}, {run}>"


class OneStreamAtATime:
    """Launches of a kernel whose module keeps state during a launch (stream-K's partial sums and flags
    live in `__device__` arrays of the module) must not overlap. Launches on one stream never do; a launch
    on another stream than the previous one (per device) first waits for the previous one (a CUDA event),
    so that two streams take turns instead of sharing the workspace. A stream query and an event record per
    launch are cheap beside kernels that run for hundreds of microseconds
    (docs/decisions.md#stream-k-and-its-cost-model). Under CUDA graph capture it stays out of the way
    (events recorded outside a capture must not enter it); replaying one graph on two streams at once is
    the one case it does not order."""

    def __init__(self, func):
        self.func = func
        self.last: dict = {}  # device index -> (stream, event recorded after the launch on it)

    def __call__(self, *args):
        import torch

        device = next((a.device for a in args if getattr(a, "is_cuda", False)), None)
        if device is None:
            return self.func(*args)  # not on the GPU: tvm_ffi's own checks say why
        if torch.cuda.is_current_stream_capturing():
            # a CUDA graph being captured: its launches are ordered by the graph's stream
            return self.func(*args)
        stream = torch.cuda.current_stream(device)
        previous = self.last.get(device.index)
        if previous is not None and previous[0] != stream:
            stream.wait_event(previous[1])
        out = self.func(*args)
        event = previous[1] if previous is not None else torch.cuda.Event()
        event.record(stream)
        self.last[device.index] = (stream, event)
        return out
