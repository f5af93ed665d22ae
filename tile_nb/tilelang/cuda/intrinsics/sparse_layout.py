"""`tilelang.cuda.intrinsics.sparse_layout` on tile_nb: the 2:4 sparsity contract between a compressor and
`T.gemm_sp` (language/sparse.py). A row of a 2:4 sparse matrix keeps `elem` of each `group` consecutive
values; its metadata gives, in 4 bits per group (little-endian within each metadata integer), the positions
of the kept values: bits 1:0 the first's, bits 3:2 the second's."""
from __future__ import annotations

from ....language.dtypes import as_dtype
from ....language.sparse import BITS_PER_GROUP, GROUPS

__all__ = ["GROUP_CONFIG", "get_e_factor", "get_e_replicate_factor"]

# the dtype of the values -> (values kept, group size): T.gemm_sp's own table
GROUP_CONFIG = {as_dtype(name): kept_group for name, kept_group in GROUPS.items()}


def get_e_factor(a_dtype, meta_dtype) -> int:
    """How many values of `a_dtype` (dense columns) one metadata integer of `meta_dtype` describes."""
    _, group = GROUP_CONFIG[as_dtype(a_dtype)]
    return as_dtype(meta_dtype).bits // BITS_PER_GROUP * group


def get_e_replicate_factor(a_dtype) -> int:
    """How many consecutive threads of tilelang's mma.sp share one metadata value (2 for 16- and 32-bit
    values); tile_nb's `T.gemm_sp` does not need it, the compressor's callers may."""
    return 1 if as_dtype(a_dtype).bits <= 8 else 2
