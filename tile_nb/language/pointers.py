"""Pointer tables: `A_ptrs: T.Tensor([G], T.ptr)`; in the kernel, `A = T.make_tensor(A_ptrs[g], shape, dt)`.

tilelang's pointer-table grouped GEMM passes each group's tensors by address: the call gives an int64 tensor
of `tensor.data_ptr()`s, and each block makes its group's tensors from the addresses it loads. In the IR such
a tensor is a row-major `T.decl_buffer` over a handle bound to the loaded address (a `T.Bind` of
`T.reinterpret("handle", A_ptrs[g])`, at the user's line): the CUDA lowering reads and writes through the
loaded pointer; the interpreter finds the live torch tensor whose memory holds the address and checks each
access against that memory (interp/addresses.py). The function's `tile_nb.pointer_tensors` attribute lists
[tensor name, table name] of each.
"""
from __future__ import annotations

from .dtypes import TF32
from .irutil import is_load

__all__ = ["is_table_element", "table_tensor"]


def is_table_element(st, pointer) -> bool:
    """Whether `pointer` is an element of a pointer-table parameter (`A_ptrs[g]`)."""
    return is_load(pointer) and any(pointer.source.same_as(t) for t in st.pointer_tables)


def table_tensor(st, element, shape: tuple, dtype):
    """The row-major tensor of `shape` and `dtype` at the address `element` (a pointer table's element)."""
    from tvm import tirx
    from tvm.script.ir_builder import tirx as T

    if not st.kernel_open:
        raise st.error(
            "T.make_tensor(table[i], shape, dtype) makes a tensor from an address loaded in the kernel; "
            "call it inside `with T.Kernel(...)`"
        )
    if isinstance(dtype, TF32):  # (T.int4 and other sub-byte dtypes: refused by as_dtype before)
        raise st.error(f"T.make_tensor(table[i], shape, {dtype!r}): a pointer table's tensors hold plain "
                       "dtypes, not T.tfloat32", hint="make the tensor float32")
    # Both at the user's line: the interpreter's errors about the address point there.
    address = st.bind_here("address", tirx.reinterpret("handle", element), "handle")
    tensor = tirx.decl_buffer(shape, str(dtype), data=address)
    T.add_to_parent(tirx.DeclBuffer(tensor, st.span(), data=address))
    st.pointer_tensors.append((tensor, element.source, address))
    return tensor
