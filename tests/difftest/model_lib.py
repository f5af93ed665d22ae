"""Torch models of what generated kernels compute, written from the tile language's documented meaning
(docs/IR.md), never from tile_nb's code. Each function is self-contained (only torch), because a reproducer
pastes in the source of the ones its model calls.
"""
import torch


def tile_copy(X, Y, tile, src_off, dst_off, dtypes):
    """CTA b (one per `tile`-sized block of Y's shape) reads the tile of X starting at b * tile + src_off and
    writes it at b * tile + dst_off, through buffers of `dtypes` (casts in order). Elements of the read tile
    outside X are 0; elements of the written tile outside Y are not written; Y keeps its values where no CTA
    writes. So Y[p] = cast(X[p - dst_off + src_off] or 0) where the CTA (p - dst_off) // tile exists."""
    grids = torch.meshgrid(*[torch.arange(s) for s in Y.shape], indexing="ij")
    written = torch.ones(Y.shape, dtype=torch.bool)
    inside = torch.ones(Y.shape, dtype=torch.bool)
    src = []
    for p, t, so, do, n_out, n_in in zip(grids, tile, src_off, dst_off, Y.shape, X.shape, strict=True):
        blocks = -(-n_out // t)
        b = torch.div(p - do, t, rounding_mode="floor")
        written &= (b >= 0) & (b < blocks)
        s = p - do + so
        inside &= (s >= 0) & (s < n_in)
        src.append(s.clamp(0, n_in - 1))
    value = torch.where(inside, X[tuple(src)], torch.zeros((), dtype=X.dtype))
    for dt in dtypes:
        value = value.to(dt)
    return torch.where(written, value.to(Y.dtype), Y)


def padded_tiles(X, tile, fill=0.0):
    """X zero-padded (with `fill`) up to whole tiles: what a tile copy from X's corner reads at the edges."""
    pad = []
    for n, t in reversed(list(zip(X.shape, tile, strict=True))):
        pad += [0, -(-n // t) * t - n]
    return torch.nn.functional.pad(X, pad, value=fill)


def tiled_reduce(X, tile, dim, op, acc_dtype, fill):
    """Reduce X [M, N] over `dim` tile by tile, as a kernel that copies `tile`-sized blocks into a buffer
    (elements past the edges read as 0, or set to `fill` by a mask) and reduces each into an accumulator of
    `acc_dtype`, combining tiles in order. Returns X's shape without `dim`, in acc_dtype."""
    xp = padded_tiles(X, tile, fill)
    acc = None
    for k in range(xp.shape[dim] // tile[dim]):
        part = xp.narrow(dim, k * tile[dim], tile[dim]).to(acc_dtype)
        if op == "sum":
            red = part.sum(dim=dim, dtype=acc_dtype)
            acc = red if acc is None else acc + red
        elif op == "max":
            red = part.amax(dim=dim)
            acc = red if acc is None else torch.maximum(acc, red)
        else:
            red = part.amin(dim=dim)
            acc = red if acc is None else torch.minimum(acc, red)
    return acc[:X.shape[1 - dim]]


def tiled_gemm(A, B, trans_a, trans_b, acc_dtype):
    """A @ B (with the stored-transposed operands turned back), in float64, cast to the accumulator dtype once
    at the end; exact when every partial sum is exact (integer-valued inputs)."""
    a = A.double().t() if trans_a else A.double()
    b = B.double().t() if trans_b else B.double()
    return (a @ b).to(acc_dtype)


def gather_rows(A, idx, block, col0, width):
    """Blocks of `block` rows of A starting at idx[k] * block (rows past A's end read as 0), columns
    [col0, col0 + width) (columns past the end read as 0), one [block, width] tile per k."""
    rows, cols = A.shape
    tiles = []
    for k in range(len(idx)):
        r = torch.arange(block) + int(idx[k]) * block
        c = torch.arange(width) + col0
        ok = (r[:, None] < rows) & (c[None, :] < cols)
        t = A[r.clamp(max=rows - 1)[:, None], c.clamp(max=cols - 1)[None, :]]
        tiles.append(torch.where(ok, t, torch.zeros((), dtype=A.dtype)))
    return tiles


def horner(values, start, mod):
    """acc = start; for v in values: acc = (acc * 3 + v) % mod (integers)."""
    acc = start
    for v in values:
        acc = (acc * 3 + int(v)) % mod
    return acc
