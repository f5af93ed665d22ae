"""`tilelang.cuda.intrinsics.sparse_layout` on tile_nb: the 2:4 sparsity contract between a compressor and
`T.gemm_sp` (language/sparse.py). A row of a 2:4 sparse matrix keeps `elem` of each `group` consecutive
values; its metadata gives, in 4 bits per group (little-endian within each metadata integer), the positions
of the kept values: bits 1:0 the first's, bits 3:2 the second's."""
from __future__ import annotations

from ...language.dtypes import as_dtype

__all__ = ["GROUP_CONFIG", "get_e_factor", "get_e_replicate_factor"]

BITS_PER_GROUP = 4

# the dtype of the values -> (values kept, group size)
GROUP_CONFIG = {as_dtype(name): (2, 4) for name in
                ("float16", "bfloat16", "int8", "uint8", "float8_e4m3fn", "float8_e5m2")}
GROUP_CONFIG[as_dtype("float32")] = (1, 2)


def get_e_factor(a_dtype, meta_dtype) -> int:
    """How many values of `a_dtype` (dense columns) one metadata integer of `meta_dtype` describes."""
    _, group = GROUP_CONFIG[as_dtype(a_dtype)]
    return as_dtype(meta_dtype).bits // BITS_PER_GROUP * group


def get_e_replicate_factor(a_dtype) -> int:
    """How many consecutive threads of tilelang's mma.sp share one metadata value (2 for 16- and 32-bit
    values); tile_nb's `T.gemm_sp` does not need it, the compressor's callers may."""
    return 1 if as_dtype(a_dtype).bits <= 8 else 2
