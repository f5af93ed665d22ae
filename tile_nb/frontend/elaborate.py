"""Phases 1 and 2: run the rewritten kernel body under TVM's IR builder.

Phase 1 (template) runs it with every `T.const` as a `tvm.tirx.Var`; where plain Python needs a
concrete value, the template stops at that statement and records why. Phase 2 (specialize) runs it
again with the consts as Python ints. Both return an `Elaboration`: the `PrimFunc` plus what the
runtime needs to check and call it.
"""
from __future__ import annotations

import builtins
import contextlib
import linecache
import re
import time
from dataclasses import dataclass, field
from typing import Any

from ..errors import AnnotationError, DSLError, ReturnError, TileNBError
from ..language import loops, memory, sync
from ..language import state as _state
from ..language.annotations import TensorAnnotation, ptr
from ..language.dtypes import PACKED_4BIT, DType
from ..language.extern import EXTERN_SOURCES_ATTR, is_extern_call
from ..language.irutil import dtype_of, is_buffer, is_expr, is_load, unwrap_comparison
from .indexing import index_dims
from .macros import call_macro
from .params import COMPILE_TIME, POINTER, SCALAR, TENSOR, KernelSignature

__all__ = ["Elaboration", "BufferParam", "ScalarParam", "Stop", "elaborate"]


@dataclass
class BufferParam:
    """A runtime tensor parameter (or `T.empty` output) and the annotation it came from."""

    name: str
    # "tensor", "pointer", "output" or "scratch" (T.alloc_global: allocated by the call, not returned)
    kind: str
    annotation: TensorAnnotation  # in this phase's terms (Vars in phase 1, ints in phase 2)
    buffer: Any
    lineno: int
    col: int
    end_col: int | None
    filename: str | None = None
    # a T.int4 / T.uint4 tensor: its logical annotation (`annotation` is the storage, int8 with the last
    # dim halved: language/packed.py)
    packed: TensorAnnotation | None = None


@dataclass
class ScalarParam:
    name: str
    dtype: DType
    var: Any
    lineno: int


@dataclass
class Stop:
    """Where and why the template stopped before the end of the body."""

    lineno: int
    reason: str


@dataclass
class Elaboration:
    func: Any  # tvm.tirx.PrimFunc
    symbolic: bool
    buffers: dict[str, BufferParam] = field(default_factory=dict)
    scalars: dict[str, ScalarParam] = field(default_factory=dict)
    outputs: list[str] = field(default_factory=list)
    scratch: list[str] = field(default_factory=list)  # T.alloc_global buffers: parameters after the outputs
    consts: list[str] = field(default_factory=list)
    const_vars: dict[str, Any] = field(default_factory=dict)
    dynamic: dict[str, Any] = field(default_factory=dict)
    threads: int | None = None
    stopped: Stop | None = None
    assumptions: list = field(default_factory=list)  # (line, text) of asserts the template could not check
    seconds: float = 0.0

    def script(self) -> str:
        return self.func.script()


class _Placeholder:
    """Stands for a runtime parameter while the body runs, until its annotation
    turns it into a buffer or var."""

    def __init__(self, name: str, pointer: bool):
        self.name = name
        self.pointer = pointer

    def __repr__(self) -> str:
        return (f"<runtime parameter '{self.name}' (annotate it in the body, e.g. "
                f"{self.name}: T.Tensor[[N], T.float32])>")


_UNSET = object()


def _is_expr(x) -> bool:
    return is_expr(x)


def _reads_memory(expr) -> bool:
    from ..language.stmtwalk import walk_expr

    found = []
    walk_expr(expr, lambda x: found.append(x) if is_load(x) else None)
    return bool(found)


class Hooks:
    """The `__tnb__` object the rewritten body calls (see `frontend.rewrite`)."""

    UNSET = _UNSET

    def __init__(self, st: _state.State, result: Elaboration, runtime_names: set[str]):
        self.st = st
        self.result = result
        self.runtime_names = runtime_names
        self.pending_outputs: list[BufferParam] = []
        self.declared_outputs: list[BufferParam] = []  # out_idx's, made before the body runs
        self.scratch: list[BufferParam] = []  # T.alloc_global's, named ws0, ws1, ... until bound to a name
        self.returned = False
        self.ir_ifs = 0  # run-time `if`s open now
        self.ir_conds: list = []  # their conditions, innermost last (a `sync.WarpGroups` makes T.ws regions)
        self.parallel_depth = 0  # T.Parallel loops open now
        self.macro_frames: list[int] = []  # ir_nesting() where each T.macro being elaborated was called

    # -- locations -------------------------------------------------------------------------------------------
    def at(self, lineno: int, col: int, end_col: int | None) -> None:
        self.st.lineno, self.st.col, self.st.end_col = lineno, col, end_col

    # -- parameters ------------------------------------------------------------------------------------------
    def annotate(self, name: str, annotation, current):
        st = self.st
        if not isinstance(current, _Placeholder):
            where = (
                "is not a parameter of the kernel" if name not in self.runtime_names else "is annotated twice"
            )
            raise AnnotationError(
                f"'{name}' {where}; in-body annotations declare runtime parameters",
                **self._where(),
                hint="annotate each tensor parameter once, at the top of the body",
            )
        if st.kernel_open:
            raise AnnotationError(
                f"the annotation of '{name}' must come before `with T.Kernel(...)`", **self._where()
            )
        if annotation is ptr:
            current.pointer = True
            return current
        if isinstance(annotation, TensorAnnotation):
            if str(annotation.dtype) in PACKED_4BIT:
                return self._packed_param(name, annotation, current.pointer)
            return self._buffer_param(name, "pointer" if current.pointer else "tensor", annotation)
        if isinstance(annotation, DType):
            return self._scalar_param(name, annotation)
        raise AnnotationError(
            f"the annotation of '{name}' must be T.Tensor[[dims], dtype], "
            f"T.StridedTensor[[dims], [strides], dtype], T.ptr or a dtype such as T.float32; "
            f"got {annotation!r}",
            **self._where(),
        )

    def _where(self) -> dict:
        st = self.st
        return dict(filename=st.filename, lineno=st.lineno or None, col=st.col, end_col=st.end_col)

    def _buffer_param(self, name: str, kind: str, annotation: TensorAnnotation):
        from tvm.script.ir_builder import IRBuilder
        from tvm.script.ir_builder import tirx as T

        self._adopt_dynamic(annotation.shape + (annotation.strides or ()))
        handle = T.arg(name, T.handle())
        shape, strides = index_dims(annotation.shape, annotation.strides)  # int64 dims for >= 2^31 elements
        buf = T.match_buffer(handle, shape, str(annotation.dtype), strides=strides)
        IRBuilder.name(name, buf)
        st = self.st
        if annotation.pointers:
            st.pointer_tables.append(buf)
        self.result.buffers[name] = BufferParam(name, kind, annotation, buf, st.lineno, st.col, st.end_col,
                                                st.filename)
        return buf

    def _packed_param(self, name: str, annotation: TensorAnnotation, pointer: bool):
        """A T.int4 / T.uint4 tensor: the call passes its bytes, two values each along the last dim; the
        parameter is that int8 / uint8 buffer, and the body reads it through a PackedTensor."""
        from tvm import tirx

        from ..language.packed import PackedTensor

        st = self.st
        where = self._where()
        if pointer or annotation.strides is not None:
            raise AnnotationError(f"'{name}': a {annotation.dtype!r} tensor is a contiguous T.Tensor "
                                  "parameter (packed two values per byte)", **where)
        *lead, last = annotation.shape
        if isinstance(last, int):
            if last % 2:
                raise AnnotationError(
                    f"'{name}': a {annotation.dtype!r} tensor packs two values per byte along its last dim, "
                    f"which must be even; got {last}", **where)
        elif any(not any(v.same_as(c) for c in dict.values(st.const_vars))
                 for v in tirx.analysis.undefined_vars(last)):
            raise AnnotationError(
                f"'{name}': the last dim of a {annotation.dtype!r} tensor (packed two values per byte) must "
                f"be an int or a T.const; got {last}", **where)
        storage = TensorAnnotation((*lead, last // 2), DType(PACKED_4BIT[str(annotation.dtype)]))
        buf = self._buffer_param(name, "tensor", storage)
        self.result.buffers[name].packed = annotation
        return PackedTensor(name, annotation.dtype, tuple(annotation.shape), buf)

    def _adopt_dynamic(self, dims: tuple) -> None:
        """Dims made by `T.dynamic` outside the body (a kernel factory's, for its `@T.prim_func` signature)
        become this kernel's dynamic dims, by name."""
        from tvm import tirx

        st = self.st
        for dim in dims:
            if not _is_expr(dim) or isinstance(dim, tirx.IntImm):
                continue
            # new Python handles: compared with same_as, not `is`
            for var in tirx.analysis.undefined_vars(dim):
                known = list(dict.values(st.const_vars)) + list(st.dynamic_vars.values())
                known += [p.var for p in self.result.scalars.values()]
                if any(var.same_as(v) for v in known):
                    continue
                if var.name in st.dynamic_vars or var.name in dict.keys(st.const_values):
                    raise st.error(f"two different dims are named '{var.name}'",
                                   hint="make each T.dynamic dim once and use that one")
                st.dynamic_vars[var.name] = var

    def _scalar_param(self, name: str, dtype: DType):
        from tvm import tirx
        from tvm.script.ir_builder import tirx as T

        var = T.arg(name, tirx.Var(name, str(dtype)))
        self.result.scalars[name] = ScalarParam(name, dtype, var, self.st.lineno)
        return var

    def make_tensor(self, pointer, shape, dtype):
        if not isinstance(pointer, _Placeholder) or not pointer.pointer:
            raise self.st.error(f"T.make_tensor takes a `T.ptr` parameter or an element of a pointer table; "
                                f"got {pointer!r}",
                                hint="annotate the parameter as `A: T.ptr` in the signature, or a table of "
                                     "addresses as `A_ptrs: T.Tensor([G], T.ptr)`")
        return self._buffer_param(pointer.name, "pointer", TensorAnnotation(shape, dtype))

    def empty(self, shape, dtype, name: str | None = None):
        from tvm.script.ir_builder import tirx as T

        self._adopt_dynamic(tuple(shape))
        index = len(self.pending_outputs)
        name = name or f"out{index}"
        handle = T.arg(name, T.handle())
        buf = T.match_buffer(handle, index_dims(shape)[0], str(dtype))
        st = self.st
        param = BufferParam(name, "output", TensorAnnotation(tuple(shape), dtype), buf, st.lineno, st.col,
                            st.end_col, st.filename)
        self.pending_outputs.append(param)
        return buf

    def global_scratch(self, shape, dtype):
        """T.alloc_global: a buffer parameter after the outputs, which the call
        allocates and does not return."""
        from tvm.script.ir_builder import tirx as T

        self._adopt_dynamic(tuple(shape))
        name = f"ws{len(self.scratch)}"
        buf = T.match_buffer(T.arg(name, T.handle()), index_dims(shape)[0], str(dtype))
        st = self.st
        self.scratch.append(
            BufferParam(
                name,
                "scratch",
                TensorAnnotation(tuple(shape), dtype),
                buf,
                st.lineno,
                st.col,
                st.end_col,
                st.filename,
            )
        )
        return buf

    def declared_output(self, name: str, annotation):
        """A signature tensor that out_idx names: allocated by the call and returned, as a T.empty output."""
        if not isinstance(annotation, TensorAnnotation) or annotation.strides is not None:
            raise AnnotationError(
                f"out_idx names '{name}', whose annotation {annotation!r} is not a contiguous "
                "T.Tensor; the call allocates outputs row-major",
                **self._where(),
            )
        if str(annotation.dtype) in PACKED_4BIT:
            raise AnnotationError(
                f"out_idx names '{name}', a {annotation.dtype!r} tensor: tile_nb reads packed 4-bit tensors, "
                "it does not write them", **self._where(),
                hint="return the values as an int8 tensor")
        from tvm.script.ir_builder import IRBuilder

        buf = self.empty(annotation.shape, annotation.dtype, name)
        self.declared_outputs.append(self.pending_outputs[-1])
        IRBuilder.name(name, buf)
        return buf

    # -- statements ------------------------------------------------------------------------------------------
    def bind(self, name: str, value):
        """Give IR buffers the user's variable name
        (`A_shared = T.alloc_shared(...)` prints as `A_shared`)."""
        from tvm.script.ir_builder import IRBuilder
        from tvm.tirx import Buffer

        if self.st.kernel_open and _is_expr(value) and _reads_memory(value):
            # `v = values[i]` holds the value read now, as in tilelang (a later store into values must not
            # change v): bound to a variable of the user's name where it is assigned
            return self.st.bind_here(name, value, dtype_of(value))
        if not isinstance(value, Buffer):
            return value
        output = next((p for p in self.pending_outputs + self.scratch if p.buffer.same_as(value)), None)
        if output is not None and output.name.startswith(("out", "ws")):  # made as out0, ... / ws0, ...
            output.name = name
            IRBuilder.name(name, value)
        elif value.name in ("buffer", ""):  # a fresh allocation
            IRBuilder.name(name, value)
            for tensor, _, address in self.st.pointer_tensors:  # its address, loaded from a table
                if tensor.same_as(value):
                    IRBuilder.name(f"{name}_address", address)
        return value

    def snapshot(self, *values) -> tuple:
        """The values of a tuple assignment to memory (`a[0], a[1] = a[1], a[0]`), each one that reads memory
        bound to a variable first, so that no store of the assignment changes what a later one writes."""
        if not self.st.kernel_open:
            return values
        return tuple(self.st.bind_here("v", v, dtype_of(v)) if _is_expr(v) and _reads_memory(v) else v
                     for v in values)

    def store(self, target, index, value):
        from tvm.tirx import Buffer

        if isinstance(target, Buffer):
            memory.store(target, index, value)
        else:
            target[index] = value

    @staticmethod
    def _is_var(value) -> bool:
        """A T.alloc_var (a one-element `local.var` buffer)."""
        return is_buffer(value) and value.scope() == "local.var" and len(value.shape) == 1

    def read_var(self, value):
        """A read of a name bound to a T.alloc_var is a read of its value
        (`x[0]`); other values pass through."""
        return value[0] if self._is_var(value) else value

    def assign_var(self, name: str, value, current):
        """`x = v` where `x` names a T.alloc_var: a store into it (the name keeps the variable); otherwise, as
        when `x = T.alloc_var(...)` itself runs, a plain binding."""
        if self._is_var(current) and not is_buffer(value):
            memory.store(current, (0,), value)
            return current
        return self.bind(name, value)

    def store_ref(self, ref, value):
        """`x = value` where `x: T.Ref` is a T.macro parameter: a store into
        the location the caller passed."""
        if is_load(ref):
            memory.store(ref.source, tuple(ref.indices), value)
        elif self._is_var(ref):
            memory.store(ref, (0,), value)
        else:
            raise self.st.error(
                f"a T.Ref parameter must be given a location, a buffer element `A[i]` or a "
                f"T.alloc_var; got {ref!r}",
                hint="pass A[i] rather than a value computed from it",
            )

    def loop(self, iterable, names):
        st = self.st
        if isinstance(iterable, loops.LoopSpec):
            if not st.kernel_open:
                raise st.error(
                    "kernel loops (T.Pipelined, T.Parallel, T.serial, T.unroll, range) must be inside "
                    "`with T.Kernel(...)`"
                )
            return self._ir_loop(iterable, names)
        return self._python_loop(iterable)

    @contextlib.contextmanager
    def _ir_loop(self, spec, names):
        self.st.loops.append("ir")
        parallel = spec.kind == "parallel"
        self.parallel_depth += parallel
        try:
            with spec.open(names) as loop_vars:
                yield [loop_vars]
        finally:
            self.st.loops.pop()
            self.parallel_depth -= parallel

    @contextlib.contextmanager
    def _python_loop(self, iterable):
        self.st.loops.append("python")
        try:
            yield iterable
        finally:
            self.st.loops.pop()

    def range(self, *args):
        if self.st.kernel_open:
            return loops.RangeLoop(*args)
        return builtins.range(*args)

    def condition(self, cond):
        return unwrap_comparison(cond)

    # -- boolean logic on IR values (frontend.rewrite turns `and`, `or`, `not`, `x if c else y` into these)
    def _ir_value(self, x) -> bool:
        from tvm import tirx

        return _is_expr(x) and not isinstance(x, tirx.IntImm)

    @staticmethod
    def _as_bool(x):
        from tvm import tirx

        if isinstance(x, bool):
            return tirx.const(x, "bool")
        if isinstance(x, int):
            return tirx.const(x != 0, "bool")
        return x if str(x.ty.dtype) == "bool" else x != 0

    def logic(self, op: str, first, second):
        """`a and b` / `a or b`: IR And/Or when an operand is an IR expression,
        else Python's own semantics."""
        from tvm import tirx

        a = unwrap_comparison(first())
        if isinstance(a, sync.WarpGroups):  # `tx >= 128 and tx < 256`: warp groups (language/sync.py)
            return a.both(second()) if op == "and" else a.either(second())
        if not self._ir_value(a):
            if (op == "and" and not a) or (op == "or" and a):
                return a
            return unwrap_comparison(second())
        b = unwrap_comparison(second())
        combine = tirx.And if op == "and" else tirx.Or
        return combine(self._as_bool(a), self._as_bool(b))

    def negate(self, value):
        from tvm import tirx

        value = unwrap_comparison(value)
        if isinstance(value, sync.WarpGroups):
            return value.others()
        return tirx.Not(self._as_bool(value)) if self._ir_value(value) else not value

    def choose(self, cond, then_value, else_value):
        """`a if c else b`: `T.if_then_else` when `c` is an IR expression (both sides are evaluated), else
        Python's conditional expression."""
        from ..language.compute import if_then_else

        cond = unwrap_comparison(cond)
        if not self._ir_value(cond):
            return then_value() if cond else else_value()
        consts = self._consts_in(cond) if self.st.symbolic else None
        if consts is not None:  # a choice between Python values that phase 2 makes with the consts' values
            raise _state.StopTemplate(f"this `... if ... else ...` needs the value of {', '.join(consts)}")
        return if_then_else(self._as_bool(cond), then_value(), else_value())

    def is_ir(self, cond, what: str = "if") -> bool:
        """Whether an `if` (or a `while`) on `cond` is a run-time one, built into the IR."""
        if isinstance(cond, sync.WarpGroups):
            if what != "if":
                raise self.st.error(f"`{what}` on the thread index of T.get_thread_binding(): only an `if` "
                                    "can choose warp groups", hint=sync.BLOCK_LEVEL)
            return True
        if not _is_expr(cond):
            return False
        from tvm import tirx

        if isinstance(cond, tirx.IntImm):
            return False  # a folded constant: plain Python truthiness
        st = self.st
        consts = self._consts_in(cond) if st.symbolic else None
        if consts is not None:  # only consts: Python must pick the branch, which needs their values
            raise _state.StopTemplate(f"this `{what}` needs the value of {', '.join(consts)}")
        if not st.kernel_open:
            raise st.error(
                f"`{what}` on a runtime value ({cond}) outside `with T.Kernel(...)`",
                hint=f"{'branch' if what == 'if' else 'loop'} on runtime values inside the kernel, or "
                "on compile-time values anywhere",
            )
        return True

    @contextlib.contextmanager
    def ir_while(self, cond):
        """`while cond:` on a run-time value: a TIR While, whose condition the kernel tests before every
        iteration. Block-level code only: inside a T.Parallel loop each element would loop on its own."""
        from tvm.script.ir_builder import tirx as T

        st = self.st
        if self.parallel_depth:
            raise st.error(
                "a `while` loop on a run-time value inside a T.Parallel loop is not supported",
                hint="loop at block level (outside T.Parallel), or use `for k in T.serial(n)` with an "
                "`if` inside",
            )
        st.loops.append("ir")
        try:
            with _state.frame(T.While(self._as_bool(cond))):
                yield (None,)  # the body is traced once
        finally:
            st.loops.pop()

    @contextlib.contextmanager
    def python_while(self):
        """A `while` on a Python value runs as Python's own loop while the kernel is built."""
        self.st.loops.append("python")
        try:
            yield
        finally:
            self.st.loops.pop()

    def check(self, cond, message, text: str) -> None:
        """`assert` in a kernel body: checked in Python once its values are known. The
        template (consts symbolic) notes it and goes on, so a guard such as
        `assert K % block_K == 0` does not end the template."""
        st = self.st
        cond = unwrap_comparison(cond)
        if _is_expr(cond):
            from tvm import sym, tirx

            if not isinstance(cond, tirx.IntImm):  # `assert N == N_` of one dynamic dim: true whatever N is
                simplified = sym.Analyzer().simplify(cond)
                cond = simplified if isinstance(simplified, tirx.IntImm) else cond
            if isinstance(cond, tirx.IntImm):
                cond = bool(int(cond))
            elif st.symbolic and self._consts_in(cond) is not None:
                self.result.assumptions.append((st.lineno, text))
                return
            else:
                raise st.error(
                    f"`assert {text}` depends on runtime values, which Python cannot check while the "
                    "kernel is built",
                    hint="guard the code with `if` or T.if_then_else instead",
                )
        if not cond:
            detail = f": {message}" if message is not None else ""
            raise st.error(f"kernel assertion failed: `{text}`{detail}")

    def _consts_in(self, expr) -> list[str] | None:
        """The const names of a phase-1 condition made of consts alone (with compile-time values),
        else None: a condition that also reads loop variables, block ids, dynamic dims or buffers
        is a runtime (IR) condition."""
        from tvm import tirx

        const_vars = self.st.const_vars
        names, runtime = set(), False
        for v in tirx.analysis.undefined_vars(expr):
            if v.name in dict.keys(const_vars) and v.same_as(const_vars[v.name]):
                names.add(v.name)
            else:
                runtime = True
        return sorted(names) if names and not runtime else None

    def rebound_under_if(self, names: tuple, lineno: int):
        """An `if` on a run-time value rebinds Python names bound before it: they name expressions, so the new
        binding would hold whatever the condition (the kernel would compute something else than it reads)."""
        listing = ", ".join(f"`{n}`" for n in names)
        example = names[0]
        raise DSLError(
            f"{listing} {'is' if len(names) == 1 else 'are'} assigned under an `if` on a run-time value, but "
            f"{'it names' if len(names) == 1 else 'they name'} an expression, not a variable of the "
            "kernel: the new "
            "value would be used whatever the condition",
            filename=self.st.filename,
            lineno=lineno,
            hint=f"write `{example} = T.if_then_else(cond, new_value, {example})`, or keep the value in a "
            f"variable of the kernel (`{example} = T.alloc_var(T.float32)`, then `{example}[0] = ...`)",
        )

    def carried_in_loop(self, names: tuple, lineno: int) -> None:
        """A kernel loop whose body reads Python names and then rebinds them (`acc = acc + x`): the body runs
        once while the kernel is built, so no value would carry from one iteration to the next."""
        if not self.st.loops or self.st.loops[-1] != "ir":
            return
        listing = ", ".join(f"`{n}`" for n in names)
        example = names[0]
        raise DSLError(
            f"{listing} {'is' if len(names) == 1 else 'are'} read and then reassigned in the kernel "
            "loop at line "
            f"{lineno}, as if {'its' if len(names) == 1 else 'their'} value carried from one "
            "iteration to the "
            "next; but the loop body runs once while the kernel is built, so it would hold one iteration's "
            "expression",
            filename=self.st.filename,
            lineno=lineno,
            hint=f"make it a variable of the kernel before the loop, `{example} = T.alloc_var(T.float32, "
                 "init=...)`; "
            f"then `{example} = {example} + ...` (or `{example} += ...`) in the loop updates it",
        )

    @contextlib.contextmanager
    def ir_if(self, cond):
        from tvm.script.ir_builder import tirx as T

        self.ir_ifs += 1
        cond = sync.warp_groups_of(cond)  # `if tx < 128:` chooses warp groups; `if tk == 0:` is per-thread
        self.ir_conds.append(cond)
        try:
            if isinstance(cond, sync.WarpGroups):  # `if tx < 128:` -> T.ws regions (ir_then / ir_else)
                yield None
            else:
                with _state.frame(T.If(cond)) as frame:
                    yield frame
        finally:
            self.ir_conds.pop()
            self.ir_ifs -= 1

    def ir_nesting(self) -> int:
        """How many kernel loops and run-time `if`s are open now."""
        return self.ir_ifs + self.st.loops.count("ir")

    def call_macro(self, macro, args, kwargs):
        return call_macro(self, macro, args, kwargs)

    def macro_return(self, value):
        """`return v` in a T.macro: Python returns at once, so under a kernel loop or a run-time `if` (opened
        in the macro) the rest of that loop or branch would silently vanish from the kernel."""
        if self.macro_frames and self.ir_nesting() > self.macro_frames[-1]:
            raise self.st.error(
                "`return` inside a kernel loop or a run-time `if` of a T.macro is not supported: "
                "the macro's code after it would be dropped",
                hint="assign the value to a variable and return it at the end of the macro",
            )
        return value

    def ir_then(self):
        from tvm.script.ir_builder import tirx as T

        if isinstance(self.ir_conds[-1], sync.WarpGroups):
            return sync.warp_groups_region(self.ir_conds[-1], "then")
        return _state.frame(T.Then())

    def ir_else(self):
        from tvm.script.ir_builder import tirx as T

        if isinstance(self.ir_conds[-1], sync.WarpGroups):
            return sync.warp_groups_region(self.ir_conds[-1], "else")
        return _state.frame(T.Else())

    def enter(self, manager, names):
        if isinstance(manager, loops.Kernel):
            manager.with_names(names)
        return manager

    def expr_stmt(self, value) -> None:
        """A call written as a statement. An extern call (`T.call_extern(...)`) is evaluated for its effect,
        as TVMScript evaluates it; any other value is dropped, as Python drops it."""
        if is_extern_call(value):
            from tvm import tirx
            from tvm.script.ir_builder import tirx as T

            T.add_to_parent(tirx.Evaluate(value, self.st.span()))

    def jump(self, kind: str) -> None:
        if self.st.loops and self.st.loops[-1] == "ir":
            raise self.st.error(f"`{kind}` inside a kernel loop is not supported",
                                hint="guard the loop body with `if` instead")

    def ret(self, value):
        from tvm.tirx import Buffer

        values = value if isinstance(value, tuple) else (value,)
        if value is None:
            values = ()
        order = []
        for v in values:
            match = next(
                (p for p in self.pending_outputs if isinstance(v, Buffer) and p.buffer.same_as(v)), None
            )
            if match is None:
                raise ReturnError(
                    f"a kernel can only return tensors made by T.empty; got {v!r}", **self._where()
                )
            order.append(match)
        if any(p in self.declared_outputs for p in order):
            raise ReturnError("a kernel returns its out_idx outputs by itself; return only T.empty tensors",
                              **self._where(), hint="drop the `return` of the out_idx parameter")
        missing = [p.name for p in self.pending_outputs if p not in order and p not in self.declared_outputs]
        if missing:
            raise ReturnError(f"T.empty output(s) {', '.join(missing)} are not returned", **self._where(),
                              hint="return every T.empty tensor, e.g. `return out`")
        self.result.outputs = [p.name for p in self.declared_outputs + order]
        self.returned = True
        return None


def elaborate(kernel, signature: KernelSignature, compile_values: dict[str, Any],
              const_values: dict[str, int] | None, hints: tuple[str, ...] = ()) -> Elaboration:
    """Run one phase. `const_values=None` is phase 1 (symbolic consts); a dict of ints is phase 2.
    `hints`: texts the caller accepted and did not apply, put first in the function's `tile_nb.hints`.

    `kernel` is the factory's product for this elaboration (the rewritten
    function bound to the current closure).
    """
    from tvm import ir, tirx
    from tvm.script.ir_builder import IRBuilder
    from tvm.script.ir_builder import tirx as T

    from .per_thread import elaborate_per_thread  # (these import TVM: not at import time)
    from .reducer_check import check_reducers

    start = time.perf_counter()
    symbolic = const_values is None
    st = _state.State(filename=kernel.source.filename, symbolic=symbolic, const_values={}, hints=list(hints))
    if symbolic:
        st.const_values = st.const_vars = _SymbolicConsts()
    else:
        st.const_values = dict(const_values)
    result = Elaboration(func=None, symbolic=symbolic)
    runtime_names = {p.name for p in signature.runtime}
    hooks = Hooks(st, result, runtime_names)
    st.on_empty = hooks.empty
    st.on_global = hooks.global_scratch
    st.on_make_tensor = hooks.make_tensor
    st.on_macro = hooks.call_macro

    fn = kernel.instantiate(hooks)

    with IRBuilder() as ib, _state.activated(st):
        prim = T.prim_func()
        prim.__enter__()
        values = {}  # every parameter by name: outputs named by out_idx sit between the others
        for p in signature.params:
            if p.kind == COMPILE_TIME:
                values[p.name] = compile_values[p.name]
            elif p.kind == SCALAR:  # `x: T.float32` in the signature
                values[p.name] = hooks._scalar_param(p.name, kernel.fn.__annotations__[p.name])
            else:
                values[p.name] = _Placeholder(p.name, pointer=p.kind == POINTER)
        try:
            # `A: T.Tensor((M, K), dt)` in the signature: as if annotated in the body
            for p in signature.params:
                if p.kind == TENSOR:
                    values[p.name] = _signature_tensor(hooks, kernel, p)
            for p in signature.outputs:  # out_idx: made like T.empty outputs, under their own names
                values[p.name] = _signature_tensor(hooks, kernel, p, output=True)
            fn(**values)
        except BaseException as err:  # noqa: BLE001 - phase 1 turns any failure into a recorded stop
            if not isinstance(err, Exception):
                # Ctrl-C, SystemExit: the user's request to stop, never a kernel error or a template stop
                raise
            if not symbolic:
                raise _as_user_error(err, st, kernel) from (err if not isinstance(err, TileNBError) else None)
            reason = err.reason if isinstance(err, _state.StopTemplate) else _short(err)
            result.stopped = Stop(st.lineno, reason)
            if not getattr(err, "_closed_inner", False):
                T.evaluate(0)
        else:
            unreturned = [p for p in hooks.pending_outputs if p not in hooks.declared_outputs]
            if unreturned and not hooks.returned:
                raise ReturnError(f"T.empty output(s) {', '.join(p.name for p in unreturned)} are "
                                  "never returned", filename=st.filename, lineno=unreturned[0].lineno,
                                  hint="end the kernel body with `return out`")
        T.func_name(signature.name)
        prim.__exit__(None, None, None)
    func = ib.get()

    outputs = {p.name: p for p in hooks.pending_outputs}
    result.buffers.update(outputs)
    if not result.outputs:
        result.outputs = list(outputs)
    _check_scratch_names(hooks, result)
    result.buffers.update({p.name: p for p in hooks.scratch})
    result.scratch = [p.name for p in hooks.scratch]
    by_name = {p.name: p for p in func.params}
    # T.empty params were created as out0, out1, ... before their names were known
    for p in hooks.pending_outputs:
        by_name.setdefault(p.name, by_name.get(f"out{hooks.pending_outputs.index(p)}"))
    for k, p in enumerate(hooks.scratch):  # and T.alloc_global's as ws0, ws1, ...
        by_name.setdefault(p.name, by_name.get(f"ws{k}"))
    order = [p.name for p in signature.runtime if p.name in result.buffers or p.name in result.scalars]
    order += result.outputs + result.scratch
    params = [by_name[name] for name in order if by_name.get(name) is not None]
    if st.reducers and result.stopped is None:  # the order of each T.alloc_reducer's uses
        check_reducers(func.body, st.reducers, st.filename, st.tile_op_lines)
    # statements that use the thread index as a value, as T.Parallel loops over the threads
    body, st.tile_op_lines = elaborate_per_thread(func.body, st.filename, st.tile_op_lines, st.hints)
    attrs = {
        "global_symbol": signature.name,
        "tile_nb.threads": st.threads or 0,
        "tile_nb.outputs": list(result.outputs),
        "tile_nb.tile_op_lines": list(st.tile_op_lines),
        "tile_nb.alloc_lines": [[buf.name, line] for buf, line in st.allocations],
    }
    if result.scratch:  # T.alloc_global parameters (absent when none, so other kernels' IR is unchanged)
        attrs["tile_nb.scratch"] = list(result.scratch)
    if st.views:  # T.Tensor(shape, dtype, A.data): [view name, tensor parameter name] (absent when none)
        attrs["tile_nb.views"] = [[view.name, next((p.name for p in params if p.same_as(base)), base.name)]
                                  for view, base in st.views]
    if st.pointer_tensors:  # T.make_tensor(table[i], ...): [tensor name, table name] (absent when none)
        attrs["tile_nb.pointer_tensors"] = [[t.name, table.name] for t, table, _ in st.pointer_tensors]
    if st.global_layouts:  # T.Layout on a kernel parameter (language/layouts.py); absent when none
        attrs.update(_global_layouts(st, params))
    # accepted, not applied (T.use_swizzle, gemm policy, a shared tile's swizzle); absent when none
    if st.hints:
        attrs["tile_nb.hints"] = list(st.hints)
    if st.extern_sources:  # T.import_source's CUDA code, pasted ahead of the kernels (absent when none)
        attrs[EXTERN_SOURCES_ATTR] = list(st.extern_sources)
    # The function's span names the user's file (line data for lowering errors; not printed, not keyed).
    span = ir.Span(ir.SourceName(st.filename), kernel.source.first_line, kernel.source.first_line, 0, 0)
    result.func = tirx.PrimFunc(params, body, func.ret_type, func.attrs, span=span).with_attrs(attrs)
    result.consts = list(st.consts_used)
    if symbolic:
        result.const_vars = {n: st.const_vars[n] for n in result.consts}
    result.dynamic = dict(st.dynamic_vars)
    result.threads = st.threads
    result.seconds = time.perf_counter() - start
    return result


def _global_layouts(st, params) -> dict:
    """The attributes of the hand layouts of global buffers: each must be a kernel parameter (the call's
    tensor is what gets permuted) with no `T.Tensor(shape, dtype, A.data)` view (which would see its memory
    unpermuted)."""
    layouts, lines = {}, []
    for name, (buf, imap, line) in st.global_layouts.items():
        where = dict(filename=st.filename, lineno=line or None)
        if not any(p.same_as(buf) for p in params):
            raise DSLError(f"T.annotate_layout of '{name}' with T.Layout: only a kernel parameter (a tensor "
                           f"the call passes) can have a hand layout; '{name}' is not one", **where,
                           hint="annotate the parameter itself")
        viewed = [view.name for view, base in st.views if base.same_as(buf)]
        if viewed:
            raise DSLError(f"T.annotate_layout of '{name}' with T.Layout: the view '{viewed[0]}' shares its "
                           "memory, and would read it in the hand layout's order, not the tensor's", **where,
                           hint="annotate a parameter without T.Tensor(..., data) views")
        layouts[name] = imap
        lines.append([name, line])
    return {"tile_nb.global_layouts": layouts, "tile_nb.layout_lines": lines}


def _check_scratch_names(hooks: Hooks, result: Elaboration) -> None:
    """A T.alloc_global bound to the name of a parameter or output would make two parameters of one name."""
    taken = set(result.buffers) | set(result.scalars)
    for p in hooks.scratch:
        if p.name in taken:
            raise DSLError(
                f"T.alloc_global is bound to '{p.name}', which already names a parameter or output of "
                "the kernel",
                filename=p.filename,
                lineno=p.lineno,
                col=p.col,
                end_col=p.end_col,
                hint="give the scratch tensor a name of its own",
            )
        taken.add(p.name)


def _signature_tensor(hooks: Hooks, kernel, param, output: bool = False):
    """The buffer of a parameter annotated in the signature with T.Tensor / T.StridedTensor (either spelling).
    The annotation's value is the one `def` evaluated; a string (`from __future__ import annotations`) is
    evaluated here, in the kernel's globals and closure."""
    source = kernel.source
    args = source.tree.args
    node = next(a for a in args.posonlyargs + args.args + args.kwonlyargs if a.arg == param.name)
    at = node.annotation if node.annotation is not None else node
    end = at.end_col_offset + source.indent if getattr(at, "end_lineno", None) == at.lineno else None
    hooks.at(source.first_line + at.lineno - 1, at.col_offset + source.indent, end)
    annotation = param.annotation
    if isinstance(annotation, str):
        fn = kernel.fn
        cells = dict(
            zip(fn.__code__.co_freevars, (c.cell_contents for c in fn.__closure__ or ()), strict=True)
        )
        try:
            annotation = eval(annotation, fn.__globals__, cells)  # noqa: S307 - the user's own annotation text
        except Exception as err:  # noqa: BLE001 - any failure is the annotation's; said with its text
            raise AnnotationError(
                f"the signature annotation of '{param.name}', {param.annotation!r}, is a string "
                "(`from __future__ "
                f"import annotations`) that tile_nb could not evaluate: {type(err).__name__}: {err}",
                **hooks._where(),
                hint=f"annotate it in the body instead, `{param.name}: {param.annotation}` after "
                     "the lines that "
                "define its dims (in-body annotations can use T.const dims)",
            ) from None
    if output:
        return hooks.declared_output(param.name, annotation)
    return hooks.annotate(param.name, annotation, _Placeholder(param.name, pointer=False))


class _SymbolicConsts(dict):
    """Phase 1: every const name asked for becomes a fresh int32 Var."""

    def __contains__(self, name) -> bool:
        return True

    def __missing__(self, name):
        from tvm import tirx

        var = self[name] = tirx.Var(name, "int32")
        return var


def _short(err: BaseException) -> str:
    text = err.message if isinstance(err, TileNBError) else str(err)
    first = text.strip().splitlines()[0] if text.strip() else ""
    return f"{type(err).__name__}: {first}" if first else type(err).__name__


def _as_user_error(err: BaseException, st: _state.State, kernel) -> BaseException:
    """Errors from deep inside TVM or the body become a DSLError pointing at the user's statement."""
    if isinstance(err, TileNBError):
        if err.lineno is None:
            err.filename, err.lineno, err.col, err.end_col = (
                st.filename,
                st.lineno or None,
                st.col,
                st.end_col,
            )
            # `T.alloc_fragmnet`: underline that, not the statement
            if isinstance(err, AttributeError) and err.name:
                err.col, err.end_col = _attribute_span(st, err.name) or (err.col, err.end_col)
        return err
    lineno = _user_line(err, kernel.source.filename) or st.lineno or None
    return DSLError(f"{type(err).__name__} while elaborating kernel '{kernel.name}': {str(err).strip()}",
                    filename=st.filename, lineno=lineno, col=st.col if lineno == st.lineno else None,
                    end_col=st.end_col if lineno == st.lineno else None)


def _attribute_span(st: _state.State, name: str) -> tuple[int, int] | None:
    """Columns of the first `<dotted name>.<name>` in the current statement's line, or None."""
    line = linecache.getline(st.filename, st.lineno) if st.lineno else ""
    start = st.col or 0
    stop = st.end_col if st.end_col is not None else len(line)
    match = re.compile(rf"[A-Za-z_][\w.]*\.\s*{re.escape(name)}\b").search(line, start, stop)
    return match.span() if match else None


def _user_line(err: BaseException, filename: str) -> int | None:
    tb, line = err.__traceback__, None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == filename:
            line = tb.tb_lineno
        tb = tb.tb_next
    return line

