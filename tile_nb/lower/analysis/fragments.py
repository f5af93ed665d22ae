"""Register layouts of fragments: which thread holds which elements of a
`local.fragment` tile, in which register.

A layout is linear over mixed-radix digits (Triton's linear layouts, in the small). A thread's
register index `r`, its lane and its warp are each split into digits, least significant first; each
digit moves one dim of the tile by a stride, or moves nothing (a replica: threads that differ only in
that digit hold the same elements):

    coord[d] = sum(value(digit) * digit.stride  for every digit with digit.dim == d)

Three families are built here, all in that one form:
- `blocked`: the default for fragments that T.copy, T.Parallel and the reductions touch: each thread holds
  `vec` consecutive elements of the last dim (one 16-byte access), consecutive lanes hold consecutive vectors
  (coalesced), warps are stacked along the rows first;
- `mma_accumulator` / `wgmma_accumulator`: the C fragment of mma.sync m16n8 and of Hopper wgmma (PTX ISA,
  "Matrix Fragments"), so T.Parallel loops, copies and reductions work on a T.gemm accumulator in place;
- `FragmentLayout.slice(dim)`: the layout of a reduction's result, the reduced dim turned into replicas, so
  every thread that held part of a row holds the row's result.

Tiles whose shape is not covered exactly (a 100-column tile on 128-column passes) have padding elements, which
`valid` masks. Everything here is data and index arithmetic; the emitters
(copy.py, loops.py, reduce.py) read it.
"""
from __future__ import annotations

from dataclasses import dataclass

from tvm import tirx

from ..exprs import conjunction

__all__ = ["Digit", "FragmentLayout", "blocked", "mma_accumulator", "wgmma_accumulator"]

_SOURCES = ("reg", "lane", "warp")


def _fd(a, b):
    if isinstance(a, int):
        return a // b
    return a if b == 1 else tirx.floordiv(a, b)


def _fm(a, b):
    if isinstance(a, int):
        return a % b
    return 0 if b == 1 else tirx.floormod(a, b)


def _pow2_floor(n: int) -> int:
    p = 1
    while p * 2 <= n:
        p *= 2
    return p


@dataclass(frozen=True)
class Digit:
    """One digit of a register index, lane or warp: `extent` values, each step moving dim `dim` by `stride`
    (dim None: a replica digit)."""

    source: str  # "reg", "lane" or "warp"
    extent: int
    dim: int | None
    stride: int = 0

    def __str__(self) -> str:
        where = "replica" if self.dim is None else f"dim {self.dim} x{self.stride}"
        return f"{self.source}[{self.extent}]->{where}"


@dataclass(frozen=True)
class FragmentLayout:
    """A tile of `shape` spread over the registers of `warps` warps."""

    shape: tuple[int, ...]
    digits: tuple[Digit, ...]  # per source, least significant first; extent-1 digits dropped

    def __post_init__(self):
        lanes = 1
        for d in self.of("lane"):
            lanes *= d.extent
        if lanes != 32:
            raise ValueError(f"lane digits must cover 32 lanes, got {lanes}: {self}")

    @staticmethod
    def make(shape, digits) -> FragmentLayout:
        return FragmentLayout(tuple(int(s) for s in shape), tuple(d for d in digits if d.extent > 1))

    # ---- sizes -----------------------------------------------------------------------------------------
    def of(self, source: str) -> list[Digit]:
        return [d for d in self.digits if d.source == source]

    @property
    def regs(self) -> int:
        n = 1
        for d in self.of("reg"):
            n *= d.extent
        return n

    @property
    def warps(self) -> int:
        n = 1
        for d in self.of("warp"):
            n *= d.extent
        return n

    def covered(self, dim: int) -> int:
        """Elements along `dim` that the layout addresses (>= shape[dim]; more means padding)."""
        return 1 + sum(d.stride * (d.extent - 1) for d in self.digits if d.dim == dim)

    @property
    def padded(self) -> bool:
        return any(self.covered(k) > n for k, n in enumerate(self.shape))

    @property
    def replicated(self) -> bool:
        return any(d.dim is None for d in self.digits)

    # ---- index arithmetic ------------------------------------------------------------------------------
    def decode(self, source: str, value) -> list:
        """(digit, digit value) for every digit of `source`, from the register index, lane or warp number."""
        out, place = [], 1
        for d in self.of(source):
            out.append((d, _fm(_fd(value, place), d.extent)))
            place *= d.extent
        return out

    def _thread_digits(self, tx) -> list:
        return self.decode("lane", _fm(tx, 32)) + self.decode("warp", _fd(tx, 32))

    def element(self, tx, r) -> list:
        """Tile coordinates of register `r` (an int or an expression) of thread `tx`."""
        coords = [0] * len(self.shape)
        for d, v in self.decode("reg", r) + self._thread_digits(tx):
            if d.dim is not None:
                coords[d.dim] = coords[d.dim] + v * d.stride
        return coords

    def valid(self, tx, r):
        """The condition that register `r` of thread `tx` holds an element of the tile (None: always)."""
        cond = None
        for k, (n, c) in enumerate(zip(self.shape, self.element(tx, r), strict=True)):
            if self.covered(k) > n:
                cond = conjunction(cond, c < n)
        return cond

    def replica_zero(self, tx):
        """The condition that thread `tx` is the first of its replicas (None: no replicas): side effects on
        global memory run there only."""
        cond = None
        for d, v in self._thread_digits(tx):
            if d.dim is None:
                cond = conjunction(cond, v == 0)
        return cond

    # ---- derived layouts -------------------------------------------------------------------------------
    def slice(self, dim: int) -> FragmentLayout:
        """The layout of this tile reduced over `dim`: registers along `dim` merge, lanes and warps along it
        become replicas (each holds the whole reduced result)."""
        def renumber(d: Digit) -> Digit:
            if d.dim is None:
                return d
            if d.dim == dim:
                return Digit(d.source, d.extent, None)
            return Digit(d.source, d.extent, d.dim - (d.dim > dim), d.stride)

        digits = [renumber(d) for d in self.digits if not (d.source == "reg" and d.dim == dim)]
        shape = self.shape[:dim] + self.shape[dim + 1:]
        return FragmentLayout.make(shape, digits)

    def slice_register(self, dim: int, r):
        """The register of `slice(dim)` that holds the reduced result of register `r` of this layout."""
        out, place = 0, 1
        for d, v in self.decode("reg", r):
            if d.dim != dim:
                out = out + v * place
                place *= d.extent
        return out

    def reduced_registers(self, dim: int) -> tuple[int, list[Digit], list[Digit]]:
        """(registers per result, the register digits kept, the register digits reduced) for `slice(dim)`."""
        kept = [d for d in self.of("reg") if d.dim != dim]
        reduced = [d for d in self.of("reg") if d.dim == dim]
        count = 1
        for d in reduced:
            count *= d.extent
        return count, kept, reduced

    def register_of(self, kept_value, reduced_value, dim: int):
        """The register of this layout whose kept digits are those of `kept_value` (a register of
        `slice(dim)`) and whose reduced digits are those of `reduced_value` (an index among the
        registers reduced together)."""
        r, place = 0, 1
        kept_place, reduced_place = 1, 1
        for d in self.of("reg"):
            if d.dim == dim:
                v = _fm(_fd(reduced_value, reduced_place), d.extent)
                reduced_place *= d.extent
            else:
                v = _fm(_fd(kept_value, kept_place), d.extent)
                kept_place *= d.extent
            r = r + v * place
            place *= d.extent
        return r

    def lane_masks(self, dim: int) -> list[int]:
        """XOR masks over the lane bits that move `dim`: a butterfly over them combines a row held by several
        lanes (every lane ends with the same value)."""
        masks, place = [], 1
        for d in self.of("lane"):
            if d.dim == dim:
                bit = place
                while bit < place * d.extent:
                    masks.append(bit)
                    bit *= 2
            place *= d.extent
        return sorted(masks, reverse=True)

    def warp_slots(self, dim: int, tx) -> tuple[int, object]:
        """(warps sharing one result along `dim`, this warp's slot among them as an expression)."""
        count, slot, place = 1, 0, 1
        for d, v in self.decode("warp", _fd(tx, 32)):
            if d.dim == dim:
                slot = slot + v * place
                place *= d.extent
                count *= d.extent
        return count, slot

    def lane_is_first(self, tx, dim: int):
        """Condition that this lane is the first of those sharing a result along
        `dim` (None: one lane only)."""
        cond = None
        for d, v in self.decode("lane", _fm(tx, 32)):
            if d.dim == dim:
                cond = conjunction(cond, v == 0)
        return cond

    def vector(self) -> int:
        """Registers holding consecutive elements of the last dim (the width of one vector access)."""
        regs = self.of("reg")
        last = len(self.shape) - 1
        if not regs or regs[0].dim != last or regs[0].stride != 1:
            return 1
        vec = regs[0].extent
        # Every other step along the last dim must land on a vector boundary.
        if any(d.dim == last and d.stride % vec for d in self.digits if d is not regs[0]):
            return 1
        return vec

    def picture(self, threads: int, rows: int = 4, cols: int = 16) -> str:
        """Which thread holds each element of the tile's top-left corner (the first replica), as text."""
        if len(self.shape) == 1:
            shape = (1, self.shape[0])
            at = lambda c: (0, c[0])  # noqa: E731
        else:
            shape = self.shape
            at = tuple
        rows, cols = min(rows, shape[0]), min(cols, shape[1])
        if threads * self.regs > 20000:
            return ""
        owner = {}
        for tx in range(threads):
            if self.replica_zero(tx) is False:
                continue
            for r in range(self.regs):
                valid = self.valid(tx, r)
                if valid is None or valid:
                    owner.setdefault(at(self.element(tx, r)), tx)
        width = max(len(f"t{t}") for t in owner.values()) + 1
        head = " " * 6 + "".join(f"{j:>{width}}" for j in range(cols))
        lines = [head] + [
            f"{i:>4}: " + "".join(f"{'t' + str(owner.get((i, j), '?')):>{width}}" for j in range(cols))
            for i in range(rows)
        ]
        return "\n".join(lines)

    def describe(self) -> str:
        parts = []
        for source in _SOURCES:
            ds = self.of(source)
            if ds:
                parts.append(f"{source}s: " + ", ".join(str(d) for d in ds))
        pad = " (padded)" if self.padded else ""
        return f"{self.regs} registers per thread{pad}; " + "; ".join(parts)


# ---- the families ------------------------------------------------------------------------------------------

def blocked(shape, threads: int, vec: int) -> FragmentLayout:
    """The default register layout of a 1-d or 2-d tile: `vec` consecutive elements of the last dim per
    register group, lanes along the last dim first (coalesced global access), warps along the first dim first
    (a row's reduction stays inside a warp when there are enough rows)."""
    shape = tuple(int(s) for s in shape)
    rows, cols = (1, shape[0]) if len(shape) == 1 else shape
    col_dim, row_dim = len(shape) - 1, 0 if len(shape) == 2 else None
    # No wider than the tile needs: a small tile spread over many threads gets
    # shorter vectors, not idle threads.
    vec = max(1, min(vec, _pow2_floor(cols), _pow2_floor(max(1, rows * cols // threads))))
    while cols % vec:
        vec //= 2
    groups = -(-cols // vec)
    lc = min(32, _pow2_floor(groups))
    lr = 32 // lc
    warps = threads // 32
    wr = min(warps, _pow2_floor(max(1, -(-rows // lr)))) if row_dim is not None else 1
    wc = warps // wr
    # warps the columns do not need go to the rows (padding there keeps reductions in-warp)
    if row_dim is not None:
        wc = max(1, min(wc, _pow2_floor(max(1, -(-groups // lc)))))
        wr = warps // wc
    pass_cols = vec * lc * wc
    pass_rows = lr * wr
    n_cols = -(-cols // pass_cols)
    n_rows = -(-rows // pass_rows) if row_dim is not None else 1
    digits = [Digit("reg", vec, col_dim, 1), Digit("reg", n_cols, col_dim, pass_cols)]
    if row_dim is not None:
        digits.append(Digit("reg", n_rows, row_dim, pass_rows))
        digits += [Digit("lane", lc, col_dim, vec), Digit("lane", lr, row_dim, 1),
                   Digit("warp", wc, col_dim, vec * lc), Digit("warp", wr, row_dim, lr)]
    else:
        digits += [Digit("lane", lc, col_dim, vec), Digit("lane", lr, None),
                   Digit("warp", wc, col_dim, vec * lc)]
    return FragmentLayout.make(shape, digits)


def mma_accumulator(bm: int, bn: int, wm: int, wn: int) -> FragmentLayout:
    """The mma.sync m16n8 C fragment over a wm x wn grid of warps (`layout.MmaAccLayout`'s register order:
    r = ((mi * NI + ni) * 2 + h) * 2 + e)."""
    warp_m, warp_n = bm // wm, bn // wn
    digits = [Digit("reg", 2, 1, 1), Digit("reg", 2, 0, 8), Digit("reg", warp_n // 8, 1, 8),
              Digit("reg", warp_m // 16, 0, 16),
              Digit("lane", 4, 1, 2), Digit("lane", 8, 0, 1),
              Digit("warp", wn, 1, warp_n), Digit("warp", wm, 0, warp_m)]
    return FragmentLayout.make((bm, bn), digits)


def wgmma_accumulator(bm: int, bn: int, row_groups: int, col_groups: int = 1,
                      replicas: int = 1) -> FragmentLayout:
    """The wgmma D fragment (`wgmma.WgmmaAccLayout`'s register order: r = mb * (bn / col_groups / 2) +
    (ni * 2 + h) * 2 + e) over warpgroups split `row_groups` ways along the rows, then `col_groups` ways
    along the columns, then `replicas` copies (wgmma's register A operand of a column-split T.gemm)."""
    mblocks, group_n = bm // 64 // row_groups, bn // col_groups
    digits = [Digit("reg", 2, 1, 1), Digit("reg", 2, 0, 8), Digit("reg", group_n // 8, 1, 8),
              Digit("reg", mblocks, 0, 64),
              Digit("lane", 4, 1, 2), Digit("lane", 8, 0, 1),
              Digit("warp", 4, 0, 16), Digit("warp", row_groups, 0, mblocks * 64),
              Digit("warp", col_groups, 1, group_n), Digit("warp", replicas, None)]
    return FragmentLayout.make((bm, bn), digits)
