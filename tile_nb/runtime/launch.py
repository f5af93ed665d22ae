"""What a kernel call launches, and the tables of the cached call path.

A `Specialization` is phase 2 for one set of const values: its PrimFunc, its argument checks, its compiled
kernels per target and call facts, and their launches. A `FastEntry` is the cached call path's table for
one set of keyword arguments: specializations by the shapes of the tensor arguments, and launches by
`Specialization.direct_key`. The key functions are generated as straight-line Python, because they run on
every call (`JITFunction.__call__` in tile_nb/jit.py reads these tables inline: each attribute lookup
there costs ~50 ns of a ~1 us budget).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..frontend.binding import is_tensor
from ..frontend.shapes import evaluate, free_vars
from ..language.dtypes import torch_dtype

if TYPE_CHECKING:
    from ..frontend.checks import Expectations
    from ..frontend.elaborate import Elaboration

__all__ = ["ALIGNED", "FAST_TABLE_SIZE", "NOT_SEEN", "CallFacts", "FastEntry", "Launcher", "Specialization",
           "allocate_outputs", "allocating_launch", "generated", "resolve_pointers"]

FAST_TABLE_SIZE = 256  # shape tuples remembered for the fast path (a T.dynamic dim can take many values)
NOT_SEEN = object()  # the shapes (or the checks) send the call down the slow path


@dataclass(frozen=True)
class CallFacts:
    """What the GPU kernel of one call may assume beyond the shapes: which tensors' data pointers are
    NOT 16-byte aligned (they get no vector, cp.async or TMA access) and which T.dynamic dims are
    multiples of 16 (vector and async paths stay open for them). Checked on every call; each
    combination is its own compiled kernel."""

    unaligned: tuple = ()
    divisible: tuple = ()

    def apply(self, func):
        if self.unaligned:
            func = func.with_attr("tile_nb.unaligned", list(self.unaligned))
        if self.divisible:
            func = func.with_attr("tile_nb.divisible", list(self.divisible))
        return func


ALIGNED = CallFacts()


@dataclass
class Specialization:
    """Phase 2 for one set of const values: the PrimFunc, its argument checks,
    and compiled kernels per target."""

    elaboration: Elaboration
    expectations: Expectations
    output_shapes: list  # (name, shape: ints and shape expressions over T.dynamic dims, torch dtype)
    dynamic_sources: dict  # dynamic dim name -> (runtime argument index, dim)
    # expectations.check_layout (dtype, contiguity, device), one attribute away for the fast path
    check_layout: Any
    device_arg: int | None  # a tensor argument whose device is the call's device
    compiled: dict = field(default_factory=dict)  # (target string, CallFacts, ...) -> CompiledKernel
    # facts_key -> tvm_ffi function: the fast path's direct launch
    launches: dict = field(default_factory=dict)
    lowering_checked: bool = False  # the interpreter's first call also tried the GPU lowering
    # scalar parameter (may size outputs, grids) -> argument index
    scalar_dims: dict = field(default_factory=dict)
    # T.alloc_global tensors, as output_shapes: after the outputs
    scratch_shapes: list = field(default_factory=list)

    @property
    def func(self):
        return self.elaboration.func

    def dim_values(self, ordered) -> dict:
        """The values of this call's dims that are not consts: T.dynamic dims from its tensors, scalar
        parameters from its arguments (for output shapes and grid extents)."""
        values = {name: int(ordered[i].shape[dim]) for name, (i, dim) in self.dynamic_sources.items()}
        values.update({name: int(ordered[i]) for name, i in self.scalar_dims.items()})
        return values

    @functools.cached_property
    def sized_by_scalars(self) -> bool:
        """Whether a tensor the call allocates has a dim given by a scalar parameter's value, which the fast
        path's direct key (the tensor arguments' shapes) does not hold."""
        return any(type(d) is not int and free_vars(d) & set(self.scalar_dims)
                   for _, shape, _ in self.output_shapes + self.scratch_shapes for d in shape)

    @functools.cached_property
    def buffer_args(self) -> list[tuple[int, str]]:
        """(position among the call's arguments, name) of every tensor parameter, outputs included."""
        from tvm.tirx.buffer import is_buffer_var

        return [(i, p.name) for i, p in enumerate(self.func.params) if is_buffer_var(p)]

    @functools.cached_property
    def facts_terms(self) -> list[str]:
        """Python expressions over `args` for the facts of a call: for each tensor, is its data pointer
        unaligned to 16 bytes; for each T.dynamic dim, is it a multiple of 16."""
        return self._facts_terms(len(self.func.params))

    def _facts_terms(self, n_args: int) -> list[str]:
        """`facts_terms` where `args` holds the first `n_args` parameters: a tensor past them (an output the
        launch allocates) counts as aligned."""
        return ([f"args[{i}].data_ptr() % 16 != 0" if i < n_args else "False" for i, _ in self.buffer_args]
                + [f"args[{i}].shape[{d}] % 16 == 0" for i, d in self.dynamic_sources.values()])

    @functools.cached_property
    def facts_key(self):
        """`facts_key(call_args)`: `facts_terms` as one tuple of bools, generated as straight-line Python (it
        runs on GPU calls)."""
        return generated("facts_key", self.facts_terms)

    @functools.cached_property
    def direct_key(self):
        """`direct_key(args)`: what picks a compiled kernel's launch for a positional call without looking at
        the specialization: the shapes of the tensor arguments, whether the first is on a GPU, the type of
        each runtime scalar, and the facts. The kernel's host function checks the rest in C (dtype, strides,
        device, and the shapes again) and raises TypeError or ValueError on a mismatch."""
        terms = [f"args[{e.index}].shape" for e in self.expectations.tensors]
        terms.append(f"args[{self.device_arg}].is_cuda")
        terms += [f"type(args[{s.index}])" for s in self.expectations.scalars]
        # The facts, over the call's own arguments: the T.empty outputs and scratch tensors that an allocating
        # launch makes are not among them, and are aligned (fresh allocations), as `facts_key` finds them.
        n_args = len(self.func.params) - len(self.output_shapes) - len(self.scratch_shapes)
        return generated("direct_key", terms + self._facts_terms(n_args))

    def facts(self, key: tuple) -> CallFacts:
        """The CallFacts a `facts_key` tuple stands for. A view `T.Tensor(shape, dtype, A.data)` shares A's
        data pointer, so it is unaligned when A is."""
        n = len(self.buffer_args)
        unaligned = [
            name for (_, name), unaligned in zip(self.buffer_args, key[:n], strict=True) if unaligned
        ]
        unaligned += [view for view, base in self.views if base in unaligned]
        return CallFacts(
            tuple(unaligned),
            tuple(name for name, divisible in zip(self.dynamic_sources, key[n:], strict=True) if divisible),
        )

    @functools.cached_property
    def views(self) -> list[tuple[str, str]]:
        """(view name, tensor parameter name) of the kernel's `T.Tensor(shape, dtype, A.data)` views."""
        return [(str(v), str(b)) for v, b in ((self.func.attrs or {}).get("tile_nb.views", None) or [])]

    def call_facts(self, call_args) -> CallFacts:
        """The CallFacts of a call on `call_args` (runtime arguments then outputs)."""
        return self.facts(self.facts_key(call_args))


class FastEntry:
    """The fast path's tables for one set of keyword arguments (one template): specializations by the
    shapes of the tensor arguments, and compiled kernels' launches by `Specialization.direct_key`
    (shapes and facts), which a call reaches without reading dtypes or layouts in Python (the kernel's
    host function checks them in C)."""

    __slots__ = ("n_args", "env_key", "specs", "read_shapes", "direct", "direct_key")

    def __init__(self, spec: Specialization, n_args: int, env_key: tuple):
        self.n_args, self.env_key = n_args, env_key
        self.specs: dict = {}   # shapes -> Specialization
        self.read_shapes = shape_reader(spec)
        self.direct: dict = {}  # direct_key -> tvm_ffi function
        self.direct_key = spec.direct_key if spec.device_arg is not None else _no_direct_key


def _no_direct_key(args):
    return None


def shape_reader(spec: Specialization):
    """`read_shapes(args)`: the shapes of the tensor arguments, generated as one tuple expression."""
    return generated("read_shapes", [f"args[{e.index}].shape" for e in spec.expectations.tensors])


def generated(name: str, terms: list[str]):
    """`name(args)` returning the tuple of `terms` (Python expressions over `args`), generated as
    straight-line code: these run on every call, where a loop over expectations costs microseconds."""
    env: dict = {}
    exec(f"def {name}(args):\n    return ({', '.join(terms)}{',' if len(terms) == 1 else ''})\n", env)  # noqa: S102
    return env[name]


@dataclass
class Launcher:
    """A checked, compiled call on fixed arguments: `launcher()` launches it; `.kernel` is the CompiledKernel
    (None on the CPU interpreter), `.args` the argument list (outputs included)."""

    fn: Any
    kernel: Any
    args: list

    def __call__(self):
        return self.fn()


def allocate_outputs(spec: Specialization, ordered, device) -> list:
    """The tensors a call allocates: its T.empty outputs, then its T.alloc_global scratch tensors (the
    kernel's last parameters; only the first `len(spec.output_shapes)` are returned). Shapes from the
    specialization, T.dynamic dims from the call's tensors, dims that are scalar parameters
    (`M: T.int32`) from the call's values."""
    import torch

    outputs, dynamic = [], None
    for _, shape, dtype in spec.output_shapes + spec.scratch_shapes:
        # T.dynamic dims, or arithmetic of them (`T.empty((N * 2,), ...)`)
        if any(type(d) is not int for d in shape):
            if dynamic is None:
                dynamic = spec.dim_values(ordered)
            shape = [d if type(d) is int else evaluate(d, dynamic) for d in shape]
        outputs.append(torch.empty(shape, dtype=dtype, device=device or "cpu"))
    return outputs


def allocating_launch(func, outputs: list, n_returned: int, device_arg: int):
    """The direct launch of a kernel that allocates tensors (T.empty outputs, then T.alloc_global scratch):
    fresh tensors like `outputs` (the shapes and dtypes of the call that compiled it) on the device of
    argument `device_arg`, launched with the call's arguments, the first `n_returned` returned as a call
    returns them. Kept under a direct key, which fixes every tensor argument's shape; output dims that come
    from a scalar argument's value are not in that key, so such kernels get no allocating launch
    (`Specialization.sized_by_scalars`)."""
    import torch

    empty = torch.empty
    layouts = [(tuple(t.shape), t.dtype) for t in outputs]
    if len(layouts) == 1 and n_returned == 1:  # the common case, without the loop (each call counts)
        ((shape, dtype),) = layouts

        def launch_one(*args):
            out = empty(shape, dtype=dtype, device=args[device_arg].device)
            func(*args, out)
            return out

        return launch_one

    def launch(*args):
        device = args[device_arg].device
        allocated = [empty(shape, dtype=dtype, device=device) for shape, dtype in layouts]
        func(*args, *allocated)
        if n_returned <= 1:
            return allocated[0] if n_returned else None
        return tuple(allocated[:n_returned])

    return launch


def resolve_pointers(spec: Specialization, ordered, runtime_names: list[str]) -> list:
    """The runtime arguments with each integer given for a pointer parameter
    made a tensor over that address."""
    from .._pointers import tensor_from_pointer

    out = list(ordered)
    tensors = [v for v in ordered if is_tensor(v)]
    device = tensors[0].device if tensors else None
    for i, name in enumerate(runtime_names):
        param = spec.elaboration.buffers.get(name)
        if param is not None and param.kind == "pointer" and isinstance(out[i], int):
            ann = param.annotation
            out[i] = tensor_from_pointer(out[i], [int(d) for d in ann.shape], torch_dtype(ann.dtype), device)
    return out

