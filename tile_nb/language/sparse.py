"""`T.gemm_sp`: a GEMM whose A is 2:4 structured-sparse, given as its kept values and their metadata.

A dense row of A keeps 2 of every 4 consecutive values (16- and 8-bit dtypes; 1 of every 2 for float32). The
kernel holds `A_sparse`, the kept values in order (K / 2 columns), and `E`, the metadata: 4 bits per group,
little-endian within each integer of E (an int16 describes 4 groups), bits 1:0 giving the position of the
first kept value in its group and bits 3:2 the second's. For float32 the group's 4 bits are those of a 16-bit
group of 4 halves: 0b0100 keeps the first value of the pair, 0b1110 the second. This is the "ordered
metadata" of tilelang's 2:4 examples and of `torch._semi_structured_conversions`.

`T.gemm_sp(A_sparse, E, B, C)` is `C += dense(A_sparse, E) @ B`. tile_nb builds it as an elementwise loop that
expands the tile into a dense shared tile (zeros where values were dropped), then `T.gemm`: the same sums as
the sparse tensor-core instruction, at the dense instruction's speed (the plan shows the hint).
"""
from __future__ import annotations

from . import state as _state
from .dtypes import as_dtype
from .irutil import is_buffer, is_region

__all__ = ["gemm_sp", "GROUPS", "BITS_PER_GROUP"]

# the values A may hold -> (values kept, group size): 2 of every 4, 1 of every 2 for float32
GROUPS = {name: (2, 4) for name in ("float16", "bfloat16", "int8", "uint8", "float8_e4m3fn", "float8_e5m2")}
GROUPS["float32"] = (1, 2)
BITS_PER_GROUP = 4  # metadata bits per group
_META_DTYPES = ("int8", "int16", "int32", "uint8", "uint16", "uint32")


def gemm_sp(A_sparse, E, B, C, transpose_A: bool = False, transpose_E: bool = False,
            transpose_B: bool = False, policy=None, clear_accum: bool = False, k_pack: int = 1,
            wg_wait: int = 0, annotations=None):
    """`T.gemm_sp(A_sparse, E, B, C)`: `C += A @ B` with A 2:4 sparse, given by its kept values `A_sparse`
    ([M, K / 2], or [K / 2, M] with `transpose_A`) and metadata `E` ([M, K / e], or [K / e, M] with
    `transpose_E`; e values per metadata integer, tilelang's `get_e_factor`). `k_pack`, `wg_wait` and
    `annotations` are tilelang's scheduling controls: only their defaults are accepted."""
    from tvm import tirx

    from .compute import gemm
    from .hints import record_hint
    from .loops import Parallel
    from .memory import alloc_shared, region_of, store

    st = _state.active("T.gemm_sp")
    for name, value, default in (("k_pack", k_pack, 1), ("wg_wait", wg_wait, 0), ("annotations", annotations,
                                                                                  None)):
        if value != default and not (name == "annotations" and not value):
            raise st.error(f"T.gemm_sp({name}=...) is tilelang's scheduling control, not supported here; got "
                           f"{name}={value!r}", hint=f"drop {name}=: tile_nb schedules the GEMM itself")
    for name, x in (("A_sparse", A_sparse), ("E", E)):
        if not (is_buffer(x) or is_region(x)) or \
                str(region_of(x, what="T.gemm_sp").source.scope()) == "global":
            raise st.error(f"T.gemm_sp: {name} must be a shared or fragment tile; got {x!r}",
                           hint="copy it into a tile with T.copy first")
    a, e = region_of(A_sparse, what="T.gemm_sp"), region_of(E, what="T.gemm_sp")
    a_shape, e_shape = _matrix(st, "A_sparse", a), _matrix(st, "E", e)
    dtype = str(a.source.dtype)
    if dtype not in GROUPS:
        raise st.error(f"T.gemm_sp: A_sparse holds {dtype}; 2:4 sparse values are float16, bfloat16, "
                       "float32, int8, uint8 or float8")
    meta = str(e.source.dtype)
    if meta not in _META_DTYPES:
        raise st.error(f"T.gemm_sp: E holds {meta}; the metadata is an integer tile (int16 in tilelang's "
                       "examples)")
    kept, group = GROUPS[dtype]
    m, half_k = (a_shape[1], a_shape[0]) if transpose_A else a_shape
    k = half_k * group // kept
    groups_per_meta = as_dtype(meta).bits // BITS_PER_GROUP
    e_rows, e_cols = (e_shape[1], e_shape[0]) if transpose_E else e_shape
    per_meta = groups_per_meta * group  # dense columns described by one metadata integer
    if e_rows != m or e_cols * per_meta != k:
        raise st.error(f"T.gemm_sp: E of shape {list(e_shape)} does not describe A_sparse {list(a_shape)}: "
                       f"expected [{m}, {k // per_meta}] ({per_meta} columns of dense A per {meta})"
                       + (" transposed" if transpose_E else ""))
    record_hint(st, f"gemm_sp (2:4 sparse A, {m} x {k}): expanded to a dense shared tile, then T.gemm "
                    "(the dense tensor-core instruction, not the sparse one)")
    dense = alloc_shared((k, m) if transpose_A else (m, k), dtype)

    def kept_value(row, col):  # A_sparse[row, col] in the logical (untransposed) orientation
        index = [r.min for r in a.region]
        rows, cols = (index[-1], index[-2]) if transpose_A else (index[-2], index[-1])
        at = (cols + col, rows + row) if transpose_A else (rows + row, cols + col)
        return a.source[(*index[:-2], *at)]

    def metadata(row, col):
        index = [r.min for r in e.region]
        at = (index[-2] + col, index[-1] + row) if transpose_E else (index[-2] + row, index[-1] + col)
        return tirx.Cast("int32", e.source[(*index[:-2], *at)])

    zero = tirx.const(0, dtype)
    with Parallel(m, k).open(None) as (i, kk):
        g = kk // group
        chunk = tirx.bitwise_and(
            tirx.shift_right(metadata(i, g // groups_per_meta), (g % groups_per_meta) * BITS_PER_GROUP), 15)
        first, second = tirx.bitwise_and(chunk, 3), tirx.bitwise_and(tirx.shift_right(chunk, 2), 3)
        if kept == 1:  # float32: a group of two 16-bit halves per value
            value = tirx.if_then_else(tirx.EQ(tirx.shift_right(first, 1), kk % group), kept_value(i, g), zero)
        else:
            value = tirx.if_then_else(tirx.EQ(first, kk % group), kept_value(i, 2 * g), zero) + \
                tirx.if_then_else(tirx.EQ(second, kk % group), kept_value(i, 2 * g + 1), zero)
        store(dense, (kk, i) if transpose_A else (i, kk), value)
    gemm(dense, B, C, transpose_A=transpose_A, transpose_B=transpose_B, clear_accum=clear_accum,
         policy=policy)


def _matrix(st, name: str, region) -> tuple[int, int]:
    """The 2-d shape of a tile operand (leading unit dims dropped), as ints."""
    dims = [r.extent for r in region.region]
    while len(dims) > 2 and getattr(dims[0], "value", dims[0]) == 1:
        dims = dims[1:]
    try:
        shape = tuple(int(d) for d in dims)
    except TypeError:
        raise st.error(f"T.gemm_sp: the shape of {name} must be known when the kernel is built; got "
                       f"{dims}") from None
    if len(shape) != 2:
        raise st.error(f"T.gemm_sp: {name} must be a 2-d tile; got shape {list(shape)}")
    return shape
