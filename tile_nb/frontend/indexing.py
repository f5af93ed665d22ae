"""Index width of tensor parameters (docs/IR.md, "Index width").

A kernel addresses a tensor with 32-bit index arithmetic unless the tensor spans 2^31 elements or more. Phase
2 gives such a tensor (all of its dims and strides known) int64 dims and strides, so TVM computes every offset
into it in 64 bits; the tensors below that size keep 32-bit indices, which are cheaper. A tensor with
`T.dynamic` dims keeps 32-bit indices whatever its size, so a call is refused when one of its tensors spans
2^31 elements or more (frontend/checks.py).
"""
from __future__ import annotations

__all__ = ["INDEX_LIMIT", "index_dims", "span", "tensor_span"]

INDEX_LIMIT = 2 ** 31  # a tensor spanning this many elements or more needs 64-bit offsets


def span(shape, strides=None) -> int:
    """Elements from a tensor's first to its last addressed element, inclusive (its element count when it is
    row-major); 0 for an empty tensor."""
    shape = [int(n) for n in shape]
    if any(n == 0 for n in shape):
        return 0
    if strides is None:
        count = 1
        for n in shape:
            count *= n
        return count
    return 1 + sum((n - 1) * abs(int(s)) for n, s in zip(shape, strides, strict=True))


def tensor_span(t) -> int:
    """`span` of a torch tensor's shape and strides."""
    return span(t.shape, t.stride())


def _static(dims) -> bool:
    return all(isinstance(d, int) and not isinstance(d, bool) for d in dims)


def index_dims(shape, strides=None) -> tuple[list, list | None]:
    """The dims and strides to declare a tensor parameter with: int64 constants when all are ints and the
    tensor spans `INDEX_LIMIT` elements or more, else as given."""
    shape = list(shape)
    strides = None if strides is None else list(strides)
    if (
        not _static(shape)
        or (strides is not None and not _static(strides))
        or span(shape, strides) < INDEX_LIMIT
    ):
        return shape, strides
    from tvm import tirx

    def wide(values):
        return [tirx.IntImm("int64", v) for v in values]

    return wide(shape), None if strides is None else wide(strides)
