"""Pairing a forward kernel with its backward: `tile_nb.torch.autograd(forward, backward=..., save=...)`.

The result (`Differentiable`) is called like the forward kernel and is differentiable in eager mode, under
`torch.compile` and in `torch.autograd.gradcheck`: its ops are the forward's custom ops with an autograd
formula registered (`torch.library.register_autograd`), separate from the bare kernel's ops (which have none:
a backward through them raises `NoBackwardError`).

The backward is a kernel, bound by names:
- its runtime parameters named like a forward parameter or output listed in `save` get the saved tensor (or
  the forward's runtime scalar of that name); `grad_<out>` gets the gradient of the forward output `<out>`
  (made contiguous);
- its compile-time parameters named like one of the forward's get the forward
  call's value (block sizes, scales);
- its `T.empty` outputs are the gradients of the forward inputs: by name (`grad_X` is the gradient of `X`), or
  in the order `inputs=` gives. Inputs without a gradient get None.

Or the backward is a Python function with torch's contract: `setup_context(ctx, inputs, output)` and
`backward(ctx, *grads)` returning one gradient (or None) per runtime argument of the forward, in signature
order; `ctx.compile_values` holds the forward call's compile-time values. It may call kernels: call them
through `tile_nb.torch.op(kernel)`, so that torch.compile can trace the backward.
"""
from __future__ import annotations

from typing import Any

from .ops import KernelOp, NoBackwardError, OpEntry, TorchOpError, op, stable_identity

__all__ = ["autograd", "Differentiable", "NoBackwardError"]


class Differentiable(KernelOp):
    """A forward kernel paired with its backward (see `tile_nb.torch.autograd`); called like the forward."""

    def __init__(self, forward, backward, *, save=None, inputs=None, setup_context=None, caller=None):
        super().__init__(forward, suffix="_ad", caller=caller)
        self.paired = True
        self.forward = forward
        self.backward = backward
        self.save = tuple(save) if save is not None else None
        self.inputs = tuple(inputs) if inputs is not None else None
        self.setup_context = setup_context
        self._on_new_entry.append(self._pair)
        self._check_pairing()

    def __repr__(self) -> str:
        name = getattr(self.backward, "__name__", repr(self.backward))
        return f"<tile_nb differentiable {self.forward.definition.name} (backward {name})>"

    def pairing_identity(self):
        """The backward kernel's identity and how it is fed (part of the forward op's name, so that a compiled
        graph kept on disk never runs with another pairing); None for a Python backward, whose code and
        what it reads have no stable text here."""
        if not _is_kernel(self.backward):
            return None
        described = stable_identity(getattr(self.backward, "kernel", self.backward))  # an Autotuner's kernel
        return None if described is None else repr((described, self.save, self.inputs))

    def _check_pairing(self) -> None:
        fwd = self.forward.signature
        where = self.forward._def_where()
        if _is_kernel(self.backward):
            if self.setup_context is not None:
                raise TorchOpError(
                    "setup_context= goes with a Python backward function; a backward kernel takes "
                    "save= (the names of the forward's tensors to keep)",
                    **where,
                )
            names = {p.name for p in fwd.params}
            for name in self.save or ():
                if not isinstance(name, str):
                    raise TorchOpError(
                        f"save= lists names of the forward's parameters or outputs; got {name!r}", **where
                    )
            unknown_inputs = [n for n in self.inputs or () if n not in names]
            if unknown_inputs:
                raise TorchOpError(
                    f"inputs= names {', '.join(unknown_inputs)}, which {self.forward.definition.name}"
                    f"() does not take",
                    **where,
                )
        elif callable(self.backward):
            if self.save is not None or self.inputs is not None:
                raise TorchOpError(
                    "save= and inputs= go with a backward kernel; a Python backward saves what it "
                    "needs in setup_context(ctx, inputs, output)",
                    **where,
                )
        else:
            raise TypeError(f"backward= takes a @tile_nb.jit kernel or a function (ctx, *grads); got "
                            f"{type(self.backward).__name__}")

    # -- registration ----------------------------------------------------------------------------------------
    def _pair(self, entry: OpEntry) -> None:
        name = self.forward.definition.name
        if entry.mutated or not entry.outputs:
            raise TorchOpError(
                f"{name}() cannot be paired with a backward: it writes its argument(s) "
                f"{', '.join(entry.mutated) or '(none)'} in place and returns "
                f"{'nothing' if not entry.outputs else 'T.empty outputs'}; torch differentiates "
                "functions that "
                "return new tensors",
                **self.forward._def_where(),
                hint="allocate the results with T.empty(...) and return them",
            )
        if _is_kernel(self.backward):
            setup, backward = _kernel_backward(self, entry)
        else:
            setup, backward = _with_compile_values(self.setup_context, entry), self.backward
        import torch

        from .ops import _lib

        torch.library.register_autograd(entry.qualname, backward, setup_context=setup, lib=_lib())


def _is_kernel(obj) -> bool:
    """A @tile_nb.jit kernel, or an @tile_nb.autotune one."""
    from ..autotune import Autotuner
    from ..jit import JITFunction

    return isinstance(obj, (JITFunction, Autotuner))


def _with_compile_values(setup_context, entry: OpEntry):
    """The user's setup_context, with `ctx.compile_values` set first: the forward call's compile-time values
    and keyword consts (a Python backward passes them on to its kernels)."""
    static = dict(entry.static)

    def setup(ctx, inputs, output):
        ctx.compile_values = static
        if setup_context is not None:
            setup_context(ctx, inputs, output)

    return setup


def _kernel_backward(pair: Differentiable, entry: OpEntry):
    """setup_context and backward for a backward kernel bound by names."""
    import torch

    fwd_name = pair.forward.definition.name
    bwd = pair.backward
    bwd_name = bwd.definition.name
    where = bwd._def_where()
    out_names = [o[0] for o in entry.outputs]
    scalar_names = [n for n in entry.runtime_names if n not in entry.tensor_names]
    save = pair.save if pair.save is not None else tuple(entry.tensor_names)
    unknown = [n for n in save if n not in entry.runtime_names and n not in out_names]
    if unknown:
        raise TorchOpError(
            f"save= names {', '.join(unknown)}, which is neither a runtime parameter nor an output of "
            f"{fwd_name}() (parameters {', '.join(entry.runtime_names)}; outputs "
            f"{', '.join(out_names)})",
            **pair.forward._def_where(),
        )
    saved_tensors = [n for n in save if n not in scalar_names]
    bsig = bwd.signature
    bwd_op = op(bwd)
    static = {p.name: entry.static[p.name] for p in bsig.compile_time
              if p.name in entry.static and p.name not in bwd_op.tuned}  # an autotuned backward picks its own
    feeds = {}  # backward runtime parameter -> ("saved", name) | ("grad", output index) | ("scalar", name)
    for p in bsig.runtime:
        if p.name.startswith("grad_") and p.name[5:] in out_names:
            feeds[p.name] = ("grad", out_names.index(p.name[5:]))
        elif p.name in saved_tensors:
            feeds[p.name] = ("saved", saved_tensors.index(p.name))
        elif p.name in scalar_names:
            feeds[p.name] = ("scalar", p.name)
        else:
            options = [f"grad_{o}" for o in out_names] + list(saved_tensors) + scalar_names
            raise TorchOpError(
                f"{bwd_name}() runtime parameter '{p.name}' matches nothing the forward "
                f"{fwd_name}() saves or "
                "passes back: a backward kernel's runtime parameters are named after saved tensors "
                "(save=), the "
                f"forward's runtime scalars, or grad_<output>; here: {', '.join(options)}",
                **where,
                hint=f"add '{p.name}' to save= if it is a forward input or output",
            )
    bwd_entry = bwd_op.entry(static)
    grad_outs = [o[0] for o in bwd_entry.outputs]
    if pair.inputs is not None:
        targets = list(pair.inputs)
    elif grad_outs and all(g.startswith("grad_") and g[5:] in entry.tensor_names for g in grad_outs):
        targets = [g[5:] for g in grad_outs]
    else:
        raise TorchOpError(
            f"{bwd_name}() returns {len(grad_outs)} output(s) ({', '.join(grad_outs) or 'none'}) "
            "and it is not "
            f"clear which input of {fwd_name}() each is the gradient of",
            **where,
            hint=f"name them grad_<input> (inputs: {', '.join(entry.tensor_names)}), or pass "
                 "inputs=(...) in order",
        )
    if len(targets) != len(grad_outs):
        raise TorchOpError(f"inputs= names {len(targets)} forward input(s) but {bwd_name}() returns "
                           f"{len(grad_outs)} gradient(s)", **where)
    bad = [t for t in targets if t not in entry.tensor_names]
    if bad:
        raise TorchOpError(f"{', '.join(bad)} is not a tensor input of {fwd_name}() (tensor inputs: "
                           f"{', '.join(entry.tensor_names)}); only tensors get gradients", **where)
    slots = [entry.runtime_names.index(t) for t in targets]
    n_inputs = len(entry.runtime_names)

    def setup_context(ctx, inputs, output):
        values = dict(zip(entry.runtime_names, inputs, strict=True))
        outs = output if isinstance(output, tuple) else (output,)
        values.update(zip(out_names, outs, strict=True))
        ctx.save_for_backward(*[values[n] for n in saved_tensors])
        ctx.tile_nb_scalars = {n: values[n] for n in scalar_names}
        ctx.tile_nb_outputs = [(o.shape, o.dtype, o.device) for o in outs]  # a None gradient becomes zeros

    def backward(ctx, *grads):
        saved = ctx.saved_tensors
        kwargs: dict[str, Any] = {}
        for pname, (kind, key) in feeds.items():
            if kind == "grad":
                g = grads[key]
                if g is None:
                    shape, dtype, device = ctx.tile_nb_outputs[key]
                    g = torch.zeros(shape, dtype=dtype, device=device)
                kwargs[pname] = g.contiguous()
            elif kind == "saved":
                kwargs[pname] = saved[key]
            else:
                kwargs[pname] = ctx.tile_nb_scalars[key]
        result = bwd_op(**kwargs, **static)
        result = result if isinstance(result, tuple) else (result,)
        out: list = [None] * n_inputs
        for slot, g in zip(slots, result, strict=True):
            out[slot] = g
        return tuple(out)

    return setup_context, backward


def autograd(forward=None, *, backward, save=None, inputs=None, setup_context=None):
    """Pair a forward kernel with its backward; returns a `Differentiable` called like the forward.

    ```python
    @tile_nb.jit
    def mul_bwd(X, W, grad_out, scale: float = 1.0):       # gradients of out = scale * X * W
        N = T.const('N')
        X: T.Tensor[[N], T.float32]
        ...
        grad_X = T.empty((N,), T.float32)
        grad_W = T.empty((N,), T.float32)
        ...
        return grad_X, grad_W

    @tile_nb.torch.autograd(backward=mul_bwd, save=("X", "W"))
    @tile_nb.jit
    def mul(X, W, scale: float = 1.0):
        ...
        return out

    y = mul(x, w, scale=2.0)          # differentiable; under torch.compile too
    ```
    `backward` is a kernel bound by names (module docstring) or a Python function `backward(ctx, *grads)` with
    `setup_context(ctx, inputs, output)`, as `torch.library.register_autograd` takes them. `save`
    lists the forward parameters and outputs the backward kernel reads (default: every tensor
    parameter); `inputs` the forward inputs whose gradients the backward kernel returns, in order
    (default: by the names grad_<input>)."""
    if forward is None:
        return lambda fwd: autograd(
            fwd, backward=backward, save=save, inputs=inputs, setup_context=setup_context
        )
    from ..autotune import Autotuner

    caller = None
    if isinstance(forward, KernelOp):
        forward, caller = forward.kernel, forward.caller
    if isinstance(forward, Autotuner):
        forward, caller = forward.kernel, forward
    if not _is_kernel(forward):
        raise TypeError(f"tile_nb.torch.autograd pairs a @tile_nb.jit kernel; got {type(forward).__name__}")
    return Differentiable(forward, backward, save=save, inputs=inputs, setup_context=setup_context,
                          caller=caller)
