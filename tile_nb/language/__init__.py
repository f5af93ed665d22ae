"""The tile language, imported as `T`: annotations, dtypes and tile operations.

```python
import tile_nb
import tile_nb.language as T

@tile_nb.jit
def add(A, B):
    N = T.const('N')
    A: T.Tensor[[N], T.float32]
    B: T.Tensor[[N], T.float32]
    with T.Kernel(T.ceildiv(N, 128)) as bx:
        for i in T.Parallel(128):
            B[bx * 128 + i] = A[bx * 128 + i] + 1.0
```
Everything here builds IR while the front end elaborates a kernel; calling these
outside a kernel raises a clear error.
"""
import difflib as _difflib

from tile_nb.errors import UnknownNameError as _UnknownNameError

from .annotations import (
    FragmentBuffer,
    LocalBuffer,
    SharedBuffer,
    StridedTensor,
    Tensor,
    TensorAnnotation,
    const,
    dynamic,
    ptr,
)
from .bits import bitwise_and, bitwise_not, bitwise_or, bitwise_xor, reinterpret, shift_left, shift_right
from .compute import (
    Cast,
    abs,
    atomic_add,
    atomic_addx2,
    atomic_addx4,
    atomic_max,
    atomic_min,
    cast,
    ceil,
    ceildiv,
    clamp,
    cos,
    cumsum,
    erf,
    exp,
    exp2,
    floor,
    floordiv,
    floormod,
    gemm,
    if_then_else,
    infinity,
    log,
    log2,
    log10,
    max,
    min,
    reduce_absmax,
    reduce_max,
    reduce_min,
    reduce_sum,
    round,
    rsqrt,
    sigmoid,
    sin,
    sqrt,
    tanh,
    trunc,
)
from .debug import assume, breakpoint, device_assert, print  # noqa: A004 - the DSL's names
from .dtypes import ALL_DTYPES, NAMED_ONLY, DType, dtype, tfloat32
from .extern import access_ptr, call_extern, call_pure_extern, import_source
from .functions import Ref, macro, prim_func
from .hints import (
    GemmWarpPolicy,
    annotate_consumer_reg_alloc,
    annotate_producer_reg_dealloc,
    disable_warp_group_reg_alloc,
    no_set_max_nreg,
    set_max_nreg,
    use_swizzle,
)
from .im2col import im2col
from .layouts import Fragment, Layout, annotate_layout
from .loops import (
    Kernel,
    Parallel,
    Pipelined,
    Serial,
    Unroll,
    Vectorized,
    get_block_binding,
    serial,
    unroll,
    vectorized,
)
from .memory import (
    alloc_fragment,
    alloc_global,
    alloc_local,
    alloc_shared,
    alloc_var,
    clear,
    copy,
    empty,
    fill,
    make_tensor,
)
from .persistent import Persistent
from .reducers import (
    alloc_reducer,
    attr,
    comm_reducer,
    evaluate,
    finalize_reducer,
    tvm_thread_allreduce,
    tvm_warp_shuffle,
)
from .sparse import gemm_sp
from .sync import (
    alloc_barrier,
    barrier_arrive,
    barrier_wait,
    fence_proxy_async,
    get_thread_binding,
    mbarrier_arrive,
    mbarrier_wait_parity,
    sync_grid,
    sync_threads,
    thread_binding,
    tma_copy,
    wait_wgmma,
    wgmma_gemm,
    ws,
)

float16 = ALL_DTYPES["float16"]
bfloat16 = ALL_DTYPES["bfloat16"]
float32 = ALL_DTYPES["float32"]
float64 = ALL_DTYPES["float64"]
float8_e4m3fn = ALL_DTYPES["float8_e4m3fn"]
float8_e5m2 = ALL_DTYPES["float8_e5m2"]
int8 = ALL_DTYPES["int8"]
int16 = ALL_DTYPES["int16"]
int32 = ALL_DTYPES["int32"]
int64 = ALL_DTYPES["int64"]
uint8 = ALL_DTYPES["uint8"]
uint16 = ALL_DTYPES["uint16"]
uint32 = ALL_DTYPES["uint32"]
uint64 = ALL_DTYPES["uint64"]
bool = ALL_DTYPES["bool"]  # noqa: A001 - the DSL's name
# Named only (sub-byte): comparable and usable as keys; an allocation, annotation or cast of one is refused.
int4, uint4, int2, uint2 = NAMED_ONLY["int4"], NAMED_ONLY["uint4"], NAMED_ONLY["int2"], NAMED_ONLY["uint2"]
int1, uint1, float4_e2m1fn = NAMED_ONLY["int1"], NAMED_ONLY["uint1"], NAMED_ONLY["float4_e2m1fn"]

__all__ = [
    "Tensor",
    "StridedTensor",
    "SharedBuffer",
    "FragmentBuffer",
    "LocalBuffer",
    "TensorAnnotation",
    "ptr",
    "const",
    "dynamic",
    "dtype",
    "DType",
    "prim_func",
    "macro",
    "Ref",
    "Kernel",
    "Pipelined",
    "Parallel",
    "Persistent",
    "serial",
    "unroll",
    "vectorized",
    "Serial",
    "Unroll",
    "Vectorized",
    "alloc_shared",
    "alloc_fragment",
    "alloc_local",
    "alloc_var",
    "alloc_global",
    "copy",
    "clear",
    "fill",
    "empty",
    "make_tensor",
    "gemm",
    "gemm_sp",
    "reduce_absmax",
    "reduce_max",
    "reduce_sum",
    "reduce_min",
    "cumsum",
    "atomic_add",
    "atomic_addx2",
    "atomic_addx4",
    "atomic_max",
    "atomic_min",
    "import_source",
    "call_extern",
    "call_pure_extern",
    "access_ptr",
    "if_then_else",
    "ceildiv",
    "max",
    "min",
    "exp",
    "exp2",
    "log",
    "log2",
    "rsqrt",
    "sqrt",
    "sigmoid",
    "tanh",
    "abs",
    "cast",
    "infinity",
    "sin",
    "cos",
    "erf",
    "log10",
    "floor",
    "ceil",
    "trunc",
    "round",
    "get_block_binding",
    "im2col",
    "reinterpret",
    "shift_left",
    "shift_right",
    "bitwise_and",
    "bitwise_or",
    "bitwise_xor",
    "bitwise_not",
    "clamp",
    "floordiv",
    "floormod",
    "Cast",
    "print",
    "device_assert",
    "assume",
    "breakpoint",
    "use_swizzle",
    "GemmWarpPolicy",
    "disable_warp_group_reg_alloc",
    "no_set_max_nreg",
    "set_max_nreg",
    "annotate_producer_reg_dealloc",
    "annotate_consumer_reg_alloc",
    "annotate_layout",
    "Layout",
    "Fragment",
    "ws",
    "get_thread_binding",
    "attr",
    "comm_reducer",
    "evaluate",
    "tvm_thread_allreduce",
    "tvm_warp_shuffle",
    "alloc_reducer",
    "finalize_reducer",
    "thread_binding",
    "wgmma_gemm",
    "wait_wgmma",
    "fence_proxy_async",
    "sync_grid",
    "sync_threads",
    "alloc_barrier",
    "mbarrier_arrive",
    "mbarrier_wait_parity",
    "barrier_arrive",
    "barrier_wait",
    "tma_copy",
    "float16",
    "bfloat16",
    "float32",
    "float64",
    "float8_e4m3fn",
    "float8_e5m2",
    "tfloat32",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "bool",
    "int4",
    "uint4",
    "int2",
    "uint2",
    "int1",
    "uint1",
    "float4_e2m1fn",
]


def __getattr__(name: str):
    """`T.alloc_fragmnet`: name the unknown attribute and suggest the closest
    of the language's public names."""
    if name.startswith("_"):  # dunder probes (pickle, IPython, inspect) get Python's own error
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    close = _difflib.get_close_matches(name, __all__, n=1)
    message = f"T.{name} is not part of the tile language"
    if close:
        message += f"; did you mean T.{close[0]}?"
    err = _UnknownNameError(message, hint=None if close else "the tile language's names are listed in "
                            "tile_nb.language.__all__ (help(T) describes each)")
    err.name = name
    raise err
