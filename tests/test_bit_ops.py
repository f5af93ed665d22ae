"""Bit manipulation in kernels (tilelang's dequantization helpers): `T.reinterpret`, shifts, bitwise ops, and
integer arithmetic of uint8 / uint16 / uint32 values, which wraps around to the dtype's width as on the GPU.
Interpreter against torch references written from the number formats (never from the kernel), at odd shapes,
sizes of 1 and dynamic dims, in T.Parallel loops and at block level (T.serial); the sm_90a / sm_80 CUDA
builds; the same kernels on the GPU (marked gpu). Also tilelang's TVM names (`tirx.PrimExpr`, `expr.dtype`)
while the tilelang mapping is installed, and the errors."""

import re

import pytest
import torch
from kernels.cuda import cuda_source

import tile_nb
import tile_nb.language as T
from tile_nb.backend import toolchain
from tile_nb.errors import AnnotationError, DSLError

needs_nvcc = pytest.mark.skipif(toolchain.find_tool("nvcc") is None, reason="needs nvcc to build cubins")
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


# ---- FP4 (e2m1) -> float16, the way tilelang's example_dequant_gemm_fp4_hopper decodes it ------------------

def _fp4_to_f16(val, pos):
    """Nibble `pos` of the uint8 `val`: sign 1, exponent 2, mantissa 1 bits, rebuilt as float16 bits (exponent
    re-biased by +14, mantissa moved to the top of float16's). (As in TVM, `x + 14` of a uint16 `x` is int32,
    while `x & 15` and `x >> 3` stay uint16: hence `T.uint16(14)`.)"""
    f4 = T.bitwise_and(T.shift_right(T.cast(val, T.uint16), T.cast(pos * 4, T.uint16)), 15)
    s = f4 >> 3
    e = ((f4 & 6) >> 1) + T.uint16(14)
    m = f4 & 1
    return T.reinterpret(T.float16, ((e | (s << 5)) << 10) | (m << 9))


@tile_nb.jit
def fp4_decode(B, C, block_N: int = 8, block_K: int = 16, parallel: bool = True):
    N, K2 = T.dynamic("N"), T.dynamic("K2")
    B: T.Tensor[[N, K2], T.uint8]
    C: T.Tensor[[N, K2, 2], T.float16]
    with T.Kernel(T.ceildiv(K2, block_K), T.ceildiv(N, block_N), threads=128) as (bx, by):
        if parallel:
            for i, j, p in T.Parallel(block_N, block_K, 2):
                r, c = by * block_N + i, bx * block_K + j
                if r < N and c < K2:
                    C[r, c, p] = _fp4_to_f16(B[r, c], p)
        else:
            for i in T.serial(block_N):
                for j in T.serial(block_K):
                    for p in T.serial(2):
                        r, c = by * block_N + i, bx * block_K + j
                        if r < N and c < K2:
                            C[r, c, p] = _fp4_to_f16(B[r, c], p)


def _fp4_reference(b: torch.Tensor) -> torch.Tensor:
    """Each nibble (low first) as (-1)^s * 2^(e - 1) * (1 + m / 2): the formula above, e = 0 included."""
    codes = torch.stack((b & 15, b >> 4), dim=-1).to(torch.int64)
    s, e, m = codes >> 3, (codes >> 1) & 3, codes & 1
    value = (1 - 2 * s).double() * torch.pow(2.0, (e - 1).double()) * (1 + m.double() / 2)
    return value.to(torch.float16)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("N,K2,parallel", [(37, 21, True), (1, 1, True), (5, 33, False), (1, 3, False)])
def test_fp4_decode_matches_the_format(device, N, K2, parallel):
    torch.manual_seed(N * 100 + K2)
    b = torch.randint(0, 256, (N, K2), dtype=torch.uint8, device=device)
    c = torch.zeros(N, K2, 2, dtype=torch.float16, device=device)
    fp4_decode(b, c, parallel=parallel)
    torch.testing.assert_close(c.cpu(), _fp4_reference(b.cpu()), rtol=0, atol=0)


# ---- signed int4 -> int8 (tilelang's w4a8 example): reinterpret, then an arithmetic right shift ------------

def _i4_to_i8(val, pos):
    i4 = (val >> T.cast(pos * 4, T.uint8)) & 15
    return T.reinterpret(T.int8, i4 << 4) >> 4


@tile_nb.jit
def int4_decode(B, C, block: int = 16):
    N = T.dynamic("N")
    B: T.Tensor[[N], T.uint8]
    C: T.Tensor[[N, 2], T.int8]
    with T.Kernel(T.ceildiv(N, block), threads=32) as bx:
        for i, p in T.Parallel(block, 2):
            if bx * block + i < N:
                C[bx * block + i, p] = _i4_to_i8(B[bx * block + i], p)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("N", [77, 1, 16])
def test_int4_sign_extension(device, N):
    torch.manual_seed(N)
    b = torch.randint(0, 256, (N,), dtype=torch.uint8, device=device)
    c = torch.zeros(N, 2, dtype=torch.int8, device=device)
    int4_decode(b, c)
    nibbles = torch.stack((b.cpu() & 15, b.cpu() >> 4), dim=-1).to(torch.int16)
    torch.testing.assert_close(c.cpu(), torch.where(nibbles >= 8, nibbles - 16, nibbles).to(torch.int8))


# ---- uint32 arithmetic: float32 -> bfloat16 with round-to-nearest-even written on the bits -----------------

def _f32_to_bf16(x):
    u = T.reinterpret(T.uint32, x)
    exponent = (u >> 23) & 0xFF
    rounded = u + (((u >> 16) & 1) + 0x7FFF)
    u = T.if_then_else(exponent == 0xFF, u, rounded)       # inf / NaN: truncated, not rounded
    return T.reinterpret(T.bfloat16, T.cast(u >> 16, T.uint16))


@tile_nb.jit
def to_bf16(X, Y, block: int = 32, parallel: bool = True):
    N = T.dynamic("N")
    X: T.Tensor[[N], T.float32]
    Y: T.Tensor[[N], T.bfloat16]
    with T.Kernel(T.ceildiv(N, block), threads=32) as bx:
        if parallel:
            for i in T.Parallel(block):
                if bx * block + i < N:
                    Y[bx * block + i] = _f32_to_bf16(X[bx * block + i])
        else:
            for i in T.serial(block):
                if bx * block + i < N:
                    Y[bx * block + i] = _f32_to_bf16(X[bx * block + i])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("N,parallel", [(1000, True), (1, True), (45, False), (1, False)])
def test_bf16_rounding_on_uint32_bits(device, N, parallel):
    torch.manual_seed(N)
    x = torch.randn(N, device=device) * torch.exp2(torch.randint(-20, 20, (N,), device=device).float())
    x[: min(N, 4)] = torch.tensor([1.00390625, 1.01171875, -3.0e38, float("inf")][: min(N, 4)], device=device)
    y = torch.zeros(N, dtype=torch.bfloat16, device=device)
    to_bf16(x, y, parallel=parallel)
    # torch rounds to even too
    torch.testing.assert_close(y.cpu(), x.cpu().to(torch.bfloat16), rtol=0, atol=0)


# ---- narrow unsigned arithmetic wraps around, in T.Parallel and at block level -----------------------------

@T.macro
def _wrap_row(A, Y, r):
    u = T.cast(A[r], T.uint16)
    Y[r, 0] = T.cast(u << 10, T.int32)
    Y[r, 1] = T.cast(u * T.uint16(40000) + T.uint16(7), T.int32)
    Y[r, 2] = T.shift_left(A[r], 28) >> 28                      # int32: sign-extends the low 4 bits


@tile_nb.jit
def u16_wrap(A, Y, block: int = 8, parallel: bool = True):
    N = T.dynamic("N")
    A: T.Tensor[[N], T.int32]
    Y: T.Tensor[[N, 3], T.int32]
    with T.Kernel(T.ceildiv(N, block), threads=32) as bx:
        if parallel:
            for i in T.Parallel(block):
                if bx * block + i < N:
                    _wrap_row(A, Y, bx * block + i)
        else:
            for i in T.serial(block):
                if bx * block + i < N:
                    _wrap_row(A, Y, bx * block + i)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("N,parallel", [(29, True), (1, True), (29, False), (1, False)])
def test_narrow_unsigned_arithmetic_wraps(device, N, parallel):
    torch.manual_seed(N + parallel)
    a = torch.randint(-2 ** 31, 2 ** 31 - 1, (N,), dtype=torch.int32, device=device)
    y = torch.zeros(N, 3, dtype=torch.int32, device=device)
    u16_wrap(a, y, parallel=parallel)
    u = a.cpu().to(torch.int64) & 0xFFFF
    low4 = a.cpu().to(torch.int64) & 15
    want = torch.stack(
        ((u << 10) & 0xFFFF, (u * 40000 + 7) & 0xFFFF, torch.where(low4 >= 8, low4 - 16, low4)), 1
    )
    torch.testing.assert_close(y.cpu(), want.to(torch.int32))


def _kernel_body(src: str) -> str:
    """The kernel's code with each access written as its buffer's name (a, b, y)."""
    return re.sub(r"([ABY])_ptr\[[^\]]*\]", lambda m: m.group(1).lower(), src.split('extern "C"')[-1])


@pytest.mark.parametrize("parallel", [True, False])
def test_cuda_wraps_uint16_arithmetic_before_widening(parallel):
    """C++ computes uint16 `u << 10` and `u * 40000` in int (no wrap at 16 bits: the H100 gave values up to
    2^31): the lowering computes them in uint32 and casts back to ushort before the int32 cast."""
    body = _kernel_body(cuda_source(u16_wrap.specialize(parallel=parallel)))
    assert "ushort u = ((ushort)a);" in body  # `u = T.cast(A[r], T.uint16)`: the value read once, as u
    u = "((uint)u)"
    assert f"((int)((ushort)({u} << (uint)10)))" in body
    assert f"((int)((ushort)(((uint)((ushort)({u} * (uint)40000))) + (uint)7)))" in body
    assert "<< (ushort)" not in body and "* (ushort)" not in body and "+ (ushort)" not in body


@pytest.mark.parametrize("parallel", [True, False])
def test_cuda_max_compares_the_wrapped_uint16_sum(parallel):
    """`T.max(a + 1, a >> 1)` of a = 65535: the sum wraps to 0 before max compares (the H100 compared
    65536)."""
    a = torch.empty(45, dtype=torch.uint16)
    body = _kernel_body(cuda_source(unsigned_ops.specialize(a, torch.empty(45, 2, dtype=a.dtype), dt="uint16",
                                                            parallel=parallel)))
    assert "max(((ushort)(((uint)a) + (uint)1)), (a >> (ushort)1))" in body
    assert "((ushort)(((uint)a) << (uint)3)) | (ushort)5)" in body


# ---- CUDA builds -------------------------------------------------------------------------------------------

@needs_nvcc
@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_bit_kernels_build(arch):
    b2, b1 = torch.empty(37, 21, dtype=torch.uint8), torch.empty(77, dtype=torch.uint8)
    k = fp4_decode.compile(b2, torch.empty(37, 21, 2, dtype=torch.float16), target=arch)
    assert k.cubin and ">>" in k.cuda_source and "<<" in k.cuda_source
    assert int4_decode.compile(b1, torch.empty(77, 2, dtype=torch.int8), target=arch).cubin
    x = torch.empty(1000)
    assert to_bf16.compile(x, torch.empty(1000, dtype=torch.bfloat16), target=arch).cubin
    assert to_bf16.compile(x, torch.empty(1000, dtype=torch.bfloat16), parallel=False, target=arch).cubin
    assert u16_wrap.compile(torch.empty(29, dtype=torch.int32), torch.empty(29, 3, dtype=torch.int32),
                            target=arch).cubin
    for dt in ("uint32", "uint16"):
        a = torch.empty(45, dtype=getattr(torch, dt))
        assert unsigned_ops.compile(a, torch.empty(45, 2, dtype=a.dtype), dt=dt, target=arch).cubin


# ---- errors at the user's line -----------------------------------------------------------------------------

def _kernel(src: str, name: str):
    return tile_nb.run_source(src, {"T": T, "tile_nb": tile_nb}, filename=f"<bits-{name}>")[name]


@pytest.mark.parametrize("body,message", [
    ("T.reinterpret(T.float32, A[i])", "same width; got float32 (32 bits) and a uint8 value (8 bits)"),
    ("T.reinterpret(T.float16, 3)", "value must be an expression with a dtype"),
    ("T.shift_left(T.cast(A[i], T.float32), 2)", "T.shift_left: a must be an integer; got a float32 value"),
])
def test_errors_name_the_argument(body, message):
    k = _kernel(f"""
@tile_nb.jit
def bad(A, B):
    A: T.Tensor[[8], T.uint8]
    B: T.Tensor[[8], T.float32]
    with T.Kernel(1, threads=32) as bx:
        for i in T.Parallel(8):
            B[i] = T.cast({body}, T.float32)
""", "bad")
    with pytest.raises(DSLError, match="line 8") as info:
        k(torch.zeros(8, dtype=torch.uint8), torch.zeros(8))
    assert message in str(info.value)


# ---- tilelang's TVM names ----------------------------------------------------------------------------------

def test_tilelang_tvm_names_only_while_the_mapping_is_installed():
    import tvm
    from tvm import tirx

    from tile_nb.tilelang import mapping, tvm_names

    assert not hasattr(tirx, "PrimExpr") and "dtype" not in tvm.ir.Expr.__dict__
    scalar, buffer = tirx.Var("j", "int32"), tirx.decl_buffer((4,), "uint8")
    try:
        mapping.install(shadow=True)
        assert tirx.PrimExpr is tvm.ir.Expr and tvm_names.installed()
        assert (scalar % 2).dtype == T.int32 and isinstance((scalar % 2).dtype, T.DType)
        assert buffer[1].dtype == "uint8" and (buffer[1] >> tirx.const(4, "uint8")).dtype == T.uint8
        # a scalar Var too; a buffer keeps TVM's
        assert scalar.dtype == "int32" and buffer.dtype == "uint8"
        assert tirx.reinterpret(T.float16, tirx.const(0x3C00, T.uint16)).dtype == T.float16
    finally:
        mapping.uninstall()
    assert not hasattr(tirx, "PrimExpr") and "dtype" not in tvm.ir.Expr.__dict__ and not tvm_names.installed()
    assert buffer.dtype == "uint8"
    with pytest.raises(AttributeError):
        scalar.dtype  # noqa: B018 - TVM 0.27's own behaviour is back


# ---- sub-byte dtypes other than T.int4 / T.uint4 are names only (those two: tests/test_int4.py) ------------

def test_sub_byte_dtypes_can_be_named_and_compared():
    # tilelang's lop3 helpers pick intrinsics this way
    table = {T.float16: "f16", T.int4: "i4", T.int8: "i8"}
    assert table[T.int4] == "i4" and T.int4 == "int4" and T.int4 != T.int8 and repr(T.uint4) == "T.uint4"
    assert T.float4_e2m1fn in [T.float16, T.float4_e2m1fn]


@pytest.mark.parametrize("line", [
    "s = T.alloc_shared((8,), T.int2)",
    "s = T.alloc_fragment((8,), T.float4_e2m1fn)",
    "s = T.Cast(T.int4, A[0])",
])
def test_sub_byte_buffers_and_values_are_refused_at_the_line(line):
    k = _kernel(f"""
@tile_nb.jit
def sub_byte(A):
    A: T.Tensor[[8], T.uint8]
    with T.Kernel(1, threads=32) as bx:
        {line}
""", "sub_byte")
    with pytest.raises(DSLError, match="line 6") as info:
        k(torch.zeros(8, dtype=torch.uint8))
    assert "tile_nb has no" in str(info.value) and "sub-byte dtype" in str(info.value)


def test_sub_byte_tensor_annotation_other_than_4_bit_is_refused():
    k = _kernel("""
@tile_nb.jit
def sub_byte_param(A):
    A: T.Tensor[[8], T.uint2]
    with T.Kernel(1, threads=32) as bx:
        pass
""", "sub_byte_param")
    with pytest.raises(AnnotationError, match="line 4") as info:
        k(torch.zeros(8, dtype=torch.uint8))
    assert "tile_nb has no uint2 values" in str(info.value)


# ---- uint16 / uint32 buffers: loads, wrapping arithmetic, max, shifts and stores ---------------------------

@tile_nb.jit
def unsigned_ops(A, B, dt: T.dtype = T.uint32, parallel: bool = True):
    N = T.dynamic("N")
    A: T.Tensor[[N], dt]
    B: T.Tensor[[N, 2], dt]
    with T.Kernel(T.ceildiv(N, 32), threads=32) as bx:
        if parallel:
            for i in T.Parallel(32):
                if bx * 32 + i < N:
                    B[bx * 32 + i, 0] = T.max(A[bx * 32 + i] + dt(1), A[bx * 32 + i] >> dt(1))
                    B[bx * 32 + i, 1] = (A[bx * 32 + i] << dt(3)) | dt(5)
        else:
            for i in T.serial(32):
                if bx * 32 + i < N:
                    B[bx * 32 + i, 0] = T.max(A[bx * 32 + i] + dt(1), A[bx * 32 + i] >> dt(1))
                    B[bx * 32 + i, 1] = (A[bx * 32 + i] << dt(3)) | dt(5)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dt,bits", [("uint32", 32), ("uint16", 16)])
@pytest.mark.parametrize("N,parallel", [(45, True), (1, True), (37, False)])
def test_unsigned_buffers(device, dt, bits, N, parallel):
    torch.manual_seed(N + bits)
    a64 = torch.randint(0, 2 ** bits, (N,), dtype=torch.int64)
    a64[0] = 2 ** bits - 1                                               # + 1 wraps to 0
    a = a64.to(getattr(torch, dt)).to(device)
    b = torch.zeros(N, 2, dtype=getattr(torch, dt), device=device)
    unsigned_ops(a, b, dt=dt, parallel=parallel)
    mask = 2 ** bits - 1
    want = torch.stack((torch.maximum((a64 + 1) & mask, a64 >> 1), ((a64 << 3) & mask) | 5), 1)
    torch.testing.assert_close(b.cpu().to(torch.int64), want)


def test_tilelang_tvm_names_wait_for_tvm_to_be_imported():
    """Installing the mapping does not import TVM (seconds per script run); the
    names arrive with `import tvm`."""
    import subprocess
    import sys

    code = """
import sys
from tile_nb.tilelang import mapping
mapping.install(shadow=True)
import tilelang
assert "tvm" not in sys.modules, "installing the mapping imported tvm"
from tvm import tirx
assert tirx.PrimExpr.__name__ == "Expr" and tirx.Var("j", "int32").dtype == "int32"
mapping.uninstall()
assert not hasattr(tirx, "PrimExpr")
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


# ---- an index held in a narrow integer (uint8 positions, as tilelang's 2:4 compressor keeps them) ----------

@tile_nb.jit
def gather_by_uint8(X, P):
    N = T.const("N")
    X: T.Tensor[[N], T.float32]
    P: T.Tensor[[N], T.uint8]
    Y = T.empty((N,), T.float32)
    with T.Kernel(1, threads=128) as _:
        p = T.alloc_fragment((N,), T.uint8)
        T.copy(P, p)
        for i in T.Parallel(N):
            Y[i] = X[p[i]]
    return Y


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("n", [1, 2, 200])
def test_uint8_values_index_as_positions_not_as_a_mask(device, n):
    """torch reads a uint8 index tensor as a mask; the interpreter's indices are positions whatever their
    dtype."""
    x = torch.randn(n)
    p = torch.randint(0, n, (n,), dtype=torch.uint8)
    y = gather_by_uint8(x.to(device), p.to(device)).cpu()
    assert torch.equal(y, x[p.long()])
