"""Copies: a tensor copied tile by tile through shared, fragment or local buffers, with the read (and write)
starting at an offset from the tile grid (negative starts, edges), tiles with leading or trailing 1-dims,
rank- reduced buffers, strided views (transposed, every other element, padded rows), T.dynamic dims, dtype
casts between buffers, and odd, prime and unit sizes. Compared bitwise."""
from __future__ import annotations

from dataclasses import dataclass

from ..case import Case, Source, TensorArg, exact
from ..choose import Chooser
from .common import (
    FLOATS,
    SIZES,
    STRIDED_VIEWS,
    TORCH,
    annotate,
    declare_dims,
    dim_names,
    int_values,
    kernel_name,
    numel,
    plus,
    times,
)

__all__ = ["CopySpec", "draw", "render"]


@dataclass(frozen=True)
class CopySpec:
    shape: tuple                     # X's and Y's shape (rank 1 to 3)
    tile: tuple                      # tile size per dim; the grid has one CTA per tile of Y's shape
    src_off: tuple = ()              # the read starts at b * tile + src_off (default 0)
    dst_off: tuple = ()              # the write starts at b * tile + dst_off (default 0)
    path: tuple = ("shared",)        # scopes of the buffers X passes through on its way to Y
    dtypes: tuple = ("float32", "float32", "float32")   # X, each buffer, Y
    x_view: str = "contiguous"
    y_view: str = "guarded"
    dynamic: tuple = ()              # dim names declared with T.dynamic
    squeeze_lead: bool = False       # the buffers drop the tile's leading 1 (a rank-reduced tile)
    # global side written as a start corner X[i, j] or a slice X[i:i+n, j:j+m]
    spelling: str = "corner"
    threads: int = 128


def _compatible(c: Chooser, x_dtype: str) -> str:
    """A dtype that x_dtype's values convert to and from without leaving the contract (no float -> int)."""
    if x_dtype in FLOATS:
        return c.choice((x_dtype,) + FLOATS)
    if x_dtype == "uint8":
        return c.choice(("uint8", "int16", "int32", "float32"))
    return c.choice((x_dtype, "int32", "int16", "float32", "float16"))


def draw(c: Chooser) -> CopySpec:
    rank = c.choice((2, 1, 2, 3))
    shape = tuple(c.choice(SIZES) if not (rank == 3 and d == 0) else c.choice((1, 2, 3)) for d in range(rank))
    tile = [c.choice((1, 2, 4, 8, 16, 32, 64, 128)) for _ in range(rank)]
    while numel(tile) > 2048:
        tile[tile.index(max(tile))] //= 2
    tile = tuple(tile)
    src_off = tuple(c.choice((0, -1, 1, 0, -3, 2)) for _ in range(rank))
    dst_off = tuple(c.choice((0, 0, 0, -1, 1)) for _ in range(rank))
    scopes = ("shared", "fragment", "local") if numel(tile) <= 64 else ("shared", "fragment")
    path = tuple(c.choice(scopes) for _ in range(c.integer(1, 2)))
    x_dtype = c.choice(("float32", "float16", "bfloat16", "int8", "int32", "uint8"))
    dtypes = (x_dtype,) + tuple(_compatible(c, x_dtype) for _ in path)
    dtypes += (_compatible(c, dtypes[-1]),)
    views = ("contiguous",) + (STRIDED_VIEWS if rank >= 2 else ("every_other",))
    x_view = c.choice(views + ("contiguous", "contiguous"))
    y_view = c.choice(
        ("guarded", "guarded", "guarded") + (("transposed",) if rank >= 2 else ()) + ("every_other",)
    )
    names = dim_names(rank)
    dynamic = tuple(n for n in names if c.choice((False, False, True)))
    squeeze = rank >= 2 and tile[0] == 1 and c.boolean()
    spelling = c.choice(("corner", "corner", "slice"))
    threads = c.choice((128, 128, 64, 256, 32))
    return CopySpec(
        shape, tile, src_off, dst_off, path, dtypes, x_view, y_view, dynamic, squeeze, spelling, threads
    )


def _values(dtype: str) -> dict:
    return {"values": "normal", "scale": 3.0} if dtype in FLOATS else int_values(dtype)


def render(spec: CopySpec) -> Case:
    rank = len(spec.shape)
    src_off = spec.src_off or (0,) * rank
    dst_off = spec.dst_off or (0,) * rank
    names = dim_names(rank)
    name = kernel_name("copy", spec)
    X = TensorArg("X", spec.shape, spec.dtypes[0], view=spec.x_view, **_values(spec.dtypes[0]))
    Y = TensorArg("Y", spec.shape, spec.dtypes[-1], values="poison", view=spec.y_view)
    blocks = [f"b{d}" for d in range(rank)]

    def region(tensor: str, offsets) -> str:
        starts = [plus(times(b, t), o) for b, t, o in zip(blocks, spec.tile, offsets, strict=True)]
        if spec.spelling == "corner":
            return f"{tensor}[{', '.join(starts)}]"
        return f"{tensor}[{', '.join(f'{s}:{plus(s, t)}' for s, t in zip(starts, spec.tile, strict=True))}]"

    src = Source()
    src("@tile_nb.jit")
    with src.block(f"def {name}(X, Y):"):
        declare_dims(src, names, spec.dynamic)
        annotate(src, X, names)
        annotate(src, Y, names)
        grid = ", ".join(f"T.ceildiv({n}, {t})" for n, t in zip(names, spec.tile, strict=True))
        target = blocks[0] if rank == 1 else f"({', '.join(blocks)})"
        with src.block(f"with T.Kernel({grid}, threads={spec.threads}) as {target}:"):
            buf_shape = spec.tile[1:] if spec.squeeze_lead else spec.tile
            alloc = {"shared": "T.alloc_shared", "fragment": "T.alloc_fragment", "local": "T.alloc_local"}
            bufs = []
            for i, (scope, dt) in enumerate(zip(spec.path, spec.dtypes[1:-1], strict=False)):
                bufs.append(f"t{i}")
                src(f"t{i} = {alloc[scope]}({tuple(buf_shape)}, T.{dt})")
            src(f"T.copy({region('X', src_off)}, {bufs[0]})")
            for a, b in zip(bufs, bufs[1:], strict=False):
                src(f"T.copy({a}, {b})")
            src(f"T.copy({bufs[-1]}, {region('Y', dst_off)})")
    chain = ", ".join(TORCH[d] for d in spec.dtypes[1:-1])
    model = Source()
    with model.block("def model(X, Y):"):
        model(f"return {{'Y': tile_copy(X, Y, {spec.tile}, {src_off}, {dst_off}, ({chain},))}}")
    notes = []
    if rank >= 2 and spec.tile[-1] == 1 and not spec.squeeze_lead:
        notes.append("tile with a trailing 1-dim: the copy region is a column of X")
    if any(o < 0 for o in src_off):
        notes.append("negative read start: elements before X[0] read as 0")
    return Case("copy", spec, name, src.text(), [X, Y], model.text(), {"Y": 1},
                {"Y": {"model": exact(), "gpu": exact()}}, helpers=["tile_copy"], notes=notes)
