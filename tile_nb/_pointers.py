"""Tensors over raw pointers, for `A: T.ptr` parameters called with `tensor.data_ptr()`."""
from __future__ import annotations

import ctypes

__all__ = ["tensor_from_pointer"]


class _CudaArray:
    """The minimal `__cuda_array_interface__` torch needs to view device memory without copying."""

    def __init__(self, pointer: int, shape, typestr: str):
        self.__cuda_array_interface__ = {"data": (pointer, False), "shape": tuple(shape), "typestr": typestr,
                                         "version": 3, "strides": None}


def tensor_from_pointer(pointer: int, shape, dtype, device):
    """A row-major view of `shape` elements of `dtype` at `pointer`: device memory when `device` is a CUDA device
    (or, with no tensor argument to tell, when a GPU is present), host memory otherwise."""
    import torch

    if device is None:
        device = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    count = 1
    for d in shape:
        count *= d
    itemsize = torch.empty((), dtype=dtype).element_size()
    if device.type == "cuda":
        # __cuda_array_interface__ has no bfloat16 typestr: view the bytes as int16 and reinterpret.
        view_dtype = {2: torch.int16, 4: torch.int32, 8: torch.int64, 1: torch.int8}[itemsize]
        typestr = {torch.int16: "<i2", torch.int32: "<i4", torch.int64: "<i8", torch.int8: "|i1"}[view_dtype]
        raw = torch.as_tensor(_CudaArray(pointer, shape, typestr), device=device)
        return raw.view(dtype)
    buffer = (ctypes.c_byte * (count * itemsize)).from_address(pointer)
    return torch.frombuffer(buffer, dtype=dtype).view(*shape)
