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
    """A row-major view of `shape` elements of `dtype` at `pointer`: device memory when `device` is a CUDA
    device (or, with no tensor argument to tell, when CUDA knows the pointer), host memory otherwise."""
    import torch

    if device is None:
        device = _memory_of(pointer)
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


def _memory_of(pointer: int):
    """Where a pointer points when no tensor argument says: CUDA memory if CUDA knows it (torch asks
    cudaPointerGetAttributes when it wraps the pointer), host memory otherwise (or when there is no GPU)."""
    import torch

    if not torch.cuda.is_available():
        return torch.device("cpu")
    try:
        torch.as_tensor(_CudaArray(pointer, (1,), "|i1"), device="cuda")
    except RuntimeError as err:
        if "host memory" in str(err):
            return torch.device("cpu")
        raise
    return torch.device("cuda")
