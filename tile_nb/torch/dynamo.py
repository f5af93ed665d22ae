"""A `@tile_nb.jit` kernel inside `torch.compile`: Dynamo traces a call of the kernel as one call of its
custom op (tile_nb/torch/ops.py), with no graph break, and never traces tile_nb's own Python.

`install_dynamo_hook` (run by `import tile_nb`) marks the kernel classes as wrappers in the protocol Dynamo
honours for `torch.jit._script_if_tracing`; `dynamo_call` is the small function Dynamo traces instead, which
picks the op at trace time (constant-folded)."""
from __future__ import annotations

from ..language.dtypes import DType
from .ops import NAMESPACE, KernelOp, op

__all__ = ["install_dynamo_hook", "dynamo_call"]


def install_dynamo_hook() -> None:
    """Make a call of a `@tile_nb.jit` kernel inside `torch.compile` a call of its custom op, with no graph
    break and without Dynamo tracing tile_nb's Python.

    Dynamo treats an object whose class has the attribute `__script_if_tracing_wrapper` as a wrapper and
    traces its `__original_fn` instead (the protocol of `torch.jit._script_if_tracing`, in Dynamo since torch
    2.1; `substitute_in_graph` serves C functions, not Python methods, and `allow_in_graph` would run the
    kernel's Python on fake tensors). `__original_fn` here is a small function that asks for the op at trace
    time (constant-folded with `torch._dynamo.assume_constant_result`) and calls it. Setting two class
    attributes imports nothing; eager calls never read them."""
    from ..autotune import Autotuner
    from ..jit import JITFunction

    if "__original_fn" in JITFunction.__dict__:
        return
    JITFunction.traced_call = staticmethod(lambda kernel, args, kwargs: op(kernel)(*args, **kwargs))
    for cls, kernel_op in ((JITFunction, op), (KernelOp, lambda same: same), (Autotuner, op)):
        setattr(cls, "__script_if_tracing_wrapper", True)
        setattr(cls, "__original_fn", _OriginalFn(kernel_op))


class _OriginalFn:
    """`__original_fn` of a kernel, a KernelOp or an Autotuner: the function Dynamo traces in place of a call
    (`dynamo_call`). Only Dynamo reads it (then torch._dynamo is loaded); introspection (dir,
    inspect.getmembers, help) before that sees no such attribute rather than importing Dynamo.

    A non-data descriptor that stores its value in the instance's `__dict__` on first read: Dynamo guards on
    the attribute, and every call of a compiled graph re-reads it, so later reads must be a dict lookup, not
    this Python code (as a property it cost two Python calls per graph call)."""

    def __init__(self, kernel_op):
        self.kernel_op = kernel_op  # the instance -> its KernelOp

    def __get__(self, instance, owner=None):
        import sys

        if instance is None:
            return self
        if "torch._dynamo" not in sys.modules:
            raise AttributeError("__original_fn")
        fn = dynamo_call(self.kernel_op(instance))
        instance.__dict__["__original_fn"] = fn
        return fn


def dynamo_call(me: KernelOp):
    """The function Dynamo traces in place of a call of the kernel (see `install_dynamo_hook`), one per
    KernelOp: the op is picked at trace time (constant-folded), and the graph gets one call of
    `torch.ops.tile_nb.<op>.default`."""
    import torch

    fn = getattr(me, "_dynamo_fn", None)
    if fn is not None:
        return fn

    @torch._dynamo.assume_constant_result
    def split(n_args, keys):
        return (*me._split(n_args, keys), _names_of_positions(me, n_args))

    @torch._dynamo.assume_constant_result
    def opname(static_positional, static_keywords):
        positional = [p for p in me.kernel.signature.params if not p.keyword_only]
        named = {positional[i].name: v for i, v in static_positional}
        named.update(static_keywords)
        entry = me.entry(named)
        return entry.opname, tuple(entry.runtime_names), entry.mutated

    @torch._dynamo.assume_constant_result
    def refuse(name, written):
        entry = next(e for e in me._entries.values() if e.opname == name)
        entry.dispatch([_RequiresGrad() if n in written else None for n in entry.runtime_names])

    def call(*args, **kwargs):
        rpos, spos, rkeys, skeys, names = split(len(args), tuple(kwargs))
        name, runtime_names, mutated = opname(tuple((i, _constant(args[i])) for i in spos),
                                              {k: _constant(kwargs[k]) for k in skeys})
        by_name = {names[i]: args[i] for i in rpos}
        for k in rkeys:
            by_name[k] = kwargs[k]
        if mutated and torch.is_grad_enabled():  # constants while tracing: grad mode, requires_grad
            written = tuple(n for n in mutated if by_name[n].requires_grad)
            if written:
                refuse(name, written)
        return getattr(getattr(torch.ops, NAMESPACE), name).default(*[by_name[n] for n in runtime_names])

    me._dynamo_fn = call
    return call


def _names_of_positions(kernel_op: KernelOp, n: int) -> tuple:
    return tuple(p.name for p in kernel_op.kernel.signature.params if not p.keyword_only)[:n]


def _constant(value):
    """A compile-time argument as Dynamo takes constants: a T.dtype as its plain name (torch
    2.11's Dynamo refuses a str subclass in `assume_constant_result`:
    "UserDefinedObjectVariable(DType) is not a constant")."""
    return value.plain if type(value) is DType else value  # a subclass (T.tfloat32) keeps its type


class _RequiresGrad:
    """Stands for a written tensor that requires grad in `dynamo_call`'s refusal (a real tensor is
    not at hand at trace time)."""

    requires_grad = True
