"""`T.im2col`: one tile of the im2col matrix of an NHWC image, for a convolution written as a GEMM.

The im2col matrix of `img` [N, H, W, C] for a square `kernel` (stride, dilation, padding) has a row per
output pixel, m = (n * OH + oh) * OW + ow, and a column per filter tap and channel, k = (kh * kernel + kw)
* C + c (the order of a [KH, KW, C, F] weight tensor flattened to [KH * KW * C, F]). Element (m, k) is
img[n, oh * stride + kh * dilation - pad, ow * stride + kw * dilation - pad, c], and 0 where that pixel
lies in the padding. `T.im2col(img, col, mi, ki, kernel, stride, dilation, pad)` fills the [block_M,
block_K] tile `col` with the block (mi, ki) of that matrix (rows and columns past its edge are 0). It is a
`T.Parallel` loop of guarded loads, so it runs wherever such a loop does (interpreter, sm_80, sm_90a);
tilelang's TMA im2col form is not used.
"""
from __future__ import annotations

from . import state as _state
from .irutil import as_expr, is_buffer

__all__ = ["im2col"]


def _int(name: str, value, st) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise st.error(f"T.im2col({name}=...) must be a Python int; got {value!r}")
    return value


def im2col(img, col, nhw_step, c_step, kernel, stride, dilation, pad, eviction_policy=None, annotations=None):
    """Fill the tile `col` [block_M, block_K] with block (nhw_step, c_step) of the im2col matrix
    of the NHWC image `img` for a `kernel` x `kernel` filter (module docstring).
    `eviction_policy` is a cache hint, recorded."""
    from tvm import tirx
    from tvm.script.ir_builder import tirx as T

    from .hints import record_hint
    from .loops import Parallel

    st = _state.active("T.im2col")
    kernel, stride, dilation, pad = (_int(n, v, st) for n, v in (("kernel", kernel), ("stride", stride),
                                                                   ("dilation", dilation), ("pad", pad)))
    if kernel < 1 or stride < 1 or dilation < 1 or pad < 0:
        raise st.error(
            f"T.im2col: kernel, stride and dilation must be >= 1 and pad >= 0; got kernel={kernel}, "
            f"stride={stride}, dilation={dilation}, pad={pad}"
        )
    if annotations:
        raise st.error("T.im2col(annotations=...) is not supported")
    if eviction_policy is not None:
        record_hint(st, f"im2col(eviction_policy={eviction_policy!r}) (a cache hint; values unchanged)")
    if not is_buffer(img) or len(img.shape) != 4:
        raise st.error(f"T.im2col(img, ...): img must be an NHWC tensor (4 dims); got {img!r}")
    if not is_buffer(col) or len(col.shape) != 2:
        raise st.error(f"T.im2col(img, col, ...): col must be a 2-d tile [block_M, block_K]; got {col!r}")
    if str(img.dtype) != str(col.dtype):
        raise st.error(f"T.im2col: img ({img.dtype}) and col ({col.dtype}) must have one dtype")
    n_dim, h_dim, w_dim, c_dim = img.shape
    out_h = (h_dim + 2 * pad - dilation * (kernel - 1) - 1) // stride + 1
    out_w = (w_dim + 2 * pad - dilation * (kernel - 1) - 1) // stride + 1
    block_m, block_k = col.shape
    with Parallel(block_m, block_k).open(None) as (i, j):
        m = nhw_step * block_m + i
        k = c_step * block_k + j
        h = (m % (out_h * out_w)) // out_w * stride + k // (kernel * c_dim) * dilation - pad
        w = m % out_w * stride + k // c_dim % kernel * dilation - pad
        inside = tirx.all(m < n_dim * out_h * out_w, k < kernel * kernel * c_dim, h >= 0, h < h_dim, w >= 0,
                          w < w_dim)
        value = tirx.if_then_else(
            inside, img[m // (out_h * out_w), h, w, k % c_dim], as_expr(0, str(col.dtype))
        )
        T.add_to_parent(tirx.BufferStore(col, value, [i, j], st.span()))
    # (no record_tile_op: that list pairs lines with T.tile.* calls, and this is a loop of stores with spans)
