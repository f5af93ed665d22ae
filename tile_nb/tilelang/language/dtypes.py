"""`tilelang.language.dtypes` on tile_nb: `dtype` (a name or a torch dtype -> tile_nb's dtype) and the table
`_TORCH_DTYPE_TO_STR` (torch dtype -> dtype name) that tilelang's examples
read, for the dtypes tile_nb has."""
from __future__ import annotations

from ...language.dtypes import ALL_DTYPES, DType, as_dtype, torch_dtype

__all__ = ["dtype", "DType", "_TORCH_DTYPE_TO_STR"]


def dtype(value) -> DType:
    """tile_nb's dtype of `value`: a name ("float16", "float"), a tile_nb dtype or a torch dtype."""
    return as_dtype(value)


def _torch_table() -> dict:
    table = {}
    for name in ALL_DTYPES:
        try:
            table[torch_dtype(name)] = name
        except AttributeError:  # a torch without this dtype
            continue
    return table


_TORCH_DTYPE_TO_STR = _torch_table()
