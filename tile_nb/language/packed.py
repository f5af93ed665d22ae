"""4-bit integer tensors (`T.int4`, `T.uint4`): two values per byte in global memory, one per byte in tiles.

A kernel parameter annotated `A: T.Tensor((M, K), T.int4)` is called with the packed bytes: a torch int8 (or
uint8) tensor of shape (M, K // 2) whose byte j holds logical columns 2j (low nibble) and 2j + 1 (high
nibble), as tilelang and most int4 kernels pack them. The IR's parameter is that int8 buffer; the body sees a
`PackedTensor` with the logical shape. A `T.int4` / `T.uint4` tile (`T.alloc_shared` / `T.alloc_fragment`) is
an int8 / uint8 buffer holding one sign- or zero-extended value per byte, so `T.gemm` on two of them is the
8-bit integer GEMM the lowering already has (exact: 4-bit products summed in int32). `T.copy` from a packed
tensor into a tile unpacks (an elementwise loop; rows and columns past the tensor's edge read 0), and
`A[i, j]` reads one value as an int8 / uint8 expression. Writing a packed tensor is not supported.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tvm import tirx
from tvm.runtime import ObjectConvertible

from . import state as _state
from .dtypes import PACKED_4BIT as PACKED
from .irutil import align_extents, as_expr

__all__ = ["PackedTensor", "PackedRef", "unpack_copy"]


@dataclass(frozen=True)
class PackedTensor:
    """What the body sees of a `T.int4` / `T.uint4` tensor parameter: its logical shape over the packed
    bytes (`buffer`, shape (..., K // 2))."""

    name: str
    dtype: Any  # T.int4 or T.uint4
    shape: tuple  # logical: the last dim counts values, two per byte
    buffer: Any  # the int8 / uint8 parameter buffer

    def __getitem__(self, indices) -> PackedRef:
        if not isinstance(indices, tuple):
            indices = (indices,)
        if len(indices) != len(self.shape):
            raise _state.active("a T.int4 tensor").error(
                f"'{self.name}' has {len(self.shape)} dims but is indexed with {len(indices)}")
        return PackedRef(self, indices)

    def __repr__(self) -> str:
        return f"<{self.dtype!r} tensor '{self.name}' {list(self.shape)}, packed two per byte>"


@dataclass(frozen=True, eq=False)
class PackedRef(ObjectConvertible):
    """`A[i, j]` or `A[a:b, c:d]` of a packed tensor: a start corner or region for `T.copy`, or (all
    indices scalar) one value, unpacked when used in an expression."""

    tensor: PackedTensor
    indices: tuple

    def value(self):
        """The element as an int8 / uint8 expression."""
        st = _state.active("a T.int4 element read")
        if any(isinstance(i, slice) for i in self.indices):
            raise st.error(f"a slice of the {self.tensor.dtype!r} tensor '{self.tensor.name}' is a region: "
                           "copy it into a tile with T.copy")
        *lead, col = self.indices
        return _unpack(self.tensor, self.tensor.buffer[(*lead, col // 2)], col % 2)

    def asobject(self):  # ObjectConvertible: what TVM's functions (T.max, T.Cast, ...) receive
        return self.value()


def _on_value(name: str):
    return lambda self, *other: getattr(self.value(), name)(*other)


# arithmetic and comparisons on an element read (`A[i, j] * 2`) act on its value
for _op in ("add", "sub", "mul", "floordiv", "truediv", "mod", "and", "or", "xor", "lshift", "rshift"):
    setattr(PackedRef, f"__{_op}__", _on_value(f"__{_op}__"))
    setattr(PackedRef, f"__r{_op}__", _on_value(f"__r{_op}__"))
for _op in ("lt", "le", "gt", "ge", "neg"):
    setattr(PackedRef, f"__{_op}__", _on_value(f"__{_op}__"))


def _unpack(tensor: PackedTensor, byte, half):
    """The 4-bit value in nibble `half` (0: low, 1: high) of `byte`, as the tile's 8-bit dtype: the nibble,
    minus 16 when its top bit is set for int4 (sign extension without a shift of a negative number)."""
    nibble = tirx.bitwise_and(tirx.shift_right(tirx.Cast("int32", byte), half * 4), 15)
    if str(tensor.dtype) == "int4":
        nibble = nibble - tirx.bitwise_and(nibble, 8) * 2
    return tirx.Cast(PACKED[str(tensor.dtype)], nibble)


def _region(st, ref: PackedRef, extents) -> list[tuple[Any, Any]]:
    """(start, extent) of each dim of a packed region given as slices or as a corner with the tile's
    extents."""
    if all(isinstance(i, slice) for i in ref.indices):
        bounds = []
        for s, dim in zip(ref.indices, ref.tensor.shape, strict=True):
            if s.step not in (None, 1):
                raise st.error(f"T.copy: a slice of '{ref.tensor.name}' with a step is not supported")
            start = 0 if s.start is None else s.start
            stop = dim if s.stop is None else s.stop
            bounds.append((start, stop - start))
        return bounds
    if any(isinstance(i, slice) for i in ref.indices):
        raise st.error(f"T.copy: index '{ref.tensor.name}' with all slices or all start indices")
    aligned = align_extents(extents, len(ref.indices))
    if aligned is None:
        raise st.error(f"T.copy: a tile of {len(extents)} dims cannot start at a {len(ref.indices)}-d corner "
                       f"of '{ref.tensor.name}'")
    return list(zip(ref.indices, aligned, strict=True))


def _same(a, b) -> bool:
    from tvm import sym

    return bool(sym.Analyzer().can_prove_equal(tirx.const(a, "int32") if isinstance(a, int) else a,
                                                 tirx.const(b, "int32") if isinstance(b, int) else b))


def unpack_copy(src: PackedRef | PackedTensor, dst_region) -> None:
    """`T.copy(A[r, c], A_tile)` from a packed tensor: an elementwise loop writing each value into the tile (0
    past the tensor's edge, as every T.copy from global memory)."""
    from tvm.script.ir_builder import tirx as T

    from .loops import Parallel

    st = _state.active("T.copy")
    if isinstance(src, PackedTensor):
        src = src[tuple(slice(None) for _ in src.shape)]
    tile = dst_region.source
    if str(tile.scope()) == "global":
        raise st.error(f"T.copy from the {src.tensor.dtype!r} tensor '{src.tensor.name}' goes into a shared "
                       f"or fragment tile; '{tile.name}' is global",
                       hint="allocate the tile with T.alloc_shared(shape, T.int4)")
    tile_extents = [r.extent for r in dst_region.region]
    bounds = _region(st, src, tile_extents)
    kept = [k for k, (_, n) in enumerate(bounds) if not _same(n, 1)] or [len(bounds) - 1]
    tile_dims = [k for k, e in enumerate(tile_extents) if not _same(e, 1)] or [len(tile_extents) - 1]
    loop_extents = [bounds[k][1] for k in kept]
    if len(kept) != len(tile_dims) or not all(
            _same(a, tile_extents[k]) for a, k in zip(loop_extents, tile_dims, strict=False)):
        raise st.error(f"T.copy: the source region of '{src.tensor.name}' {[n for _, n in bounds]} and the "
                       f"destination region of '{tile.name}' {tile_extents} have different shapes")
    with Parallel(*loop_extents).open(None) as loop_vars:
        loop_vars = loop_vars if isinstance(loop_vars, tuple) else (loop_vars,)
        coords = [start for start, _ in bounds]
        for k, var in zip(kept, loop_vars, strict=True):
            coords[k] = bounds[k][0] + var
        inside = None
        for coord, dim in zip(coords, src.tensor.shape, strict=True):
            test = coord < dim
            inside = test if inside is None else tirx.And(inside, test)
        value = PackedRef(src.tensor, tuple(coords)).value()
        value = tirx.if_then_else(inside, value, tirx.const(0, PACKED[str(src.tensor.dtype)]))
        tile_index = [r.min for r in dst_region.region]
        for k, var in zip(tile_dims, loop_vars, strict=True):
            tile_index[k] = tile_index[k] + var
        T.add_to_parent(tirx.BufferStore(tile, as_expr(value, str(tile.dtype)), tile_index, st.span()))
