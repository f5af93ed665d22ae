"""`T.Persistent`: tilelang's loop over a grid of tiles for a kernel launched with a fixed number of CTAs (one
per SM, say), each of which walks several tiles.

    with T.Kernel(sm_num, threads=256) as block_id:
        for bx, by in T.Persistent([T.ceildiv(M, bM), T.ceildiv(N, bN)], sm_num, block_id):
            ...                                   # the body, once per tile (bx, by) this CTA takes

The semantics are tilelang's (its `PersistentFor`): tiles are numbered, and in wave `w` the CTA takes tile
number `t = w * wave_size + index`. The numbering cuts the last dim of the domain [d0, ..., dL] into groups of
`g = clamp(group_size, 1, dL)` columns and runs through the padded grid [ceildiv(dL, g), d0, ..., g] with the
last digit fastest: tile t lies in column group `t // (d0 * ... * g)`, and within it the g columns of one row
come first, then the next row (consecutive CTAs share rows of the first operand: an L2 swizzle). Numbers that
fall in the padding of the last group or past the end of the domain run nothing; tilelang also breaks out of
the loop once t passes the padded grid, which (t grows with w) is only ever the last wave, skipped here too.

It is elaborated into plain IR, a serial loop over the waves whose body computes the coordinates and is
guarded by `coordinate < dL`, so the interpreter and the CUDA lowering need nothing new.
"""
from __future__ import annotations

import contextlib
import math

from . import state as _state
from .compute import ceildiv
from .compute import max as _max
from .compute import min as _min
from .loops import LoopSpec, _constant, _is_intlike

__all__ = ["Persistent"]


class _PersistentLoop(LoopSpec):
    kind = "serial"

    def __init__(self, domain: tuple, wave_size, index, group):
        self.domain, self.wave_size, self.index = domain, wave_size, index
        last = domain[-1]
        self.group = _max(1, _min(group, last))
        # the mixed radix of a tile number, slowest digit first: column group, d0 ... d(L-1), column in group
        self.radix = (ceildiv(last, self.group), *domain[:-1], self.group)
        super().__init__(ceildiv(math.prod(self.radix), wave_size))

    @contextlib.contextmanager
    def open(self, names):
        from tvm.script.ir_builder import tirx as T

        st = _state.active("T.Persistent")
        if names and len(names) > 1 and len(names) != len(self.domain):
            raise st.error(f"T.Persistent over a domain of {len(self.domain)} dims gives {len(self.domain)} "
                           f"coordinates; the loop names {len(names)} ({', '.join(names)})")
        with super().open(("wave",)) as wave:
            tile = wave * self.wave_size + self.index
            if len(self.domain) == 1:   # (t // g) * g + t % g: the tile number itself
                coords = [tile]
            else:
                digits, rest = [], tile
                for radix in reversed(self.radix[1:]):
                    digits.append(rest % radix)
                    rest = rest // radix
                digits.reverse()   # d0 ... d(L-1) digits, then the column in its group; `rest`: the group
                coords = [*digits[:-1], rest * self.group + digits[-1]]
            with _state.frame(T.If(coords[-1] < self.domain[-1])), _state.frame(T.Then()):
                yield coords[0] if len(coords) == 1 else tuple(coords)


def Persistent(domain, wave_size, index, group_size=8) -> LoopSpec:  # noqa: N802 - the DSL's name
    """`for bx, by in T.Persistent([m_tiles, n_tiles], wave_size, index, group_size=8)`: the tiles of `domain`
    (a list of 1 or more tile counts) that CTA number `index` takes when `wave_size` CTAs walk them in waves,
    in tilelang's order (tiles grouped `group_size` columns of the last dim at a time). Block-level code: the
    body holds tile ops (T.copy, T.gemm, T.Pipelined...) for one tile at a time.

    >>> with T.Kernel(132, threads=256) as block_id:                                  # doctest: +SKIP
    ...     for bx, by in T.Persistent([T.ceildiv(M, 128), T.ceildiv(N, 256)], 132, block_id):
    ...         T.copy(A[bx * 128, 0], A_shared)
    """
    st = _state.active("T.Persistent")
    if not isinstance(domain, (list, tuple)) or not domain:
        raise st.error(f"T.Persistent(domain, ...): domain must be a non-empty list of tile counts; got "
                       f"{domain!r}")
    for i, extent in enumerate(domain):
        if not _is_intlike(extent):
            raise st.error(f"T.Persistent(domain, ...): domain[{i}] must be an integer expression; got "
                           f"{extent!r} ({type(extent).__name__})")
        if _constant(extent) is not None and _constant(extent) < 0:
            raise st.error(f"T.Persistent(domain, ...): domain[{i}] is {_constant(extent)}; a tile count "
                           "must be >= 0")
    if not _is_intlike(wave_size) or (_constant(wave_size) is not None and _constant(wave_size) < 1):
        raise st.error(f"T.Persistent(..., wave_size, ...): wave_size (the CTAs that walk the tiles) must be "
                       f"an integer expression >= 1; got {wave_size!r}")
    if not _is_intlike(index):
        raise st.error(f"T.Persistent(..., index): index (this CTA's number within a wave, such as the block "
                       f"id of `with T.Kernel(n) as block_id`) must be an integer expression; got {index!r}")
    if group_size is None or not _is_intlike(group_size):
        raise st.error(f"T.Persistent(group_size=...) must be an integer expression (values below 1 count as "
                       f"1: no grouping); got {group_size!r}")
    return _PersistentLoop(tuple(domain), wave_size, index, group_size)
