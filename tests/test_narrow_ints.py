"""8- and 16-bit integer arithmetic wraps to its dtype after each op, on the interpreter and on the GPU
(docs/IR.md, "Integers wrap around"). C++ promotes uint8 / uint16 / int8 / int16 operands to int, so the CUDA
lowering (lower/narrow.py) computes + - * // << (and ~ of unsigned ones) in 32 bits and casts back; each
result is read through a cast to int32, where an unwrapped value would show. Interpreter against a torch
reference written from two's complement (never from the kernel) at odd sizes, a size of 1 and a dynamic dim,
in T.Parallel and at block level; the CUDA source (the casts present, checked without a GPU); the sm_90a /
sm_80 builds; the GPU twins."""
import re

import pytest
import torch
from kernels.cuda import cuda_source

import tile_nb
import tile_nb.language as T
from tile_nb.backend import toolchain
from tile_nb.lower.errors import LoweringError

needs_nvcc = pytest.mark.skipif(toolchain.find_tool("nvcc") is None, reason="needs nvcc to build cubins")
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]
DTYPES = ["uint8", "uint16", "int8", "int16"]


@T.macro
def _ops_row(A, B, Y, r, dt):
    a, b = A[r], B[r]
    Y[r, 0] = T.cast(a + b, T.int32)
    Y[r, 1] = T.cast(a - b, T.int32)
    Y[r, 2] = T.cast(a * b, T.int32)
    Y[r, 3] = T.cast(a << (b & dt(7)), T.int32)
    Y[r, 4] = T.cast(~a, T.int32)
    Y[r, 5] = T.cast(a // (b | dt(1)), T.int32)                 # int8 -128 // -1 is 128: wraps to -128
    Y[r, 6] = T.cast(T.max(a + b, a - b), T.int32)               # compares the wrapped values
    Y[r, 7] = T.cast((a * b) >> dt(1), T.int32)                  # shifts the wrapped product
    Y[r, 8] = T.cast(a % (b | dt(1)), T.int32)                   # floor modulo: in range, left as it is


@tile_nb.jit
def narrow_ops(A, B, Y, dt: T.dtype = T.uint16, block: int = 16, parallel: bool = True):
    N = T.dynamic("N")
    A: T.Tensor[[N], dt]
    B: T.Tensor[[N], dt]
    Y: T.Tensor[[N, 9], T.int32]
    with T.Kernel(T.ceildiv(N, block), threads=32) as bx:
        if parallel:
            for i in T.Parallel(block):
                if bx * block + i < N:
                    _ops_row(A, B, Y, bx * block + i, dt)
        else:
            for i in T.serial(block):
                if bx * block + i < N:
                    _ops_row(A, B, Y, bx * block + i, dt)


def _two_complement(x: torch.Tensor, dt: str) -> torch.Tensor:
    """int64 `x` modulo 2^bits, in [-2^(bits-1), 2^(bits-1)) for a signed dtype, [0, 2^bits) otherwise."""
    info = torch.iinfo(getattr(torch, dt))
    span = info.max - info.min + 1
    return torch.remainder(x - info.min, span) + info.min


def _reference(a: torch.Tensor, b: torch.Tensor, dt: str) -> torch.Tensor:
    w = lambda x: _two_complement(x, dt)  # noqa: E731
    cols = (
        w(a + b), w(a - b), w(a * b), w(a << (b & 7)), w(-a - 1),
        w(torch.div(a, b | 1, rounding_mode="floor")), torch.maximum(w(a + b), w(a - b)), w(a * b) >> 1,
        torch.remainder(a, b | 1),
    )
    return torch.stack(cols, 1).to(torch.int32)


def _inputs(dt: str, n: int, seed: int):
    info = torch.iinfo(getattr(torch, dt))
    torch.manual_seed(seed)
    a = torch.randint(info.min, info.max + 1, (n,), dtype=torch.int64)
    b = torch.randint(info.min, info.max + 1, (n,), dtype=torch.int64)
    # the edges first: max + 1, min // -1 (or max * max), max * max
    edges = [(info.max, 1), (info.min, -1 if info.min else info.max), (info.max, info.max)]
    for row, (x, y) in enumerate(edges[:n]):
        a[row], b[row] = x, y
    return a, b


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("N,parallel", [(45, True), (1, True), (37, False), (1, False)])
def test_narrow_arithmetic_wraps_after_each_op(device, dt, N, parallel):
    a, b = _inputs(dt, N, seed=N + parallel)
    tdt = getattr(torch, dt)
    y = torch.zeros(N, 9, dtype=torch.int32, device=device)
    narrow_ops(a.to(tdt).to(device), b.to(tdt).to(device), y, dt=dt, parallel=parallel)
    torch.testing.assert_close(y.cpu(), _reference(a, b, dt), rtol=0, atol=0)


# ---- the CUDA source: the casts back to the narrow dtype are there (no GPU needed) -------------------------

_CTYPE = {"uint8": "uchar", "uint16": "ushort", "int8": "signed char", "int16": "short"}


def _body(src: str) -> str:
    """The kernel's code with each access written as its buffer's name (a, b, y)."""
    body = src.split('extern "C"')[-1]
    return re.sub(r"([ABY])_ptr\[[^\]]*\]", lambda m: m.group(1).lower(), body)


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("parallel", [True, False])
def test_cuda_computes_narrow_ops_in_32_bits_and_casts_back(dt, parallel):
    body = _body(cuda_source(narrow_ops.specialize(dt=dt, parallel=parallel)))
    c, unsigned = _CTYPE[dt], dt.startswith("u")
    w = "uint" if unsigned else "int"
    for op in "+-*":
        assert f"({c})((({w})a) {op} (({w})b))" in body, op
        assert f"a {op} b" not in body, op                      # no op left in C++'s promoted int
    assert f"({c})(((uint)a) << ((uint)(b & ({c})7)))" in body   # shifts in uint32: no signed-shift UB
    assert f"max((({c})((({w})a) + (({w})b))), (({c})((({w})a) - (({w})b))))" in body
    assert f"(({c})((({w})a) * (({w})b))) >> ({c})1)" in body
    if unsigned:
        assert f"({c})(~((uint)a))" in body and f"({c})(((uint)a) / ((uint)(b | ({c})1)))" in body
    else:  # ~ of a signed value stays in range; floor division in int32, cast back
        assert "((int)(~a))" in body and f"int rdiv = (((int)a) / ((int)(b | ({c})1)))" in body
        assert f"({c})(" in body.split("rdiv - 1")[0].rsplit("y =", 1)[-1]


def test_narrow_integer_vectors_are_refused_and_long_shifts_are_zero():
    from tvm import tirx

    from tile_nb.lower.narrow import wrap_narrow, wrap_narrow_not

    v = tirx.Broadcast(tirx.const(3, "uint16"), 4)
    with pytest.raises(LoweringError, match="uint16x4 vectors"):
        wrap_narrow(tirx.Add, v, v)
    with pytest.raises(LoweringError, match="int8x4 vectors"):
        wrap_narrow_not(tirx.Broadcast(tirx.const(3, "int8"), 4))
    # a constant left shift past 32 bits (undefined in C++) is the interpreter's 0
    x = tirx.Var("x", "uint16")
    assert str(wrap_narrow(tirx.LShift, x, tirx.const(40, "uint16"))) == "T.uint16(0)"
    f = tirx.Broadcast(tirx.const(3, "int32"), 4)
    assert str(wrap_narrow(tirx.Mul, f, f).ty) == "int32x4"     # 32-bit lanes need no wrap


@needs_nvcc
@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_narrow_ops_build(arch):
    for dt in DTYPES:
        a = torch.empty(45, dtype=getattr(torch, dt))
        assert narrow_ops.compile(a, a, torch.empty(45, 9, dtype=torch.int32), dt=dt, target=arch).cubin
