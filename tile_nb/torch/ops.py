"""A `@tile_nb.jit` kernel as a torch custom op (`torch.library.Library.define`), one op per compile-time key.

The op of a kernel for one set of compile-time values (and keyword consts) has:
- a schema of the kernel's runtime parameters in signature order: a `T.Tensor` parameter is `Tensor`, or
  `Tensor(a!)` when the kernel writes it (read from the phase-1 IR: the tile ops and stores of the body); a
  runtime scalar (`x: T.float32`) is `float` / `int` / `bool`; the returns are the `T.empty` outputs (`()`,
  `Tensor` or a tuple of them);
- a CPU kernel (the interpreter) and a CUDA kernel (the compiled kernel), both the kernel's own call;
- a fake implementation derived from the template: every `T.empty` output's shape is its annotation with each
  `T.const` and `T.dynamic` replaced by the size it is read from (symbolic sizes stay symbolic), its dtype the
  annotation's, its device the first tensor argument's.

`KernelOp` (`tile_nb.torch.op(kernel)`) is called like the kernel and picks the op for the call's compile-time
values. In eager mode, when nothing above the backend needs the dispatcher (plain tensors, no dispatch mode,
no functorch transform, no tensor that requires grad), it calls the kernel directly, so the op costs a few
checks more than the bare call; otherwise the call goes through `torch.ops.tile_nb.<op>`.

Dynamo: a `@tile_nb.jit` kernel called inside `torch.compile` becomes a call of its op in the graph
(tile_nb/torch/dynamo.py); tile_nb's Python never runs under Dynamo's tracer, only at trace time, to pick
the op.
"""
from __future__ import annotations

import functools
import threading
import weakref
from dataclasses import dataclass, field
from typing import Any

from ..errors import TileNBError
from ..frontend.params import POINTER, SCALAR

__all__ = ["op", "KernelOp", "OpEntry", "TorchOpError"]

NAMESPACE = "tile_nb"


class TorchOpError(TileNBError):
    """A kernel (or a call) that cannot become a torch custom op: the message says why and what to do."""


class NoBackwardError(TileNBError, RuntimeError):
    """A backward through a kernel that has no backward paired."""


_SCALAR_SCHEMA = {"float": "float", "bfloat": "float", "int": "int", "uint": "int", "bool": "bool"}


def _scalar_schema_type(dtype: str) -> str:
    for prefix, kind in _SCALAR_SCHEMA.items():
        if str(dtype).startswith(prefix):
            return kind
    raise TorchOpError(f"no torch schema type for a runtime scalar of dtype {dtype}")


@dataclass
class OpEntry:
    """The custom op of one kernel for one compile-time key, and how a call maps onto it."""

    kernel: Any
    qualname: str  # "tile_nb::name_3"
    schema: str
    static: dict  # compile-time values (and keyword consts) passed to the kernel as keywords
    runtime_names: list  # runtime parameters, in schema order
    tensor_names: list
    mutated: tuple  # runtime tensor parameters the kernel writes
    outputs: list  # (name, shape expressions, torch dtype) of the T.empty outputs
    template: Any
    positional: bool  # the runtime parameters are the kernel's leading positional parameters
    extra: dict = field(default_factory=dict)
    caller: Any = None  # what runs the kernel: the JITFunction, or its Autotuner
    overload: Any = None  # torch.ops.tile_nb.<name>.default

    @property
    def opname(self) -> str:
        return self.qualname.split("::", 1)[1]

    @functools.cached_property
    def plain(self):
        """`plain(runtime)`: True when an eager call may skip the dispatcher and call the kernel, because
        nothing above the backend would see the op: no dispatch mode (FakeTensorMode, make_fx), no functorch
        transform (vmap, grad), only plain tensors (not fake, functional or a subclass), none requiring grad
        while grad mode is on. Generated as one straight-line expression over this op's tensor arguments."""
        return self._generated("plain", "def plain(a):\n    return not ({test})\n")

    @functools.cached_property
    def eager(self):
        """`eager(args, kwargs)`: the kernel's own call when `plain(args)` (and the version bump of the
        tensors it writes, as torch's in-place ops do), else the op's; for a call whose positional arguments
        are exactly the runtime arguments (the rest are compile-time keywords)."""
        written = [self.runtime_names.index(n) for n in self.mutated] if _version_bump() is not None else []
        call = (
            "kernel(*a, **kw)"
            if not written
            else f"result = kernel(*a, **kw)\n    bump(({''.join(f'a[{i}], ' for i in written)}))\n"
            "    return result"
        )
        return self._generated("eager", "def eager(a, kw):\n    if {test}:\n        return dispatch(a)\n"
                                        f"    {'return ' if not written else ''}{call}\n")

    def _generated(self, name: str, template: str):
        import torch

        idx = [self.runtime_names.index(n) for n in self.tensor_names]
        env = {
            "stack": torch._C._len_torch_dispatch_stack,
            "functorch": torch._C._are_functorch_transforms_active,
            "grad": torch._C.is_grad_enabled,
            "PLAIN": (torch.Tensor, torch.nn.Parameter),
            "dispatch": self.dispatch,
            "kernel": self.caller,
            "bump": _version_bump(),
        }
        types = "".join(f" or type(a[{i}]) not in PLAIN" for i in idx)
        # An op without outputs gives autograd nothing to track, so only a written tensor that requires grad
        # needs the dispatcher (which refuses it); one with outputs needs it for any input that does.
        tracked = idx if self.outputs else [self.runtime_names.index(n) for n in self.mutated]
        grads = " or ".join(f"a[{i}].requires_grad" for i in tracked) or "False"  # before grad(): cheaper
        exec(template.format(test=f"stack() or functorch(){types} or (({grads}) and grad())"), env)  # noqa: S102
        return env[name]

    def bump_written(self, runtime) -> None:
        """Bump the version of the tensors the kernel wrote (after a call that did not go through the op)."""
        bump = _version_bump()
        if self.mutated and bump is not None:
            bump(tuple(runtime[self.runtime_names.index(name)] for name in self.mutated))

    def dispatch(self, runtime):
        """The call through torch's dispatcher. A tensor the kernel writes must not require grad while grad
        mode is on (the write would bypass autograd): the bare kernel's RequiresGradError, where torch would
        raise its in-place-on-a-leaf error."""
        if self.mutated:
            import torch

            if torch.is_grad_enabled():
                from ..frontend.checks import check_not_autograd

                for name in self.mutated:
                    value = runtime[self.runtime_names.index(name)]
                    if getattr(value, "requires_grad", False):
                        param = self.template.elaboration.buffers[name]
                        check_not_autograd(self.kernel.definition.name, name, value,
                                           dict(filename=param.filename, lineno=param.lineno, col=param.col,
                                                end_col=param.end_col))
        return self.overload(*runtime)

    def call_kernel(self, *runtime):
        """The op's CPU and CUDA kernel: the kernel's own call (interpreter or compiled kernel)."""
        if self.positional:
            result = self.caller(*runtime, **self.static)
        else:
            result = self.caller(**dict(zip(self.runtime_names, runtime, strict=True)), **self.static)
        return result

    def fake(self, *runtime):
        """Outputs of the right shapes, dtypes and device, from the template (sizes may be symbolic)."""
        import torch

        values = dict(zip(self.runtime_names, runtime, strict=True))
        env = _const_env(self, values)
        device = next((values[n].device for n in self.tensor_names), torch.device("cpu"))
        outs = []
        for name, shape, dtype in self.outputs:
            dims = [_evaluate(d, env, self, name) for d in shape]
            outs.append(torch.empty(dims, dtype=dtype, device=device))
        if not outs:
            return None
        return outs[0] if len(outs) == 1 else tuple(outs)


@functools.cache
def _version_bump():
    """`bump(tensors)`: bump each tensor's version counter, as torch's in-place ops do (so autograd notices
    that a tensor it saved was written); None where torch has no such API. Where `torch._C._increment_version`
    takes a tuple (torch 2.13 does), it is called directly: half the cost of torch's wrapper, which an eager
    call of a writing kernel pays every time."""
    import torch

    public = getattr(torch.autograd.graph, "increment_version", None)
    if public is None:
        return None
    raw = getattr(torch._C, "_increment_version", None)
    try:
        raw((torch.empty(0),))
        return raw
    except (TypeError, RuntimeError):  # an older torch: one tensor per call
        def bump(tensors):
            for t in tensors:
                public(t)
        return bump


def _const_env(entry: OpEntry, values: dict) -> dict:
    """Each const and dynamic dim of the template -> its value in this call (an int or a SymInt), checking
    ranks, dtypes and the dims two tensors share (with torch._check, which also holds for symbolic sizes)."""
    import torch

    from ..language.dtypes import torch_dtype

    template = entry.template
    kernel = entry.kernel.definition.name
    for name in entry.tensor_names:
        t = values[name]
        ann = template.elaboration.buffers[name].annotation
        if not isinstance(t, torch.Tensor):
            raise TorchOpError(f"{kernel}() argument '{name}' must be a torch.Tensor; got {type(t).__name__}")
        if t.dim() != len(ann.shape):
            raise TorchOpError(f"{kernel}() argument '{name}' must have {len(ann.shape)} dims ({ann!r}); got "
                               f"{t.dim()}: {tuple(t.shape)}")
        expected = torch_dtype(ann.dtype)
        if t.dtype != expected:
            raise TorchOpError(f"{kernel}() argument '{name}' must have dtype {expected}; got {t.dtype}")
    env = dict(entry.extra)
    for const, (param, kind, dim) in template.const_sources.items():
        if const in env:
            continue
        t = values[param]
        env[const] = t.shape[dim] if kind == "shape" else t.stride(dim)
    for dyn, (param, dim) in template.dynamic_sources.items():
        env[dyn] = values[param].shape[dim]
    for name in entry.tensor_names:  # a dim that is a const or dynamic var must agree with its value
        ann = template.elaboration.buffers[name].annotation
        for dim, expr in enumerate(ann.shape):
            var = getattr(expr, "name", None)
            if var in env:
                size = values[name].shape[dim]
                torch._check(size == env[var], lambda n=name, d=dim, v=var: (
                    f"{kernel}() argument '{n}' dim {d} must be {v} = {env[v]}; got {values[n].shape[d]}"))
    return env


def _evaluate(expr, env: dict, entry: OpEntry, output: str):
    """A template shape expression (TVM PrimExpr over const and dynamic vars) as an int or SymInt."""
    from ..frontend.shapes import UnsupportedShapeExpr, evaluate

    try:
        return evaluate(expr, env)
    except KeyError as err:
        raise TorchOpError(
            f"{entry.kernel.definition.name}() output '{output}' has a dim '{err.args[0]}' that no "
            "argument's shape gives, so its size is not known before the kernel runs"
        ) from None
    except UnsupportedShapeExpr:
        raise TorchOpError(
            f"{entry.kernel.definition.name}() output '{output}' has shape expression {expr}, which "
            "the fake implementation cannot evaluate"
        ) from None


def _shape_vars(expr, out: set) -> set:
    from ..frontend.shapes import free_vars

    if not isinstance(expr, int):
        out |= free_vars(expr)
    return out


_registry_lock = threading.RLock()
_names: dict = {}  # op name without its copy number -> copies defined in this process


def stable_identity(kernel) -> dict | None:
    """What identifies a @tile_nb.jit kernel in every process (`JITFunction.identity`: name, source, the
    values its body reads), or None where one of those values has no stable text."""
    identity = kernel.identity()
    if not identity["persistable"]:
        return None
    return {k: identity[k] for k in ("name", "source_sha256", "environment")}


def _op_name(kernel_op: KernelOp, schema: str, static_key: tuple) -> str:
    """`<kernel>[_ad]_<digest>[_<copy>]`: the digest is a sha256 of what the op does (the kernel's identity:
    name, source, every value its body reads; the compile-time values; the schema; for a paired kernel, its
    backward's identity), so the same name means the same op in every process. Inductor and AOTAutograd keep
    compiled graphs on disk, which call ops by name: with a per-process counter a graph compiled by one
    process called `rms_bwd_3` in another that had no such op (seen on the H100), or, worse, one that was
    another kernel. A kernel whose body reads a value with no stable text gets a random digest (its graphs
    then match no other process's). A second op with the same digest in one process (a notebook cell
    defining the same kernel again) gets a copy number: it does what the first does."""
    import hashlib
    import json
    import secrets

    from ..frontend.environment import value_key

    kernel = kernel_op.kernel
    compile_values, extra = static_key
    material = {
        "kernel": stable_identity(kernel),
        "static": repr(sorted((k, value_key(v)) for k, v in {**compile_values, **extra}.items())),
        "tuned": sorted(kernel_op.tuned),
        "schema": schema,
        "suffix": kernel_op.suffix,
        "paired": kernel_op.pairing_identity(),
    }
    stable = material["kernel"] is not None and material["paired"] is not None
    digest = hashlib.sha256(json.dumps(material, sort_keys=True, default=repr).encode()).hexdigest()[:12] \
        if stable else "u" + secrets.token_hex(6)
    base = f"{_op_basename(kernel.definition.name)}{kernel_op.suffix}_{digest}"
    with _registry_lock:
        copies = _names.get(base, 0)
        _names[base] = copies + 1
    return base if copies == 0 else f"{base}_{copies}"


def _written_params(func) -> set:
    """Names of the PrimFunc's buffer parameters its body writes (tile ops' destinations, stores, atomics)."""
    from ..lower.irwalk import buffers_touched

    _, writes = buffers_touched(func.body)
    written = {w.name for w in writes}
    _atomic_targets(func.body, written)
    return written


def _atomic_targets(stmt, out: set) -> None:
    """`T.atomic_add(dst, value)` writes dst: an Evaluate of
    `call_extern("atomicAdd", address_of(dst[...]), ...)`, which buffers_touched counts as loads. Any buffer
    whose address an evaluated call takes counts as written."""
    import re

    from tvm import tirx

    from ..lower.irwalk import iter_stmts

    for s in iter_stmts(stmt):
        if isinstance(s, tirx.Evaluate):
            out.update(re.findall(r"address_of\(\s*(\w+)\[", str(s.value)))


class KernelOp:
    """A kernel as torch custom ops: `op = tile_nb.torch.op(kernel)`; `op(A, B, block=64)` runs the kernel
    like `kernel(A, B, block=64)`, through `torch.ops.tile_nb.<name>` where torch needs it (autograd, fake
    tensors, torch.compile, functorch), and `op.torch_op(block=64)` is that op
    (`torch.ops.tile_nb.<name>.default`)."""

    def __init__(self, kernel, *, suffix: str = "", caller=None):
        self.kernel = kernel  # the JITFunction: signature, templates, errors
        # what a call runs: the kernel, or its Autotuner
        self.caller = caller if caller is not None else kernel
        self.tuned = frozenset(getattr(caller, "tuned", ()))  # compile-time names an autotuner picks per call
        self.suffix = suffix
        self._entries: dict = {}  # static key -> OpEntry
        self._by_kwargs: dict = {}  # (n positional args, kwargs items) -> OpEntry, for the eager fast path
        self._by_count: dict = {}  # n positional args -> OpEntry, for calls without keywords
        self._on_new_entry = []  # callbacks (entry) -> None: autograd pairing registers on each new op
        self.paired = False  # a backward is registered on each op (tile_nb.torch.autograd)
        functools.update_wrapper(self, kernel, updated=())

    def __repr__(self) -> str:
        return f"<tile_nb torch op of {self.kernel.definition.name}>"

    def pairing_identity(self):
        """What the op's autograd formula depends on, as stable text (part of the op's name): "" for a kernel
        without a paired backward; None where it has no stable text."""
        return ""

    # -- binding ---------------------------------------------------------------------------------------------
    def _split(self, n_args: int, keys: tuple) -> tuple:
        """(runtime positions, static positions, runtime keywords, static keywords) of a call with `n_args`
        positional arguments and these keywords, from the signature alone."""
        sig = self.kernel.signature
        positional = [p for p in sig.params if not p.keyword_only]
        rpos = tuple(i for i, p in enumerate(positional[:n_args]) if p.is_runtime)
        spos = tuple(i for i, p in enumerate(positional[:n_args]) if not p.is_runtime)
        rkeys = tuple(k for k in keys if sig.by_name(k) is not None and sig.by_name(k).is_runtime)
        skeys = tuple(k for k in keys if k not in rkeys)
        return rpos, spos, rkeys, skeys

    def entry(self, static_named: dict) -> OpEntry:
        """The op for these compile-time values (by parameter name; consts as
        keywords), registered on first use."""
        kernel = self.kernel
        _, compile_values, extra = kernel._bind_compile_only(dict(static_named))
        from ..frontend.environment import value_key

        key = (tuple(value_key(compile_values[p.name]) for p in kernel.signature.compile_time),
               tuple(sorted((k, value_key(v)) for k, v in extra.items())), kernel._environment_key())
        found = self._entries.get(key)
        if found is not None:
            return found
        with _registry_lock:
            found = self._entries.get(key)
            if found is None:
                found = self._register(compile_values, extra)
                for callback in self._on_new_entry:
                    callback(found)
                self._entries[key] = found
        return found

    def _register(self, compile_values: dict, extra: dict) -> OpEntry:
        kernel = self.kernel
        name = kernel.definition.name
        schema, runtime_names, tensor_names, mutated, outputs, template = self._describe(
            compile_values, extra
        )
        if self.tuned:  # an autotuner: every configuration must be the same op (its choice is made per call)
            shown = (schema, [(o[0], str(o[1]), o[2]) for o in outputs])
            for config in self.caller.configs:
                other = self._describe({**compile_values, **config}, extra)
                if (other[0], [(o[0], str(o[1]), o[2]) for o in other[4]]) != shown:
                    raise TorchOpError(
                        f"{name}() cannot be one torch op over its autotuning configurations: with "
                        f"{config} its "
                        f"schema or outputs are {other[0]} "
                        f"{[(o[0], str(o[1]), o[2]) for o in other[4]]}, with the "
                        f"defaults {shown[0]} {shown[1]}",
                        **kernel._def_where(),
                    )
        qualname = f"{NAMESPACE}::{_op_name(self, schema, static_key=(compile_values, extra))}"
        positional = [p.name for p in kernel.signature.params[: len(runtime_names)]] == runtime_names and \
            not any(p.keyword_only for p in kernel.signature.runtime)
        static = dict(extra)
        static.update({k: v for k, v in compile_values.items() if k not in self.tuned})
        entry = OpEntry(
            kernel,
            qualname,
            schema,
            static,
            runtime_names,
            tensor_names,
            mutated,
            outputs,
            template,
            positional,
            extra=dict(extra),
            caller=self.caller,
        )
        _define(entry, paired=self.paired)
        return entry

    def _describe(self, compile_values: dict, extra: dict) -> tuple:
        """(schema, runtime names, tensor names, written tensors, outputs,
        template) of the op for these values."""
        kernel = self.kernel
        name = kernel.definition.name
        where = kernel._def_where()
        _, template = kernel._template_for(compile_values)
        elab = template.elaboration
        if elab.stopped is not None:
            raise TorchOpError(
                f"{name}() cannot be a torch op: its template (phase 1) stops at line {elab.stopped.lineno} "
                f"({elab.stopped.reason}), so its parameters, outputs and writes are not known "
                "for every shape",
                **where,
                hint="keep Python control flow on consts (if, range over a const) out of the body, e.g. "
                "T.serial(...) for loops and T.if_then_else for values",
            )
        bad_extra = [k for k in extra if k not in template.consts]
        if bad_extra:
            raise TorchOpError(
                f"{name}() got unexpected keyword argument(s) {', '.join(map(repr, bad_extra))}", **where
            )
        runtime_names, tensor_names, args = [], [], []
        written = _written_params(elab.func)
        outputs = []
        for out in elab.outputs:
            ann = elab.buffers[out].annotation
            from ..language.dtypes import torch_dtype

            outputs.append((out, tuple(ann.shape), torch_dtype(ann.dtype)))
        known = set(template.const_sources) | set(template.dynamic_sources) | set(extra)
        for out, shape, _ in outputs:
            unknown = set().union(*(_shape_vars(d, set()) for d in shape)) - known if shape else set()
            if unknown:
                raise TorchOpError(
                    f"{name}() cannot have a fake implementation: the shape of its output '{out}' depends on "
                    f"{', '.join(sorted(unknown))}, which no argument's shape gives (a size known "
                    "only when the "
                    "kernel runs)",
                    **where,
                    hint=f"make {', '.join(sorted(unknown))} a dim of an input tensor, or pass it "
                         "as a keyword "
                    f"const ({name}(..., {sorted(unknown)[0]}=...))",
                )
        for p in kernel.signature.runtime:
            if p.kind == POINTER:
                raise TorchOpError(
                    f"{name}() cannot be a torch op: '{p.name}' is a T.ptr (an address carries no "
                    "shape, dtype or device for torch to track)",
                    **where,
                    hint=f"annotate '{p.name}' as a T.Tensor in the body",
                )
            if p.name in elab.buffers and elab.buffers[p.name].annotation.pointers:
                raise TorchOpError(
                    f"{name}() cannot be a torch op: '{p.name}' is a table of pointers (T.Tensor(shape, "
                    "T.ptr)), whose tensors the kernel reads and writes without torch seeing them",
                    **where,
                    hint="pass the tensors themselves (a tensor per group, or the groups packed into one)",
                )
            runtime_names.append(p.name)
            if p.name in elab.buffers:
                tensor_names.append(p.name)
                alias = (
                    f"({chr(ord('a') + len([a for a in args if '!' in a]))}!)" if p.name in written else ""
                )
                args.append(f"Tensor{alias} {p.name}")
            elif p.name in elab.scalars or p.kind == SCALAR:
                scalar = elab.scalars.get(p.name)
                args.append(f"{_scalar_schema_type(scalar.dtype if scalar else p.annotation)} {p.name}")
            else:
                raise TorchOpError(
                    f"{name}() runtime parameter '{p.name}' is neither a tensor nor a scalar in the template",
                    **where,
                )
        returns = "()" if not outputs else "Tensor" if len(outputs) == 1 else \
            "(" + ", ".join("Tensor" for _ in outputs) + ")"
        schema = f"({', '.join(args)}) -> {returns}"
        mutated = tuple(n for n in tensor_names if n in written)
        return schema, runtime_names, tensor_names, mutated, outputs, template

    def torch_op(self, **static):
        """The op for these compile-time values (consts as keywords): `torch.ops.tile_nb.<name>.default`,
        which takes the runtime arguments only: `op.torch_op(block=64)(A, B)`."""
        return self.entry(static).overload

    # -- calls -----------------------------------------------------------------------------------------------
    def __call__(self, *args, **kwargs):
        # The hot path: one dict lookup and a generated straight-line check (every attribute lookup here costs
        # ~50 ns of a 1 us budget).
        try:
            entry = (
                self._by_kwargs[(len(args), tuple(kwargs.items()))] if kwargs else self._by_count[len(args)]
            )
        # new keywords, or an unhashable value (the kernel's binding explains it)
        except (KeyError, TypeError):
            entry, runtime = self._bind(args, kwargs)
            if not entry.plain(runtime):
                return entry.dispatch(runtime)
            result = self.caller(*args, **kwargs)
            entry.bump_written(runtime)
            return result
        return entry.eager(args, kwargs)

    def _bind(self, args, kwargs):
        rpos, spos, rkeys, skeys = self._split(len(args), tuple(kwargs))
        positional = [p for p in self.kernel.signature.params if not p.keyword_only]
        static = {positional[i].name: args[i] for i in spos}
        static.update({k: kwargs[k] for k in skeys})
        entry = self.entry(static)
        given = {positional[i].name: args[i] for i in rpos}
        given.update({k: kwargs[k] for k in rkeys})
        missing = [n for n in entry.runtime_names if n not in given]
        if missing:
            from ..errors import ArgumentCountError

            raise ArgumentCountError(
                f"{self.kernel.definition.name}() missing {len(missing)} runtime argument(s): "
                f"{', '.join(repr(m) for m in missing)}",
                **self.kernel._def_where(),
            )
        runtime = tuple(given[n] for n in entry.runtime_names)
        # positional: the runtime arguments
        if not rkeys and len(args) == len(rpos) == len(entry.runtime_names):
            try:
                if kwargs:
                    self._by_kwargs[(len(args), tuple(kwargs.items()))] = entry
                else:
                    self._by_count[len(args)] = entry
            except TypeError:
                pass
        return entry, runtime


_library = None


def _lib():
    """The torch.library.Library("tile_nb", "FRAGMENT") every op is defined in
    (kept alive for the process)."""
    global _library
    if _library is None:
        import torch

        _library = torch.library.Library(NAMESPACE, "FRAGMENT")
    return _library


def _define(entry: OpEntry, paired: bool) -> None:
    """Define the op (torch.library.Library.define) with its CPU and CUDA kernels (the kernel's own call), its
    fake implementation, and, unless a backward is paired (registered by the pairing), an Autograd kernel that
    attaches a grad_fn raising NoBackwardError to the outputs of inputs that require grad.

    Not torch.library.custom_op: its per-call Python layers (an autograd kernel with a context manager, an
    aliasing check of the outputs, a version-bump kernel) cost ~2.5x the dispatcher overhead of this
    registration. The op is tagged pt2_compliant, and needs_exact_strides (needs_fixed_stride_order on older
    torch) so that inductor keeps the strides the kernel would see in eager mode."""
    import torch

    lib = _lib()
    tags = [torch.Tag.pt2_compliant_tag]
    stride_tag = getattr(torch.Tag, "needs_exact_strides", None) or getattr(
        torch.Tag, "needs_fixed_stride_order", None
    )
    if stride_tag is not None:
        tags.append(stride_tag)
    lib.define(entry.opname + entry.schema, tags=tags)
    entry.overload = getattr(getattr(torch.ops, NAMESPACE), entry.opname).default
    impl = _impl_of(entry)
    lib.impl(entry.opname, impl, "CPU")
    lib.impl(entry.opname, impl, "CUDA")
    torch.library.register_fake(entry.qualname, _fake_of(entry), lib=lib)
    if paired:
        return
    if entry.outputs:
        lib.impl(entry.opname, _no_backward_kernel(entry), "Autograd", with_keyset=True)
    else:
        lib.impl(entry.opname, torch.library.fallthrough_kernel, "Autograd")
    # An op with no outputs has nothing for autograd to attach a grad_fn to (the tensors it writes that
    # require grad are refused before the call, in `OpEntry.dispatch` and at trace time), so no Python
    # Autograd kernel: torch's fallthrough costs ~1.8 us less per call through the dispatcher, which a
    # compiled graph pays on every call.


def _op_basename(name: str) -> str:
    safe = "".join(c if c.isalnum() or c == "_" else "_" for c in name)
    return safe if safe and not safe[0].isdigit() else f"k_{safe}"


def _impl_of(entry: OpEntry):
    """The CPU / CUDA kernel of the op: the kernel's own call, and a version bump of the tensors it writes
    (what torch's in-place ops do, so autograd notices a saved tensor changed)."""
    bump = _version_bump()
    written = [entry.runtime_names.index(n) for n in entry.mutated] if bump is not None else []
    kernel, static, names = entry.caller, entry.static, entry.runtime_names

    if not written and entry.positional:
        def impl(*runtime):
            return kernel(*runtime, **static)
    else:
        def impl(*runtime):
            if entry.positional:
                result = kernel(*runtime, **static)
            else:
                result = kernel(**dict(zip(names, runtime, strict=True)), **static)
            bump(tuple(runtime[i] for i in written))
            return result

    impl.__name__ = entry.opname
    return impl


def _no_backward_error(entry: OpEntry):
    name = entry.kernel.definition.name
    return NoBackwardError(
        f"{name}() has no backward kernel paired, so there is no gradient through {entry.qualname} (an input "
        "requires grad, and autograd, or the backward torch.compile traces, reached it)",
        **entry.kernel._def_where(),
        hint=f"pair one: tile_nb.torch.autograd({name}, backward=<kernel>, save=(...)); or pass tensors "
             "that do not require grad (.detach(), torch.no_grad())")


def _no_backward_kernel(entry: OpEntry):
    """The Autograd kernel of an op without a paired backward: below autograd when no input requires grad (or
    grad mode is off); otherwise through an autograd.Function whose backward raises NoBackwardError (not a
    silent detach: torch's convention for an op without a derivative)."""
    import torch
    from torch import _C

    after_autograd = _C._after_autograd_keyset
    grad_enabled, any_requires_grad = _C.is_grad_enabled, _C._any_requires_grad
    redispatch = entry.overload._handle.redispatch_boxed  # what OpOverload.redispatch calls, one frame less

    def forward(ctx, keyset, *args):
        return redispatch(keyset & after_autograd, *args)

    def backward(ctx, *grads):
        raise _no_backward_error(entry)

    # named after the op: the grad_fn reads NoBackwardFor_<op>Backward
    NoBackward = type(f"NoBackwardFor_{NAMESPACE}_{entry.opname}", (torch.autograd.Function,),
                      {"forward": staticmethod(forward), "backward": staticmethod(backward)})

    def autograd_kernel(keyset, *args):
        if entry.outputs and grad_enabled() and any_requires_grad(*args):
            return NoBackward.apply(keyset, *args)
        return redispatch(keyset & after_autograd, *args)

    return autograd_kernel


def _fake_of(entry: OpEntry):
    def fake(*runtime):
        return entry.fake(*runtime)

    return fake


_ops: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def op(kernel) -> KernelOp:
    """The torch custom ops of a `@tile_nb.jit` kernel: `tile_nb.torch.op(kernel)(A, B)` runs the kernel as
    `torch.ops.tile_nb.<name>` (one op per compile-time key, registered on first use)
    with a fake implementation for torch.compile, FakeTensorMode and make_fx. The same
    object for every call on one kernel.

    An `@tile_nb.autotune` kernel is one op per compile-time key of the values it does not tune: its call
    picks the configuration at run time (every configuration must give the same schema and outputs)."""
    from ..autotune import Autotuner
    from ..jit import JITFunction

    if isinstance(kernel, KernelOp):
        return kernel
    if not isinstance(kernel, (JITFunction, Autotuner)):
        raise TypeError(f"tile_nb.torch.op takes a @tile_nb.jit kernel; got {type(kernel).__name__}")
    with _registry_lock:
        found = _ops.get(kernel)
        if found is None:
            if isinstance(kernel, Autotuner):
                found = KernelOp(kernel.kernel, caller=kernel)
            else:
                found = KernelOp(kernel)
            _ops[kernel] = found
    return found
