"""The torch memory an address points into, for tensors made from pointer tables (language/pointers.py).

`T.make_tensor(A_ptrs[g], shape, dtype)` names memory that the call did not pass: an address, a
`tensor.data_ptr()` the caller put in a table. The interpreter looks the address up among the storages of the
live torch tensors on the CPU (found through the garbage collector, again on every miss) and views that
storage, so every access through the tensor is checked against the memory the address belongs to, as
accesses to parameters are: an address of no live tensor, one not 16-byte aligned (the GPU code assumes it
is), or a shape that runs past the storage is an error at the user's line, not a read of what lies there.
"""
from __future__ import annotations

import bisect
import gc
import threading
import weakref

import torch

from .errors import InterpreterError

__all__ = ["ALIGNMENT", "tensor_at"]

# What the CUDA lowering assumes of every address in a pointer table, as of a parameter's data pointer (vector
# and cp.async accesses); the interpreter refuses the addresses the GPU would fault on.
ALIGNMENT = 16

_REAL = (torch.Tensor, torch.nn.Parameter, torch.nn.Buffer)
_lock = threading.Lock()
_starts: list[int] = []  # start addresses of the known storages, sorted
_storages: list[tuple[int, int, weakref.ref]] = []  # (start, bytes, a tensor over it), in the same order


def tensor_at(address: int, shape: list[int], dtype: torch.dtype, name: str, location) -> torch.Tensor:
    """The row-major tensor of `shape` and `dtype` at `address`, a view of the live CPU storage holding it."""
    with _lock:
        found = _find(address)
        if found is None:
            _refresh()
            found = _find(address)
    if found is None:
        raise InterpreterError(
            f"'{name}' is made from the address {address:#x}, which is not in the memory of any live torch "
            "tensor on the CPU", location,
            hint="a pointer table holds `tensor.data_ptr()` values of tensors the caller keeps alive",
        )
    if address % ALIGNMENT:
        raise InterpreterError(
            f"'{name}' is made from the address {address:#x}, which is not {ALIGNMENT}-byte aligned: the GPU "
            f"code reads and writes a pointer table's tensors {ALIGNMENT} bytes at a time", location,
            hint="torch allocations are aligned; a view at an offset of a multiple of 16 bytes is too",
        )
    start, size, tensor = found
    itemsize = torch.empty((), dtype=dtype).element_size()
    offset = address - start
    count = 1
    for d in shape:
        count *= d
    if offset + count * itemsize > size:
        raise InterpreterError(
            f"'{name}' {tuple(shape)} {dtype} needs {count * itemsize} bytes at {address:#x}, but the tensor "
            f"memory there has {size - offset} bytes left", location,
            hint="the shape given to T.make_tensor must fit in the tensor whose data_ptr() the table holds",
        )
    view = torch.empty(0, dtype=dtype)
    return view.set_(tensor.untyped_storage(), offset // itemsize, tuple(shape))


def _find(address: int):
    """(start, bytes, tensor) of the known storage holding `address`, if it is still alive and unchanged."""
    i = bisect.bisect_right(_starts, address) - 1
    if i < 0:
        return None
    start, size, ref = _storages[i]
    tensor = ref()
    if tensor is None or not start <= address < start + size:
        return None
    storage = tensor.untyped_storage()
    if storage.data_ptr() != start or storage.nbytes() != size:  # freed and reused, or `set_` elsewhere
        return None
    return start, size, tensor


def _refresh() -> None:
    """Know the storages of every live CPU tensor."""
    found = {}
    for obj in gc.get_objects():
        _add_storage(obj, found)
    _storages[:] = sorted((start, size, ref) for start, (size, ref) in found.items())
    _starts[:] = [s for s, _, _ in _storages]


def _add_storage(obj, found: dict) -> None:
    # Plain tensors and parameters only: subclasses such as torch.compile's fake and functional tensors have
    # no memory of their own (and a FakeTensor's data_ptr() warns). type(), not isinstance: isinstance asks
    # some objects for __class__, which can warn or run code.
    if type(obj) not in _REAL:
        return
    try:
        if obj.device.type != "cpu" or obj.layout != torch.strided:
            return
        storage = obj.untyped_storage()
        start, size = storage.data_ptr(), storage.nbytes()
    except (RuntimeError, NotImplementedError):  # no real memory: torch.compile's functional tensors, ...
        return
    if start and size:
        found.setdefault(start, (size, weakref.ref(obj)))
