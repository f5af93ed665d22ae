"""`tilelang.transform` on tile_nb: only `PassConfigKey` (the same keys as
`tilelang.PassConfigKey`). tilelang's IR passes are not offered: tile_nb lowers with its own
pipeline, and each pass name raises UnsupportedTilelangAPI."""
from __future__ import annotations

from .._support import forwarding_getattr


def _pass_config_key():
    from .. import PassConfigKey

    return PassConfigKey


__getattr__ = forwarding_getattr(
    __name__, "tilelang.transform", {"PassConfigKey": _pass_config_key}, package=True
)
