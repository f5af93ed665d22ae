"""`@tile_nb.jit`: the decorator that ties the front end, the compiled-kernel runtime and the CPU interpreter.

A call goes: bind arguments -> template (phase 1, cached per compile-time key) -> const values read from the
tensors -> specialization (phase 2, cached per const values) -> argument checks -> launch (GPU) or interpret
(CPU). The common case (same compile-time values, shapes seen before) takes a precomputed fast path.
"""
from __future__ import annotations

import functools
import logging
import threading
import time
import types
from typing import Any

from ._locks import KeyedLocks, build_once
from .backend import postproc
from .errors import ArgumentError, TileNBError
from .factory import KernelFactory
from .frontend.binding import (
    Missing,
    Template,
    bind,
    bind_compile_only,
    const_values,
    definition_where,
    is_tensor,
    value_sources,
)
from .frontend.checks import (
    Expectations,
    check_device_type,
    check_devices,
    check_not_autograd,
    check_tensor_storage,
    empty_at_call,
    empty_grid_error,
    kernel_where,
)
from .frontend.elaborate import Elaboration, elaborate
from .frontend.environment import Environment, value_key
from .frontend.kernel import KernelDefinition
from .frontend.params import POINTER
from .frontend.shapes import free_vars
from .language.dtypes import torch_dtype
from .language.functions import PrimFuncDefinition, defines_prim_func
from .language.irutil import static_int
from .runtime.launch import (
    ALIGNED,
    FAST_TABLE_SIZE,
    NOT_SEEN,
    CallFacts,
    FastEntry,
    Launcher,
    Specialization,
    allocate_outputs,
    allocating_launch,
    resolve_pointers,
)

__all__ = ["jit", "lazy_jit", "JITFunction", "NotLowerableWarning"]

# Names kept for code that imports them from here; the records and tables live in their layers now.
_ALIGNED, _FAST_TABLE_SIZE, _NOT_SEEN, _FastEntry, _Missing, _is_tensor = (ALIGNED, FAST_TABLE_SIZE, NOT_SEEN,
                                                                          FastEntry, Missing, is_tensor)


class NotLowerableWarning(UserWarning):
    """The CPU interpreter ran a kernel that the GPU lowering refuses."""


class InterpreterCallbackError(TileNBError, RuntimeError):
    """A kernel called on the CPU interpreter while a CUDA source post-processing callback is registered
    (backend/postproc.py): the interpreter runs the tile IR, so it cannot apply the callback."""

log = logging.getLogger("tile_nb")


# Compile-time values enter cache keys by type and current contents, as the environment's values do: 1, 1.0
# and True are equal in Python but build different IR, and a changed list or config object must rebuild.
_key_part = value_key


_SKIP_GLOBAL_TYPES = (types.ModuleType, types.FunctionType, types.BuiltinFunctionType, type)


# The tensors of torch's tracing (FakeTensorMode, make_fx, export): they have no data, so a call
# on them goes through the kernel's custom op (tile_nb.torch); other tensor subclasses are
# tensors with data and run the kernel.
_TRACED_TENSORS = frozenset({"FakeTensor", "FunctionalTensor"})
# Heads the fast table's key of a call that passes compile-time values by position after the runtime arguments
# (tilelang's `kernel(x, blk_m)`), so it never equals a key of keywords only.
_BY_POSITION = object()


class JITFunction:
    """A kernel: call it on tensors, or look at its phases with `template`, `specialize` and `compile`."""

    def __init__(self, fn, *, target=None, verbose: bool = False, compile_options: dict | None = None,
                 options=None, out_idx=None, hints=()):
        from .lower.options import kernel_options, on_change

        self.fn = fn
        # the kernel's lowering options (tile_nb.lower.LoweringOptions, or a dict of
        # its fields over the process's)
        self.options = kernel_options(options)
        # out_idx: signature tensors (tilelang's @T.prim_func style) that the call allocates and returns
        self.definition = KernelDefinition.from_function(fn, out_idx)
        self.signature = self.definition.signature
        self.target = target
        self.verbose = verbose
        self.compile_options = dict(compile_options or {})
        self.hints = tuple(str(h) for h in hints)  # put in every elaboration's tile_nb.hints, not applied
        self._templates: dict = {}
        self._runtime_names = [p.name for p in self.signature.runtime]
        self._n_runtime = len(self._runtime_names)
        # Everything the body's elaboration reads (globals, cells, attributes, helpers,
        # transitively), keyed per call.
        self._environment = Environment.of_kernel(self.definition)
        self._global_names = self._read_globals()
        self._reads_environment = self._environment.reads_anything
        self._fast: dict = {}  # keyword arguments (a tuple of items) -> _FastEntry
        self.stats = {"templates": 0, "specializations": 0, "compilations": 0}
        # Threads may call one kernel at once: a template, specialization or compiled kernel is
        # built by the first caller of its key while the others wait for it (the cached call path
        # reads dicts and takes no lock).
        self._building = KeyedLocks()
        self._stats_lock = threading.Lock()
        on_change(self, JITFunction._forget_launches)  # tile_nb.set_options: launches kept below are stale
        postproc.on_change(self, JITFunction._forget_launches)  # a CUDA source callback (un)registered
        functools.update_wrapper(self, fn)

    def _forget_launches(self) -> None:
        """The lowering options changed (tile_nb.set_options / tile_nb.options): drop the fast path's tables
        and the launches kept per specialization, so the next call of every shape goes through `_compiled`."""
        self._fast.clear()
        for template in list(self._templates.values()):
            for spec in list(template.specializations.values()):
                spec.launches.clear()

    def __repr__(self) -> str:
        return f"<tile_nb kernel {self.definition.name}{self.signature.signature}>"

    # -- cache keys ------------------------------------------------------------------------------------------
    def _read_globals(self) -> tuple[str, ...]:
        """Module globals the body reads that are values now (not modules, functions or classes).
        Parameters and names the body assigns are its own, even when a global of that name exists (a
        notebook's `X = ...` next to a kernel whose parameter is X). The key uses all of
        `self._environment`, helpers and attributes included."""
        g = self.fn.__globals__
        return tuple(sorted(r.name for r in self._environment.reads.globals
                            if r.name in g and not isinstance(g[r.name], _SKIP_GLOBAL_TYPES)))

    def _environment_key(self) -> tuple:
        return self._environment.key()

    # -- binding (tile_nb/frontend/binding.py) ---------------------------------------------------------------
    def _bind(self, args, kwargs):
        """Split a call into runtime values, compile-time values, and extra keywords (const values)."""
        return bind(self.definition, args, kwargs)

    def _log(self, message: str, *args) -> None:
        """`verbose=True` reports each template, specialization and compilation (logger 'tile_nb')."""
        if self.verbose:
            if not log.handlers:
                log.addHandler(logging.StreamHandler())
                log.setLevel(logging.INFO)
            log.info(f"[tile_nb] {self.definition.name}: " + message, *args)

    def _def_where(self) -> dict:
        return definition_where(self.definition)

    # -- phases ----------------------------------------------------------------------------------------------
    def _template_for(self, compile_values: dict) -> tuple[tuple, Template]:
        key = (
            tuple(_key_part(compile_values[p.name]) for p in self.signature.compile_time),
            self._environment_key(),
        )
        template = self._templates.get(key)
        if template is None:
            template = build_once(
                self._templates,
                key,
                lambda: self._new_template(compile_values),
                self._building,
                ("template", key),
            )
        return key, template

    def _new_template(self, compile_values: dict) -> Template:
        elab = elaborate(self.definition, self.signature, compile_values, None, self.hints)
        template = Template(elab, dict(compile_values), *value_sources(self.definition, elab))
        self._count("templates")
        self._log("template %s: %.2f ms%s", compile_values, elab.seconds * 1e3,
                  f" (stopped at line {elab.stopped.lineno}: {elab.stopped.reason})" if elab.stopped else "")
        return template

    def _count(self, what: str) -> None:
        with self._stats_lock:  # `+=` on a dict item is not atomic between threads
            self.stats[what] += 1

    def _const_values(self, template: Template, runtime: dict, extra: dict) -> dict:
        return const_values(self.definition, template, runtime, extra)

    def _specialization(self, template: Template, const_values: dict) -> Specialization:
        key = tuple(const_values[c] for c in template.consts)
        spec = template.specializations.get(key)
        if spec is None:
            spec = build_once(
                template.specializations,
                key,
                lambda: self._new_specialization(template, const_values),
                self._building,
                ("specialization", id(template), key),
            )
        return spec

    def _new_specialization(self, template: Template, const_values: dict) -> Specialization:
        elab = elaborate(self.definition, self.signature, template.compile_values, const_values, self.hints)
        expectations = Expectations(self.definition.name, elab, template.elaboration, self._runtime_names,
                                    template.const_sources)
        # scalar parameters (`M: T.int32`) may size outputs and grids: their values are read from the call
        scalar_dims = {name: self._runtime_names.index(name) for name in elab.scalars}
        outputs = [self._allocated_shape(elab, template, scalar_dims, out) for out in elab.outputs]
        scratch = [self._allocated_shape(elab, template, scalar_dims, ws) for ws in elab.scratch]
        dynamic = {n: (self._runtime_names.index(p), d) for n, (p, d) in template.dynamic_sources.items()}
        spec = Specialization(elab, expectations, outputs, dynamic, expectations.check_layout,
                              expectations.tensors[0].index if expectations.tensors else None,
                              scalar_dims=scalar_dims, scratch_shapes=scratch)
        self._count("specializations")
        self._log("specialized %s: %.2f ms", const_values, elab.seconds * 1e3)
        return spec

    def _allocated_shape(self, elab: Elaboration, template: Template, scalar_dims: dict, name: str) -> tuple:
        """(name, shape, torch dtype) of a tensor the call allocates (a T.empty output or a
        T.alloc_global scratch tensor): ints, or shape expressions over T.dynamic dims and scalar
        parameters that the call's arguments give."""
        param = elab.buffers[name]
        # else T.dynamic arithmetic
        shape = [int(d) if static_int(d) is not None else d for d in param.annotation.shape]
        used = {v for d in shape if type(d) is not int for v in free_vars(d)}
        unknown = sorted(used - set(template.dynamic_sources) - set(scalar_dims))
        if unknown:
            what = "output" if param.kind == "output" else "T.alloc_global tensor"
            raise ArgumentError(
                f"{self.definition.name}() {what} '{name}' has a dim over T.dynamic "
                f"{', '.join(unknown)}, which no "
                "argument's shape gives, so its size is not known before the kernel runs",
                filename=param.filename,
                lineno=param.lineno,
                col=param.col,
                end_col=param.end_col,
                hint="annotate an argument with that dim, or make the dim a T.const passed as a keyword",
            )
        return name, shape, torch_dtype(param.annotation.dtype)

    # -- public API ------------------------------------------------------------------------------------------
    def template(self, **compile_kwargs) -> Elaboration:
        """Phase 1: the template for these compile-time arguments (`.script()` prints it with consts symbolic;
        `.stopped` says where and why it ended early, if it did)."""
        _, compile_values, extra = self._bind_compile_only(compile_kwargs)
        return self._template_for(compile_values)[1].elaboration

    def _bind_compile_only(self, kwargs):
        return bind_compile_only(self.definition, kwargs)

    def specialize(self, *args, **kwargs):
        """Phase 2: the `PrimFunc` specialized to these arguments; consts can be given as keywords (`M=1024`),
        so no tensors are needed."""
        return self._specialize(args, kwargs)[1].func

    def _specialize(self, args, kwargs):
        template, const_values, runtime = self._call_consts(args, kwargs)
        return template, self._specialization(template, const_values), runtime

    def _call_consts(self, args, kwargs):
        """Bind a call whose runtime arguments may be missing (consts given as keywords): (template, const
        values, the runtime arguments given)."""
        named = dict(kwargs)
        positional = [p for p in self.signature.params if not p.keyword_only]
        given = {p.name for p in positional[: len(args)]} | set(named)
        for p in self.signature.runtime:
            if p.name not in given:
                named[p.name] = Missing
        runtime, compile_values, extra = self._bind(args, named)
        runtime = {k: v for k, v in runtime.items() if v is not Missing}
        _, template = self._template_for(compile_values)
        return template, self._const_values(template, runtime, extra), runtime

    def compile(self, *args, target=None, **kwargs):
        """Specialize and compile (no GPU needed): the kernel holds `.cuda_source`, `.ptx`, `.sass`,
        `.resources`, `.lowered_ir`, `.plan` and `.timings`. Given every runtime argument (tensors), it
        is the kernel a launch on them uses (the tensors' pointer alignment and the divisibility of their
        T.dynamic dims, as `plan["assumes"]` lists); given consts as keywords, the general kernel
        (aligned pointers, no divisibility)."""
        start = time.perf_counter()
        template, spec, runtime = self._specialize(args, kwargs)
        elaborate_s = time.perf_counter() - start
        facts = None
        if len(runtime) == len(self._runtime_names):
            spec, ordered, device = self._checked_call(args, kwargs)
            facts = spec.call_facts(
                [a for a in ordered if a is not None] + allocate_outputs(spec, ordered, device)
            )
        return self._compiled(spec, target, elaborate_s, facts)

    def _compiled(
        self, spec: Specialization, target, elaborate_s: float = 0.0, facts: CallFacts | None = None
    ):
        """The compiled kernel for `target` and this call's `facts` (pointer alignment, divisibility of the
        T.dynamic dims: each combination gets its own kernel, as Triton specializes on divisibility by 16)."""
        if spec.expectations.empty_grid:
            raise empty_grid_error(
                self.definition.name,
                spec.expectations.empty_grid,
                "there is no kernel to compile",
                kernel_where(self.definition.source),
                hint="a call with these shapes runs nothing; compile for sizes of 1 or more",
            )
        facts = facts or ALIGNED
        from . import runtime as rt

        if target is None and self.target is None:
            # the device's target, resolved once: building a tvm Target and printing it cost ~5 us per call
            target, target_text = self._device_target
        else:
            from .backend.target import resolve_target

            target = resolve_target(target or self.target)
            target_text = str(target)
        from .lower.options import current

        # the lowering options as of now (the kernel's options=, tile_nb.set_options, the
        # environment: TILE_NB_TMA=0 set between two calls builds another kernel), resolved once
        # for the key and the compilation
        lowering = current(self.options)
        key = (target_text, facts, lowering.key(), postproc.key())
        kernel = spec.compiled.get(key)
        if kernel is None:
            def build():
                kernel = rt.compile(facts.apply(spec.func), target, options=self.compile_options or None,
                                    lowering=lowering)
                kernel.timings = {"elaborate": elaborate_s + spec.elaboration.seconds, **dict(kernel.timings)}
                self._count("compilations")
                self._log("compiled for %s: %s", target,
                          ", ".join(f"{k} {v * 1e3:.0f} ms" for k, v in kernel.timings.items()))
                return kernel

            kernel = build_once(spec.compiled, key, build, self._building, ("compiled", id(spec), key))
        return kernel

    def __call__(self, *args, backend: str | None = None, **kwargs):
        if backend is None:
            runtime = args
            try:
                if len(args) <= self._n_runtime:
                    fast = self._fast.get(tuple(kwargs.items())) if kwargs else self._fast.get(())
                else:  # compile-time values by position after the runtime arguments
                    runtime = args[:self._n_runtime]
                    fast = self._fast.get((_BY_POSITION, args[self._n_runtime:], *kwargs.items()))
            except TypeError:  # an unhashable keyword value: the slow path explains it
                fast = None
            # The hot path, inlined: every attribute lookup here costs ~50 ns of a ~1 us budget.
            if fast is not None and len(runtime) == fast.n_args \
                    and not (self._reads_environment and self._environment_key() != fast.env_key):
                try:
                    key = fast.direct_key(runtime)
                    launch = fast.direct.get(key)
                # RuntimeError: sparse, no data_ptr
                except (AttributeError, IndexError, TypeError, RuntimeError):
                    key = launch = None
                if launch is not None:
                    try:
                        return launch(*runtime)  # None, or the T.empty outputs of an allocating launch
                    except (TypeError, ValueError):
                        # the kernel's host function refused the arguments (dtype, layout): the slow path says
                        # why
                        pass
                else:
                    result = self._call_seen_shapes(fast, key, runtime)
                    if result is not NOT_SEEN:
                        return result
        return self._call_slow(args, kwargs, backend)

    def _call_seen_shapes(self, fast: FastEntry, key, args):
        """A call whose shapes an earlier call had: check dtype, layout and device here, launch (and
        remember the launch under `key` for the direct path) or interpret. `NOT_SEEN` when the
        shapes are new or a check fails."""
        try:
            spec = fast.specs.get(fast.read_shapes(args))
            if spec is None or not spec.check_layout(args):
                return NOT_SEEN
            launch = (
                spec.launches.get(spec.facts_key(args))
                if spec.launches and args[spec.device_arg].is_cuda
                else None
            )
        except (AttributeError, IndexError, TypeError, RuntimeError):
            return NOT_SEEN
        if launch is None:
            if any(type(a).__name__ in _TRACED_TENSORS for a in args):
                # fake or functional tensors (torch tracing): the slow path hands them to torch
                return NOT_SEEN
            device = None if spec.device_arg is None else args[spec.device_arg].device
            return self._launch(
                spec, list(args), device, None, direct=None if key is None else (fast.direct, key)
            )
        if key is not None:
            if len(fast.direct) >= FAST_TABLE_SIZE:
                fast.direct.clear()
            fast.direct[key] = launch
        launch(*args)  # an error of the launch itself must not send the call down the slow path again
        return None

    def _checked_call(self, args, kwargs):
        """Bind and check a call: (specialization, runtime arguments in order, their device)."""
        runtime, compile_values, extra = self._bind(args, kwargs)
        tkey, template = self._template_for(compile_values)
        given = {name: value for name, value in runtime.items() if is_tensor(value)}
        one_device = len({t.device for t in given.values()}) <= 1  # else check_devices names them all, below
        for name, value in given.items():  # before anything reads a layout: meta, sparse, quantized tensors
            check_tensor_storage(self.definition.name, name, value, self._param_where(template, name),
                                 device=one_device)
        const_values = self._const_values(template, runtime, extra)
        spec = self._specialization(template, const_values)
        ordered = [runtime.get(n) for n in self._runtime_names]
        ordered = resolve_pointers(spec, ordered, self._runtime_names)
        error = self._check(spec, ordered)
        if error is not None:
            raise error
        tensors = {e.name: ordered[e.index] for e in spec.expectations.tensors}
        check_devices(self.definition.name, tensors)
        self._check_writes(spec, tensors)
        device = next(iter(tensors.values())).device if tensors else None
        return spec, ordered, device

    def _param_where(self, template: Template, name: str) -> dict:
        param = template.elaboration.buffers.get(name)
        if param is None or not param.lineno:  # declared in the signature, or after the template stopped
            return self._def_where()
        return dict(filename=param.filename, lineno=param.lineno, col=param.col, end_col=param.end_col)

    def _check_writes(self, spec: Specialization, tensors: dict) -> None:
        """A tensor the kernel writes must not require grad (the write would bypass autograd); inputs it only
        reads may. Checked where a call's shapes are first seen, not on the cached path."""
        if not any(t.requires_grad for t in tensors.values()):
            return
        expectations = spec.expectations
        if expectations.written is None:
            from .lower.irwalk import buffers_touched

            _, writes = buffers_touched(spec.func.body)
            expectations.written = frozenset(
                p.name for p in spec.func.params if any(p.same_as(w) for w in writes)
            )
        for e in expectations.tensors:
            if e.name in expectations.written:
                check_not_autograd(
                    self.definition.name, e.name, tensors[e.name], expectations._where(e.param)
                )

    # Set by tile_nb.torch (a layer above): `traced_call(kernel, args, kwargs)` runs a call on tensor
    # subclasses (fake tensors of FakeTensorMode, make_fx, torch.export) through the kernel's torch custom op.
    traced_call = None

    def _call_slow(self, args, kwargs, backend):
        if backend is None and JITFunction.traced_call is not None \
                and any(type(a).__name__ in _TRACED_TENSORS for a in (*args, *kwargs.values())):
            return JITFunction.traced_call(self, args, kwargs)
        # Read before the call is bound: if another thread changes a global the body reads meanwhile, this
        # call's specialization may be the old one and must not be filed under the new values.
        env_key = self._environment_key()
        spec, ordered, device = self._checked_call(args, kwargs)
        empty = spec.expectations.empty_grid or self._empty_at_call(spec, ordered)
        n = self._n_runtime
        leading = [p.name for p in self.signature.params[: len(args)]]
        if backend is None and leading[:n] == self._runtime_names and not empty \
                and not any(p.kind == POINTER for p in self.signature.runtime):
            # Runtime arguments positionally, compile-time ones (and consts) by keyword, at their defaults or
            # by position after them: later calls with the same values skip binding and go straight to the
            # shape-keyed table.
            try:
                kw_key = (tuple(kwargs.items()) if len(args) == n
                          else (_BY_POSITION, args[n:], *kwargs.items()))
                fast = self._fast.get(kw_key)
            except TypeError:
                fast, kw_key = None, None
            if kw_key is not None and self._environment_key() == env_key:
                if fast is None or fast.env_key != env_key or len(fast.specs) >= FAST_TABLE_SIZE:
                    if len(self._fast) >= FAST_TABLE_SIZE:
                        self._fast.clear()
                    fast = self._fast[kw_key] = FastEntry(spec, n, env_key)
                fast.specs[fast.read_shapes(args)] = spec
        return self._launch(spec, ordered, device, backend, empty)

    @staticmethod
    def _empty_at_call(spec: Specialization, ordered) -> tuple[str, ...]:
        """The grid extents over T.dynamic dims that this call's sizes make 0 (a zero-block launch is a CUDA
        error; the call then runs nothing, as with static sizes). Such shapes
        stay off the fast path's tables."""
        if not spec.expectations.dynamic_grid:
            return ()
        return empty_at_call(spec.expectations, spec.dim_values(ordered))

    def _check(self, spec: Specialization, ordered):
        for e in spec.expectations.tensors:
            value = ordered[e.index]
            if not is_tensor(value):
                return ArgumentError(
                    f"{self.definition.name}() argument '{e.name}' must be a torch.Tensor; got "
                    f"{type(value).__name__}",
                    **spec.expectations._where(e.param),
                )
        if spec.expectations.check(ordered):
            return None
        error = spec.expectations.explain(ordered)
        if error is not None and error.lineno is None:  # a parameter declared in the signature
            error.filename, error.lineno = self._def_where()["filename"], self._def_where()["lineno"]
        return error

    def _launch(self, spec: Specialization, ordered, device, backend, empty: tuple = (), direct=None):
        """Run one checked call: allocate its outputs, interpret it or launch its compiled kernel, and keep
        the launch for the fast path (per call facts; a kernel with outputs under `direct`, a (table, direct
        key) pair, since its outputs' shapes follow the call's shapes)."""
        outputs = allocate_outputs(spec, ordered, device)
        call_args = [a for a in ordered if a is not None] + outputs
        if backend not in (None, "cpu", "cuda"):
            raise ArgumentError(
                f"{self.definition.name}() backend must be 'cpu' (the interpreter) or 'cuda'; got "
                f"{backend!r}",
                **self._def_where(),
            )
        empty = empty or spec.expectations.empty_grid
        if empty:
            # No block to run (M=0, as torch ops take empty tensors): nothing to launch, as long as no T.empty
            # output would come back unwritten.
            unwritten = [
                (name, tuple(t.shape))
                for (name, _, _), t in zip(spec.output_shapes, outputs, strict=True)
                if t.numel()
            ]
            if unwritten:
                raise empty_grid_error(
                    self.definition.name,
                    empty,
                    f"its output '{unwritten[0][0]}' of shape {unwritten[0][1]} would never be written",
                    kernel_where(self.definition.source),
                )
            outputs = outputs[: len(spec.output_shapes)]
            return None if not outputs else outputs[0] if len(outputs) == 1 else tuple(outputs)
        use_cpu = backend == "cpu" or (backend is None and (device is None or device.type == "cpu"))
        if backend == "cuda" and (device is None or device.type != "cuda"):
            where = "no tensor arguments" if device is None else f"tensors on {device}"
            raise ArgumentError(
                f"{self.definition.name}() was called with backend='cuda' but with {where}; the "
                "compiled kernel runs on CUDA tensors",
                **self._def_where(),
                hint="move the tensors with .cuda(), or drop backend= to run the CPU interpreter",
            )
        if use_cpu:
            import torch

            if any(t.requires_grad for t in call_args if is_tensor(t)):
                self._check_writes(spec, {e.name: ordered[e.index] for e in spec.expectations.tensors})
            with torch.no_grad():  # as on the GPU: the kernel's reads and writes are not recorded by autograd
                self._interpret(spec, call_args)
        else:
            # the meta device, say, reached by the cached path
            if device is not None and device.type != "cuda":
                first = spec.expectations.tensors[0]
                check_device_type(
                    self.definition.name, first.name, device, spec.expectations._where(first.param)
                )
            key = spec.facts_key(call_args)
            kernel = self._compiled(spec, None, facts=spec.facts(key))
            if kernel.launchable and len(call_args) == len(kernel.params):
                if not outputs:
                    spec.launches[key] = kernel._func  # the fast path launches it directly from now on
                elif (
                    direct is not None
                    and not spec.sized_by_scalars  # its outputs' shapes follow the direct key
                    and len(ordered) + len(outputs) == len(call_args)
                ):
                    table, direct_key = direct
                    if len(table) >= FAST_TABLE_SIZE:
                        table.clear()
                    table[direct_key] = allocating_launch(kernel._func, outputs, len(spec.output_shapes),
                                                          spec.device_arg)
            kernel(*call_args)
        outputs = outputs[: len(spec.output_shapes)]  # T.alloc_global scratch tensors follow; not returned
        if not outputs:
            return None
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    def _interpret(self, spec: Specialization, call_args):
        from . import interp

        refusal = postproc.interpreter_refusal()
        if refusal is not None:
            raise InterpreterCallbackError(
                f"{self.definition.name}() cannot run on the CPU interpreter: {refusal}",
                **self._def_where(),
                hint="call it on CUDA tensors (the compiled kernel applies the callback), or unregister the "
                "callback (tile_nb.backend.postproc.clear_cuda_postproc())",
            )
        if not spec.lowering_checked:
            spec.lowering_checked = True
            self._warn_if_not_lowerable(spec)
        on_cpu = [a.cpu() if is_tensor(a) else a for a in call_args]
        interp.run(spec.func, on_cpu)
        for original, result in zip(call_args, on_cpu, strict=True):
            if is_tensor(original) and original is not result:
                original.copy_(result)

    @functools.cached_property
    def _device_target(self):
        from .backend.target import resolve_target

        target = resolve_target(None)
        return target, str(target)

    def _warn_if_not_lowerable(self, spec: Specialization) -> None:
        """A kernel must never work on the CPU and then fail on the GPU by surprise: the first
        interpreted call of each specialization also lowers it for the GPU target (no CUDA
        compile) and warns when that fails."""
        import warnings

        from .backend.target import resolve_target
        from .lower import LoweringError, lower

        target = resolve_target(self.target)
        try:
            lower(spec.func, target)
        except LoweringError as err:
            warnings.warn(
                NotLowerableWarning(
                    f"{self.definition.name}() runs on the CPU interpreter, but the CUDA lowering for "
                    f"{target.attrs['arch']} refuses it, so it would fail on the GPU:\n{err}"
                ),
                stacklevel=_user_stacklevel(),
            )
        except Exception as err:  # noqa: BLE001 - an internal lowering failure is a GPU failure too
            warnings.warn(
                NotLowerableWarning(
                    f"{self.definition.name}() runs on the CPU interpreter, but lowering it for "
                    f"{target.attrs['arch']} "
                    f"failed ({type(err).__name__}: {err}); please report this"
                ),
                stacklevel=_user_stacklevel(),
            )

    # -- what tuning needs from a call -----------------------------------------------------------------------
    # (`bench`, `sweep`, `tune` and `show` are attached by their layers: tile_nb/bench/faces.py and
    # tile_nb/notebook/faces.py, through tile_nb/__init__.py)
    def call_values(self, *args, **kwargs) -> tuple[dict, dict]:
        """(compile-time values, const values) a call with these arguments specializes with; consts may be
        given as keywords instead of tensors. Nothing is compiled."""
        template, consts, _ = self._call_consts(args, kwargs)
        return dict(template.compile_values), consts

    def call_arguments(self, *args, **kwargs) -> tuple[Any, list]:
        """(phase-2 PrimFunc, the argument list the compiled kernel takes: runtime arguments then outputs,
        which are allocated here) for a checked call. What a launcher or a remote benchmark needs."""
        spec, ordered, device = self._checked_call(args, kwargs)
        return spec.func, [a for a in ordered if a is not None] + allocate_outputs(spec, ordered, device)

    def launch_func(self, *args, **kwargs):
        """The PrimFunc a launch on these tensors compiles: phase 2 with this call's facts (pointer alignment,
        divisibility of T.dynamic dims) as attributes. Tuning sends its text to the compile workers."""
        spec, ordered, device = self._checked_call(args, kwargs)
        call_args = [a for a in ordered if a is not None] + allocate_outputs(spec, ordered, device)
        return spec.call_facts(call_args).apply(spec.func)

    def launcher(self, *args, **kwargs) -> Launcher:
        """Bind, check and compile once: a zero-argument callable that launches the compiled kernel on these
        arguments (CUDA tensors) or runs the interpreter (CPU tensors). Tuning times this, so each timed
        launch pays no argument binding."""
        spec, ordered, device = self._checked_call(args, kwargs)
        call_args = [a for a in ordered if a is not None] + allocate_outputs(spec, ordered, device)
        if device is not None and device.type == "cuda":
            kernel = self._compiled(spec, None, facts=spec.call_facts(call_args))
            return Launcher(functools.partial(kernel, *call_args), kernel, call_args)
        return Launcher(functools.partial(self._interpret, spec, call_args), None, call_args)

    def identity(self) -> dict:
        """What identifies this kernel across processes (tuning results are stored under it): its name,
        the sha256 of its source, and every value its body reads (closure cells, globals, attributes,
        helper functions by their code and what they read, arrays and tensors by content hash) as
        stable text. `persistable` is False (with `why`) when one of those values has no stable text
        (its repr prints an object address)."""
        import hashlib

        reprs = self._environment.describe()
        unstable = [k for k, v in reprs.items() if v is None]
        return {"name": self.definition.name,
                "source_sha256": hashlib.sha256(self.definition.source.text.encode()).hexdigest(),
                "environment": reprs, "persistable": not unstable,
                "why": f"{', '.join(unstable)} has no stable value across processes" if unstable else None}


def _user_stacklevel() -> int:
    """The `stacklevel` of a warning raised from inside tile_nb that points at the first frame outside it."""
    import os
    import sys

    package = os.path.dirname(os.path.abspath(__file__))
    frame, level = sys._getframe(1), 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(package):
        frame, level = frame.f_back, level + 1
    return level


def jit(fn=None, *, target=None, verbose: bool = False, compile_options: dict | None = None, options=None,
        out_idx=None, hints=()):
    """Make a tile kernel of `fn`. Options: `target=` ("cuda -arch=sm_90a"; default from the current GPU),
    `verbose=` (log each template, specialization and compilation),
    `compile_options=` (a dict for the backend:
    `compiler` ("nvrtc" or "nvcc"), `fast_math`, `ptxas_options`, `cache`; unknown keys are refused with the
    list), `options=` (the lowering options: a dict of `tile_nb.LoweringOptions` fields such as
    `{"tma": False}`, over `tile_nb.set_options` and the environment, or a whole `LoweringOptions`; unknown
    names are refused with the list; a function attribute `tile_nb.<option>` still overrides them),
    `out_idx=` (positions of tensors annotated in the signature that are outputs: the call allocates and
    returns them, tilelang's convention), `hints=` (texts recorded in each elaboration's `tile_nb.hints`
    attribute: what the caller accepted and does not apply, e.g. tilelang's pass_configs hints).

    `fn` is a kernel, a `@T.prim_func`, or a kernel factory: a function that defines a `@T.prim_func` and
    returns it; `jit` of a factory gives a `KernelFactory`, whose call runs the factory (once per argument
    values) and returns the kernel."""
    if fn is None:
        return functools.partial(jit, target=target, verbose=verbose, compile_options=compile_options,
                                 options=options, out_idx=out_idx, hints=hints)
    if isinstance(fn, JITFunction):
        return fn
    if isinstance(fn, PrimFuncDefinition):
        fn = fn.fn
    elif isinstance(fn, types.FunctionType) and defines_prim_func(fn):
        return KernelFactory(fn, dict(target=target, verbose=verbose, compile_options=compile_options,
                                      options=options, out_idx=out_idx, hints=hints), JITFunction)
    if not isinstance(fn, types.FunctionType):
        raise TypeError(f"tile_nb.jit decorates a Python function; got {type(fn).__name__}")
    return JITFunction(fn, target=target, verbose=verbose, compile_options=compile_options, options=options,
                       out_idx=out_idx, hints=hints)


lazy_jit = jit
