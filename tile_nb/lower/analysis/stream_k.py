"""Stream-K for the last wave of a persistent GEMM: the tiles that do not
fill a wave share the SMs by k-tiles.

A persistent kernel (persistent.py) with `tiles` = waves * ctas + tail tiles runs `waves` whole tiles on every
CTA, and the `tail` tiles of the last wave on `tail` of the `ctas` SMs while the others idle: 512 tiles of a
4096^3 GEMM in 128x256 tiles on 132 SMs take 4 tile times for 3.88 tiles of work, 2048 tiles of 8192^3 16 for
15.52.
Stream-K (Osama et al., PPoPP'23) splits the tail's k-tiles (`iters` = tail * n, n k-tiles per tile) evenly
over `ctas` CTAs instead: CTA c runs the k-tiles [c * iters / ctas, (c + 1) * iters / ctas) of the tail, laid
out tile after tile. A range is shorter than a tile, so it covers the end of one tile (the CTA *finishes* that
tile) and/or the start of the next (it *contributes* a partial sum to it):

    contributor:  the k-loop over its k-tiles of the tile; its accumulator registers into its slot of a global
                  workspace (float32); after its finish's k-loop (if it has one: the stores drain under those
                  MMAs), a consumer barrier and a flag set with release semantics
    finisher:     the k-loop over the tile's last k-tiles; wait for the flags of the tile's contributors (the
                  CTAs just below it: their ranges precede its own), add their slots to the registers, reset
                  the flags; then the kernel's statements after the loop (the epilogue), as for a whole tile

Each CTA contributes first and finishes second; every range has the same length, so a finisher's contributors
raise their flags about when it reaches its wait. A finisher only waits for CTAs of lower index, which raise
their flags before waiting themselves and which the GPU launched before it (all are resident: one per SM), so
the waits cannot deadlock. The workspace and the flags are `__device__` arrays of the kernel's module; the
flags start as initialized data of the module (an uninitialized one was found set on a module's first launch:
docs/decisions.md#workarounds-for-what-the-toolchain-does-on-the-gpu) and a finisher resets those it consumed,
so launches on one stream are independent; launches on two streams take turns
(runtime.kernel.OneStreamAtATime).

Legal for a persistent kernel without clusters, ping-pong or the overlapped loop schedule, whose loop has a
static trip count and whose threads' body is: allocations, `T.clear` of one float32 wgmma accumulator, the
pipelined loop whose only statement besides the TMA copies is a T.gemm into that accumulator, then any
statements (the finisher runs them). The tail is spread over at most 2 * tail CTAs (a tile has at most two
contributors) and only where every CTA's range has more k-tiles than the pipeline has stages (the producer's
epilogue stores are issued within the range: epilogue.py). By default it is built only where the idle time it
hands out exceeds its cost (`MIN_FREED_K_TILES`, `MIN_FREED_SHARE`:
docs/decisions.md#stream-k-and-its-cost-model). `tile_nb.stream_k` (TILE_NB_STREAM_K) = 0 turns it off; = 1
builds it wherever legal and says in the plan why a kernel did not get it (and is the only way to get it for
8-bit inputs, whose stream-K kernels have not run on a GPU yet).
"""
from __future__ import annotations

from dataclasses import dataclass

from tvm import tirx

from ..exprs import const_int
from ..irwalk import region_of, seq_items
from .decisions import Refusal
from .layout import WgmmaAccLayout, tirx_bits

__all__ = ["MIN_FREED_K_TILES", "MIN_FREED_SHARE", "StreamK", "describe_stream_k", "plan_stream_k"]


@dataclass(frozen=True)
class StreamK:
    waves: int  # whole tiles every CTA runs first
    tail: int  # tiles left for the last wave, shared by k-tiles
    ctas: int  # CTAs sharing them (CTA c < ctas)
    n: int  # k-tiles per tile
    accumulator: tirx.Buffer  # the T.gemm accumulator whose partial sums are added
    registers: int  # float32 registers of the accumulator per consumer thread
    threads: int  # consumer threads

    @property
    def iters(self) -> int:
        return self.tail * self.n

    @property
    def tag(self) -> str:
        """Names the workspace of this kernel's shape in the generated source."""
        return f"{self.ctas}x{self.registers}x{self.threads}"

    def workspace_bytes(self) -> int:
        return self.ctas * self.registers * self.threads * 4


# The k-tiles of idle time per SM stream-K must free to pay for its partial sums' traffic, the flag hand-off
# and two more pipeline drains (docs/decisions.md#stream-k-and-its-cost-model).
MIN_FREED_K_TILES = 32
# ...and the share of a CTA's whole run they must be, since long runs lost even where that many were freed
# (docs/decisions.md#stream-k-and-its-cost-model).
MIN_FREED_SHARE = 0.02


def plan_stream_k(options, tma, threads_body, accumulators, tiles: int, ctas: int, clustered: bool,
                  threads: int) -> tuple[StreamK | None, Refusal | None]:
    """Stream-K for the tail of a persistent kernel's `tiles` on `ctas` CTAs, or (None, why not; "" unless
    asked). By default only where it frees more SM time than it costs (MIN_FREED_K_TILES, MIN_FREED_SHARE);
    `tile_nb.stream_k` = 1 builds it wherever legal."""
    mode = options.stream_k
    if mode is False:
        return None, None
    plan, why = _plan(tma, threads_body, accumulators, tiles, ctas, clustered, threads)
    if plan is not None and mode is not True:
        freed = (ctas - plan.tail) * plan.n / ctas  # k-tiles of idle time per SM in the last wave, shared out
        share = freed / (tiles * plan.n / ctas)  # of the k-tiles a CTA runs in all
        if freed < MIN_FREED_K_TILES or share < MIN_FREED_SHARE or not _sixteen_bit_inputs(tma):
            return None, None
    return plan, (why if mode else None)


def _plan(tma, threads_body, accumulators, tiles, ctas, clustered, threads):
    waves, tail = divmod(tiles, ctas)
    if tail == 0:
        return None, Refusal(
            "stream_k.full_waves", f"no stream-K ({tiles} tiles fill {waves} waves of {ctas} CTAs)"
        )
    if clustered or tma.overlap is not None or tma.pingpong:
        return None, Refusal(
            "stream_k.schedule", "no stream-K (not with clusters, ping-pong or the overlapped loop schedule)"
        )
    n = const_int(tma.loop.extent)
    if n is None:
        return None, Refusal(
            "stream_k.trip_count", "no stream-K (the pipelined loop's trip count is not a constant)"
        )
    acc = _accumulator(tma, threads_body, accumulators)
    if acc is None:
        return None, Refusal(
            "stream_k.body",
            "no stream-K (the body is not: clear one float32 wgmma accumulator, a loop of T.gemm into it, "
            "then the epilogue)",
        )
    sharing = min(ctas, 2 * tail)  # at most two contributors per tile
    if tail * n // sharing <= tma.stages:
        return None, Refusal(
            "stream_k.short_ranges",
            f"no stream-K ({tail * n} k-tiles over {sharing} CTAs: fewer than the {tma.stages} stages each",
        )
    if sharing * tail * n >= 2 ** 31:
        return None, Refusal(
            "stream_k.overflow", "no stream-K (the k-tile ranges overflow 32-bit arithmetic)"
        )
    layout = accumulators[acc].linear()
    return StreamK(waves, tail, sharing, n, acc, layout.regs, threads), None


def describe_stream_k(sk: StreamK) -> str:
    """The plan's note on stream-K, for people (code reads `plan.stream_k`)."""
    return (
        f"stream-K: the last {sk.tail} tiles ({sk.iters} k-tiles) shared by {sk.ctas} CTAs "
        f"({sk.iters / sk.ctas:.1f} k-tiles each) after {sk.waves} whole tile{'s' if sk.waves > 1 else ''} "
        f"each; partial sums through a {sk.workspace_bytes() / 2**20:.1f} MiB workspace"
    )


def _sixteen_bit_inputs(tma) -> bool:
    """fp16/bf16 operands: what stream-K has run on the GPU (its 8-bit kernels were not run there yet, so only
    `tile_nb.stream_k` = 1 builds them)."""
    gemm = tma.rest[0]
    return all(tirx_bits(region_of(gemm.args[i])[0].dtype) == 16 for i in (1, 2))


def _accumulator(tma, threads_body, accumulators):
    """The accumulator the loop sums into, where the body has stream-K's shape
    (see the module doc), else None."""
    gemms = [s for s in tma.rest if isinstance(s, tirx.TilePrimitiveCall) and s.op.name == "tirx.tile.gemm"]
    if len(gemms) != 1 or len(tma.rest) != 1:
        return None
    acc = region_of(gemms[0].args[0])[0]
    layout = accumulators.get(acc)
    if not isinstance(layout, WgmmaAccLayout) or str(acc.dtype) != "float32" or layout.linear().regs % 4:
        return None
    items = seq_items(threads_body)
    before = items[:next(i for i, s in enumerate(items) if s.same_as(tma.loop))]
    cleared = False
    for s in before:
        if isinstance(s, (tirx.AllocBuffer, tirx.DeclBuffer)):
            continue
        if isinstance(s, tirx.TilePrimitiveCall) and s.op.name == "tirx.tile.fill" and _is_zero(s.args[1]) \
                and _whole(region_of(s.args[0]), acc):
            cleared = True
            continue
        return None
    return acc if cleared else None


def _whole(region, buf) -> bool:
    target, ranges = region
    return target.same_as(buf) and [const_int(e) for _, e in ranges] == [int(x) for x in buf.shape]


def _is_zero(value) -> bool:
    return isinstance(value, (tirx.FloatImm, tirx.IntImm)) and float(value.value) == 0.0
