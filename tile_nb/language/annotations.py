"""Parameter annotations and shape symbols: `T.Tensor`, `T.StridedTensor`, `T.ptr`, `T.const`, `T.dynamic`.

Annotations are written in the kernel body (`A: T.Tensor[[M, K], T.float16]`); the front end turns each into a
runtime buffer parameter. `T.const('M, N')` returns the compile-time dims of the running phase (tvm Vars in
the template, ints once specialized); `T.dynamic('N')` returns a runtime symbolic dim.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import AnnotationError
from . import state as _state
from .dtypes import DType, as_tensor_dtype
from .irutil import is_expr
from .memory import LOCAL_THREAD

__all__ = ["Tensor", "StridedTensor", "ptr", "const", "dynamic", "TensorAnnotation", "BufferAnnotation",
           "SharedBuffer", "FragmentBuffer", "LocalBuffer"]


@dataclass(frozen=True)
class TensorAnnotation:
    """What `T.Tensor[[dims], dtype]` or `T.StridedTensor[[dims], [strides], dtype]` evaluates to."""

    shape: tuple
    dtype: DType
    strides: tuple | None = None
    # `T.Tensor([n], T.ptr)`: a table of device addresses (int64 data), each made a tensor in the kernel by
    # `T.make_tensor(table[i], shape, dtype)` (language/memory.py)
    pointers: bool = False

    def __repr__(self) -> str:
        dims = ", ".join(str(d) for d in self.shape)
        if self.pointers:
            return f"T.Tensor[[{dims}], T.ptr]"
        if self.strides is None:
            return f"T.Tensor[[{dims}], {self.dtype!r}]"
        strides = ", ".join(str(s) for s in self.strides)
        return f"T.StridedTensor[[{dims}], [{strides}], {self.dtype!r}]"


def _dims(value, what: str) -> tuple:
    if not isinstance(value, (list, tuple)):
        value = (value,)
    for dim in value:
        if isinstance(dim, bool) or not (isinstance(dim, int) or is_expr(dim)):
            raise AnnotationError(
                f"{what} entries must be ints, T.const or T.dynamic dims (or expressions of "
                f"them); got {dim!r}"
            )
    return tuple(value)


def _dtype(value) -> DType:
    try:
        return as_tensor_dtype(value)  # T.int4 / T.uint4: packed two per byte (language/packed.py)
    except ValueError as err:
        raise AnnotationError(f"tensor annotation dtype: {err}") from None


def _tensor(shape, dtype) -> TensorAnnotation:
    shape = _dims(shape, "T.Tensor shape")
    if isinstance(dtype, _PtrType):  # a pointer table: the call passes `tensor.data_ptr()`s as int64
        return TensorAnnotation(shape, as_tensor_dtype("int64"), pointers=True)
    return TensorAnnotation(shape, _dtype(dtype))


class _TensorType:
    """`T.Tensor[[M, K], T.float16]`, or tilelang's call form `T.Tensor((M, K), T.float16)`: a contiguous
    row-major tensor. Both spellings give the same annotation."""

    def __getitem__(self, item) -> TensorAnnotation:
        if not isinstance(item, tuple) or len(item) != 2:
            raise AnnotationError(
                f"T.Tensor takes [shape, dtype], as in T.Tensor[[M, K], T.float16]; got {item!r}"
            )
        return _tensor(item[0], item[1])

    def __call__(self, shape, dtype="float32", data=None, strides=None, scope=None) -> TensorAnnotation:
        """tilelang's `T.Tensor(shape, dtype="float32")`; `strides=` makes it strided, as T.StridedTensor."""
        if data is not None:
            from .memory import tensor_view

            return tensor_view(shape, dtype, data, strides, scope)
        if scope not in (None, "global"):
            raise AnnotationError(f"T.Tensor(..., scope={scope!r}): kernel parameters are global tensors")
        if strides is not None:
            return StridedTensor(shape, strides, dtype)
        return _tensor(shape, dtype)

    def __repr__(self) -> str:
        return "T.Tensor"


class _StridedTensorType:
    """`T.StridedTensor[[M, K], [sM, 1], T.float16]`: a tensor with explicit (maybe symbolic) strides."""

    def __getitem__(self, item) -> TensorAnnotation:
        if not isinstance(item, tuple) or len(item) != 3:
            raise AnnotationError("T.StridedTensor takes [shape, strides, dtype], as in "
                                  f"T.StridedTensor[[M, K], [sM, 1], T.float16]; got {item!r}")
        return self(item[0], item[1], item[2])

    def __call__(self, shape, strides, dtype="float32", scope=None) -> TensorAnnotation:
        """tilelang's call form `T.StridedTensor((M, K), (sM, 1), T.float16)`."""
        if scope not in (None, "global"):
            raise AnnotationError(
                f"T.StridedTensor(..., scope={scope!r}): kernel parameters are global tensors"
            )
        if isinstance(dtype, _PtrType):
            raise AnnotationError("a table of pointers is a contiguous T.Tensor(shape, T.ptr), not a "
                                  "T.StridedTensor")
        shape = _dims(shape, "T.StridedTensor shape")
        strides = _dims(strides, "T.StridedTensor strides")
        if len(shape) != len(strides):
            raise AnnotationError(f"T.StridedTensor has {len(shape)} dims but {len(strides)} strides")
        return TensorAnnotation(shape, _dtype(dtype), strides)

    def __repr__(self) -> str:
        return "T.StridedTensor"


class _PtrType:
    """`A: T.ptr` in the signature: a raw device pointer (`tensor.data_ptr()`), bound with `T.make_tensor`.
    `T.ptr()` is the same marker (tilelang writes it where a pointer argument goes
    in a list of configurations)."""

    def __call__(self, dtype=None):
        return self

    def __repr__(self) -> str:
        return "T.ptr"


@dataclass(frozen=True)
class BufferAnnotation:
    """What tilelang's `T.SharedBuffer(shape, dtype)`, `T.FragmentBuffer` and `T.LocalBuffer` evaluate to: the
    annotation of a T.macro parameter that takes a tile of that memory; a call is checked against it
    (frontend/macros.py)."""

    kind: str  # "SharedBuffer", "FragmentBuffer" or "LocalBuffer"
    shape: tuple
    dtype: DType
    scopes: tuple  # the allocation scopes that are this memory

    def __repr__(self) -> str:
        return f"T.{self.kind}({list(self.shape)}, {self.dtype!r})"


class _BufferType:
    """`T.SharedBuffer((M, K), T.float16)` or `T.SharedBuffer[(M, K), T.float16]`."""

    def __init__(self, kind: str, scopes: tuple):
        self.kind, self.scopes = kind, scopes

    def __call__(self, shape, dtype="float32", **ignored) -> BufferAnnotation:
        """(tilelang's other keywords, data= / strides= / scope=, describe a buffer being made; an annotation
        takes the shape and dtype)"""
        try:
            dt = as_tensor_dtype(dtype)
        except ValueError as err:
            raise AnnotationError(f"T.{self.kind} dtype: {err}") from None
        return BufferAnnotation(self.kind, _dims(shape, f"T.{self.kind} shape"), dt, self.scopes)

    def __getitem__(self, item) -> BufferAnnotation:
        if not isinstance(item, tuple) or len(item) != 2:
            raise AnnotationError(f"T.{self.kind} takes [shape, dtype]; got {item!r}")
        return self(*item)

    def __repr__(self) -> str:
        return f"T.{self.kind}"


Tensor = _TensorType()
StridedTensor = _StridedTensorType()
ptr = _PtrType()
SharedBuffer = _BufferType("SharedBuffer", ("shared", "shared.dyn"))
FragmentBuffer = _BufferType("FragmentBuffer", ("local.fragment",))
LocalBuffer = _BufferType("LocalBuffer", ("local", "local.var", LOCAL_THREAD))


def _names(spec: str) -> list[str]:
    names = [n.strip() for n in spec.replace(",", " ").split()]
    bad = [n for n in names if not n.isidentifier()]
    if not names or bad:
        raise AnnotationError(
            f"expected identifiers separated by commas, as in T.const('M, N, K'); got {spec!r}"
        )
    return names


def const(spec: str) -> Any:
    """`M, N, K = T.const('M, N, K')`: compile-time dims, read from the call's
    tensors (or `M=...` keywords)."""
    st = _state.active("T.const")
    values = []
    for name in _names(spec):
        if name not in st.const_values:
            raise st.error(f"T.const('{name}') has no value in this elaboration")
        if name not in st.consts_used:
            st.consts_used.append(name)
        values.append(st.const_values[name])
    return values[0] if len(values) == 1 else tuple(values)


def dynamic(spec: str, dtype: str = "int32") -> Any:
    """`N = T.dynamic('N')`: a runtime dim; one compiled kernel serves every value. Outside a kernel body (in
    a kernel factory, for the signature of its `@T.prim_func`) it makes the dim, and the kernel that annotates
    a tensor with it adopts it by name."""
    from tvm import tirx

    names = _names(spec)
    st = _state.current()
    if st is None:
        values = [tirx.Var(name, dtype) for name in names]
    else:
        values = []
        for name in names:
            var = st.dynamic_vars.get(name)
            if var is None:
                var = st.dynamic_vars[name] = tirx.Var(name, dtype)
            values.append(var)
    return values[0] if len(values) == 1 else tuple(values)
