"""docs/IR.md's numeric contract, on the interpreter and (marked gpu) on CUDA, against torch: integer sums and
integer GEMM accumulators wrap around at their width, a NaN operand makes max / min NaN, and tensors of 2^31
elements or more are indexed in 64 bits (T.dynamic ones are refused at the call). The CPU tier also reads the
generated CUDA: the NaN-propagating max and the 64-bit index expressions."""
import re

import pytest
import torch

import tile_nb
import tile_nb.language as T
from tile_nb.errors import ArgumentError

BACKENDS = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]
REDUCE = {"sum": T.reduce_sum, "max": T.reduce_max, "min": T.reduce_min, "absmax": T.reduce_absmax}


def wrap(values: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Exact integers (int64) as `dtype` by two's complement wrap-around: the
    reference for integer results."""
    bits = torch.iinfo(dtype).bits
    low = values.remainder(2 ** bits)
    if dtype.is_signed:
        low = torch.where(low >= 2 ** (bits - 1), low - 2 ** bits, low)
    return low.to(dtype)


@tile_nb.jit
def row_reduce(X, Y, op: str = "sum", src: T.dtype = T.int32, dst: T.dtype = T.int32, scope: str = "fragment",
               block_M: int = 2, threads: int = 128):
    """Y[i] = op(X[i, :]) with the row in a fragment or in shared memory."""
    M, N = T.const('M, N')
    X: T.Tensor[[M, N], src]
    Y: T.Tensor[[M], dst]
    with T.Kernel(T.ceildiv(M, block_M), threads=threads) as bx:
        x = T.alloc_fragment((block_M, N), src) if scope == "fragment" else T.alloc_shared((block_M, N), src)
        y = T.alloc_fragment((block_M,), dst)
        T.copy(X[bx * block_M, 0], x)
        REDUCE[op](x, y, dim=1)
        T.copy(y, Y[bx * block_M])


@tile_nb.jit
def column_sum(X, Y, dtype: T.dtype = T.int32, block_M: int = 16, block_N: int = 32):
    """Y[j] = sum of X[:, j], accumulated tile by tile (clear=False) in a fragment of dtype."""
    M, N = T.const('M, N')
    X: T.Tensor[[M, N], dtype]
    Y: T.Tensor[[N], dtype]
    with T.Kernel(T.ceildiv(N, block_N), threads=128) as bx:
        x = T.alloc_shared((block_M, block_N), dtype)
        acc = T.alloc_fragment((block_N,), dtype)
        T.clear(acc)
        for k in T.serial(T.ceildiv(M, block_M)):
            T.copy(X[k * block_M, bx * block_N], x)
            T.reduce_sum(x, acc, dim=0, clear=False)
        T.copy(acc, Y[bx * block_N])


@tile_nb.jit
def pair_max_min(A, B, Hi, Lo, dtype: T.dtype = T.float32, block: int = 128):
    """Hi = T.max(A, B), Lo = T.min(A, B), elementwise from global memory."""
    N = T.const('N')
    A: T.Tensor[[N], dtype]
    B: T.Tensor[[N], dtype]
    Hi: T.Tensor[[N], dtype]
    Lo: T.Tensor[[N], dtype]
    with T.Kernel(T.ceildiv(N, block), threads=128) as bx:
        for i in T.Parallel(block):
            if bx * block + i < N:
                Hi[bx * block + i] = T.max(A[bx * block + i], B[bx * block + i])
                Lo[bx * block + i] = T.min(A[bx * block + i], B[bx * block + i])


@tile_nb.jit
def scalar_max_min(Out, x: T.float32):
    """Out = [T.max(x, 1), T.min(1, x)] of a runtime scalar, at block level."""
    Out: T.Tensor[[2], T.float32]
    with T.Kernel(1, threads=32):
        Out[0] = T.max(x, T.float32(1))
        Out[1] = T.min(T.float32(1), x)


@tile_nb.jit
def lcg(Seeds, Out, steps: int = 40):
    """Out[b] = the int32 linear congruential sequence from Seeds[b] after `steps` steps, at block level."""
    B = T.const('B')
    Seeds: T.Tensor[[B], T.int32]
    Out: T.Tensor[[B], T.int32]
    with T.Kernel(B, threads=32) as b:
        state = T.alloc_var(T.int32)
        state[0] = Seeds[b]
        for _ in T.serial(steps):
            state[0] = state[0] * 1103515245 + 12345
        Out[b] = state[0]


@tile_nb.jit
def scale_by_two(X, Y, block: int = 1024):
    """Y = 2 X over a 1-d fp16 tensor."""
    N = T.const('N')
    X: T.Tensor[[N], T.float16]
    Y: T.Tensor[[N], T.float16]
    with T.Kernel(T.ceildiv(N, block), threads=128) as bx:
        for i in T.Parallel(block):
            if bx * block + i < N:
                Y[bx * block + i] = X[bx * block + i] * T.float16(2)


def _ints(shape, lo, hi, seed=0, dtype=torch.int32):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(lo, hi, shape, generator=g, dtype=torch.int64).to(dtype)


def _with_nans(shape, dtype, seed=0):
    """randn * 3 with a NaN in about every seventh element, and a row that is all NaN and one with none."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g, dtype=torch.float64) * 3
    x[torch.rand(shape, generator=g) < 0.15] = float("nan")
    if len(shape) == 2 and shape[0] > 2:
        x[0] = float("nan")
        x[1] = torch.randn(shape[1], generator=g, dtype=torch.float64)
    return x.to(dtype)


def _same(got: torch.Tensor, expected: torch.Tensor):
    """Bitwise equal, NaN where the other is NaN."""
    got, expected = got.cpu(), expected.cpu()
    assert got.dtype == expected.dtype and got.shape == expected.shape
    nan_got, nan_exp = got.isnan(), expected.isnan()
    assert torch.equal(nan_got, nan_exp), f"NaN at {nan_got.nonzero().tolist()[:5]}, expected at " \
                                          f"{nan_exp.nonzero().tolist()[:5]}"
    assert torch.equal(got[~nan_got], expected[~nan_exp])


# ---- integer sums and GEMMs wrap around --------------------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
def test_four_times_2_30_sums_to_zero_in_int32(backend):
    """The issue's example: the int32 sum of 4 x 2^30 is 2^32, which wraps to 0 (torch:
    0; float64 then a cast: -2^31)."""
    X = torch.full((3, 4), 2 ** 30, dtype=torch.int32, device=backend)
    Y = torch.full((3,), -7, dtype=torch.int32, device=backend)
    row_reduce(X, Y)
    assert Y.cpu().tolist() == [0, 0, 0]
    assert X.sum(1, dtype=torch.int32).cpu().tolist() == [0, 0, 0]  # torch's own int32 sum agrees


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("scope", ["fragment", "shared"])
@pytest.mark.parametrize("shape,threads", [((37, 1000), 128), ((5, 1), 64), ((1, 4096), 256), ((64, 33), 32)])
def test_int32_row_sums_wrap_around(backend, scope, shape, threads):
    """Large int32 values, so nearly every row sum leaves int32; rows split over several warps included."""
    X = _ints(shape, -2 ** 31, 2 ** 31, seed=shape[1])
    Y = torch.full((shape[0],), -7, dtype=torch.int32)
    row_reduce(X.to(backend), Y := Y.to(backend), scope=scope, threads=threads)
    assert torch.equal(Y.cpu(), wrap(X.long().sum(1), torch.int32))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.int8, torch.int16, torch.uint8])
def test_narrow_integer_sums_wrap_at_their_width(backend, dtype):
    info = torch.iinfo(dtype)
    X = _ints((9, 300), info.min, info.max + 1, seed=3, dtype=dtype)
    Y = torch.zeros(9, dtype=dtype)
    name = str(dtype).removeprefix("torch.")
    row_reduce(X.to(backend), Y := Y.to(backend), src=name, dst=name)
    assert torch.equal(Y.cpu(), wrap(X.long().sum(1), dtype))


@pytest.mark.parametrize("backend", BACKENDS)
def test_sums_accumulated_over_tiles_wrap_around(backend):
    """clear=False across k-tiles: the running int32 sum wraps, and the old value joins in int32."""
    X = _ints((100, 70), 2 ** 28, 2 ** 30, seed=5)
    Y = torch.zeros(70, dtype=torch.int32)
    column_sum(X.to(backend), Y := Y.to(backend))
    assert torch.equal(Y.cpu(), wrap(X.long().sum(0), torch.int32))


@pytest.mark.parametrize("backend", BACKENDS)
def test_int8_gemm_accumulator_wraps_around_at_k_135168(backend):
    """The issue's example: int8 products summed over K = 135168 pass 2^31 in
    int32 (127 * 127 * 135168 > 2^31)."""
    from kernels.seed import gemm_int8

    M, N, K = 3, 5, 135168
    a = _ints((M, K), -128, -125, seed=7, dtype=torch.int8)
    b = _ints((N, K), -128, -125, seed=8, dtype=torch.int8)
    exact = a.long() @ b.long().T
    assert (exact > 2 ** 31 - 1).all()
    c = torch.full((M, N), -7, dtype=torch.int32)
    gemm_int8(
        a.to(backend),
        b.to(backend),
        c := c.to(backend),
        block_M=64,
        block_N=64,
        block_K=128,
        threads=128,
        num_stages=2,
    )
    assert torch.equal(c.cpu(), wrap(exact, torch.int32))


@pytest.mark.parametrize("backend", BACKENDS)
def test_block_level_int32_arithmetic_wraps_around(backend):
    seeds = torch.tensor([0, 1, -5, 2 ** 31 - 1, 123456789], dtype=torch.int32)
    out = torch.zeros_like(seeds)
    lcg(seeds.to(backend), out := out.to(backend))
    expected = seeds.long()
    for _ in range(40):
        expected = wrap(expected * 1103515245 + 12345, torch.int32).long()
    assert torch.equal(out.cpu(), expected.int())


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("op", ["max", "min"])
def test_uint32_max_and_min_compare_unsigned(backend, op):
    """uint32 values above 2^31 stay the largest (compared in int32 they would turn negative)."""
    X = _ints((5, 77), 0, 2 ** 32, seed=11, dtype=torch.int64)
    Y = torch.zeros(5, dtype=torch.uint32)
    row_reduce(X.to(torch.uint32).to(backend), Y := Y.to(backend), op=op, src="uint32", dst="uint32")
    assert torch.equal(Y.cpu().long(), X.amax(1) if op == "max" else X.amin(1))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("op", ["sum", "max", "min"])
def test_int64_rows_over_several_warps_keep_64_bits(backend, op):
    """int64 row reductions whose partials meet across warps in shared memory: the slots hold int64 (int32
    slots kept the low 32 bits of each warp's partial until 2026-12-07)."""
    X = _ints((4, 512), -2 ** 50, 2 ** 50, seed=5, dtype=torch.int64)
    Y = torch.zeros(4, dtype=torch.int64)
    row_reduce(X.to(backend), Y := Y.to(backend), op=op, src="int64", dst="int64", block_M=4, threads=256)
    ref = {"sum": X.sum(1), "max": X.amax(1), "min": X.amin(1)}[op]
    assert torch.equal(Y.cpu(), ref)


def test_int64_cross_warp_partials_are_int64_in_the_cuda_source():
    X, Y = torch.zeros(4, 512, dtype=torch.int64), torch.zeros(4, dtype=torch.int64)
    kernel = row_reduce.compile(X, Y, src="int64", dst="int64", block_M=4, threads=256, target="sm_90a")
    src = kernel.cuda_source
    body = src.split('extern "C" __global__')[-1]
    assert "((int64_t*)smem_pool_ptr)" in body and "((int*)smem_pool_ptr)" not in body


# ---- NaN propagates through max and min --------------------------------------------------------------------

FLOATS = ["float32", "float16", "bfloat16", "float64"]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("op", ["max", "min", "absmax"])
def test_max_and_min_reductions_propagate_nan(backend, dtype, op):
    tdtype = getattr(torch, dtype)
    X = _with_nans((37, 300), tdtype, seed=len(dtype))
    Y = torch.zeros(37, dtype=tdtype)
    row_reduce(X.to(backend), Y := Y.to(backend), op=op, src=dtype, dst=dtype, block_M=4)
    x = X.abs() if op == "absmax" else X
    _same(Y, x.amax(1) if op in ("max", "absmax") else x.amin(1))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("scope,shape,threads", [("fragment", (3, 4096), 256), ("shared", (6, 70), 64),
                                                 ("fragment", (1, 1), 32)])
def test_max_reduction_across_warps_propagates_nan(backend, scope, shape, threads):
    """A NaN in one warp's part of a row reaches the result through the cross-warp workspace."""
    X = torch.randn(shape)
    X[0, -1] = float("nan")
    Y = torch.zeros(shape[0])
    row_reduce(
        X.to(backend),
        Y := Y.to(backend),
        op="max",
        src="float32",
        dst="float32",
        scope=scope,
        block_M=1,
        threads=threads,
    )
    _same(Y, X.amax(1))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", FLOATS)
def test_elementwise_max_and_min_propagate_nan(backend, dtype):
    tdtype = getattr(torch, dtype)
    A, B = _with_nans((1001,), tdtype, seed=1), _with_nans((1001,), tdtype, seed=2)
    A[:4] = torch.tensor([float("nan"), 1.0, float("-inf"), float("nan")])
    B[:4] = torch.tensor([2.0, float("nan"), float("nan"), float("nan")])
    Hi, Lo = torch.zeros_like(A), torch.zeros_like(A)
    pair_max_min(A.to(backend), B.to(backend), Hi := Hi.to(backend), Lo := Lo.to(backend), dtype=dtype)
    _same(Hi, torch.maximum(A, B))
    _same(Lo, torch.minimum(A, B))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("x", [float("nan"), 3.0, -2.0])
def test_scalar_max_and_min_propagate_nan(backend, x):
    out = torch.zeros(2, device=backend)
    scalar_max_min(out, x)
    one, value = torch.tensor(1.0), torch.tensor(x)
    _same(out, torch.stack([torch.maximum(value, one), torch.minimum(one, value)]))


# ---- what the CUDA looks like (no GPU needed) --------------------------------------------------------------

def _body(kernel) -> str:
    src = kernel.cuda_source
    return src[src.index('extern "C" __global__'):]


@pytest.mark.parametrize("dtype,helper,instruction", [
    ("float32", "tnb_max_nan_float32", "max.NaN.f32"), ("float16", "tnb_max_nan_float16", "__hmax_nan"),
    ("bfloat16", "tnb_max_nan_bfloat16", "__hmax_nan")])
def test_cuda_max_propagates_nan(dtype, helper, instruction):
    """Reductions (which compare 16-bit floats in float32) and T.max / T.min call the NaN-propagating helpers;
    no float max(...) of TVM's (fmaxf drops a NaN) is left."""
    X = torch.empty(64, 1024, dtype=getattr(torch, dtype))
    reduce_kernel = row_reduce.compile(X, X[:, 0].contiguous(), op="max", src=dtype, dst=dtype, threads=256,
                                       target="sm_90a")
    A = torch.empty(1000, dtype=getattr(torch, dtype))
    pair_kernel = pair_max_min.compile(A, A, A, A, dtype=dtype, target="sm_90a")
    for kernel, name, code in ((reduce_kernel, "tnb_max_nan_float32", "max.NaN.f32"),
                               (pair_kernel, helper, instruction)):
        assert code in kernel.cuda_source
        body = _body(kernel)
        assert name + "(" in body
        assert not re.search(r"(?<![\w.])f?(max|min)\(", body), body
    assert "tnb_min_nan_" + dtype + "(" in _body(pair_kernel)


def test_softmax_sass_uses_nan_propagating_fmnmx():
    """Every FMNMX of the row softmax is the .NAN form: the same instruction count as fmaxf's FMNMX."""
    from tile_nb.backend import toolchain

    if not (toolchain.find_tool("cuobjdump") or toolchain.find_tool("nvdisasm")):
        pytest.skip("no cuobjdump or nvdisasm on PATH")
    from kernels import rowwise as rw

    X = torch.empty(64, 4096).half()
    kernel = rw.softmax.compile(X, X, threads=128, target="sm_90a")
    if kernel.sass is None:
        pytest.skip("nvcc built no cubin here")
    ops = re.findall(r"\b(FMNMX[.\w]*)", kernel.sass)
    assert ops and all(".NAN" in op for op in ops), ops


# ---- 64-bit indices ----------------------------------------------------------------------------------------

BIG_1D = 2 ** 31 + 3  # fp16: 4 GiB


def _index_dtypes(func, name) -> set:
    from tvm.tirx.buffer import is_buffer_var

    buf = next(p for p in func.params if is_buffer_var(p) and p.name == name)
    return {str(n.ty) for n in buf.shape}


def test_shapes_of_2_31_elements_get_int64_dims():
    assert _index_dtypes(scale_by_two.specialize(N=2 ** 31 - 1), "X") == {"int32"}
    assert _index_dtypes(scale_by_two.specialize(N=2 ** 31), "X") == {"int64"}
    from kernels import rowwise as rw

    assert _index_dtypes(rw.add_bias.specialize(M=2 ** 19, N=4095), "X") == {"int32"}
    assert _index_dtypes(rw.add_bias.specialize(M=2 ** 19, N=4096), "X") == {"int64"}
    assert _index_dtypes(rw.add_bias.specialize(M=2 ** 19, N=4096), "Bias") == {"int32"}


_INT64_INDEX = re.compile(r"X_ptr\[[^\]]*int64_t")


def test_cuda_of_a_2_31_plus_3_element_kernel_indexes_in_64_bits():
    """The elementwise kernel over [2^31 + 3] fp16 builds (it crashed inside TVM) with 64-bit offsets."""
    kernel = scale_by_two.compile(N=BIG_1D, target="sm_90a")
    body = _body(kernel)
    assert _INT64_INDEX.search(body), body
    assert re.search(r"<\s*\(int64_t\)2147483651", body), "the edge guard compares in 64 bits"


@pytest.mark.parametrize("fn,consts", [("add_bias", dict(M=2 ** 19 + 8, N=4096)),
                                       ("softmax", dict(M=2 ** 19 + 1, N=4096)),
                                       ("gelu_tanh", dict(M=2 ** 18 + 1, N=8192, block_M=2))])
def test_cuda_of_row_kernels_over_2_31_elements_indexes_in_64_bits(fn, consts):
    """Row kernels (vector copies into register fragments) over more than 2^31 elements: 64-bit global offsets
    (TVM stopped at 'Literal value 2147483648 exceeds range of int32'); shared memory stays 32-bit."""
    from kernels import rowwise as rw

    kernel = getattr(rw, fn).compile(**consts, target="sm_90a")
    body = _body(kernel)
    assert _INT64_INDEX.search(body) and re.search(r"Y_ptr\[[^\]]*int64_t", body), body


def test_kernels_below_2_31_elements_keep_32_bit_indices():
    """No cost where it is not needed: the same kernels at ordinary sizes compute no 64-bit offsets."""
    from kernels import rowwise as rw

    assert "int64_t" not in _body(rw.add_bias.compile(M=4096, N=4096, target="sm_90a"))
    assert "int64_t" not in _body(scale_by_two.compile(N=10 ** 6, target="sm_90a"))


def test_index_arithmetic_reaching_2_31_is_64_bit_below_2_31_elements():
    """2^31 - 1 elements: the last block's indices reach 2^31 + 998 with 1000-element blocks, so the guard and
    the offsets are 64-bit; with 1024-element blocks they end at 2^31 - 1 and stay
    32-bit (both crashed in TVM)."""
    body = _body(scale_by_two.compile(N=2 ** 31 - 1, block=1000, target="sm_90a"))
    assert _INT64_INDEX.search(body) and re.search(r"<\s*\(int64_t\)2147483647", body), body
    assert "int64_t" not in _body(scale_by_two.compile(N=2 ** 31 - 1, target="sm_90a"))


def test_gemm_with_an_operand_over_2_31_elements_compiles():
    from kernels.seed import gemm_ir

    from tile_nb.runtime import compile as rt_compile

    kernel = rt_compile(gemm_ir(2 ** 19 + 128, 256, 4096), "sm_90a", options={"cache": False})
    assert kernel.cuda_source


@tile_nb.jit
def dynamic_rows(X, block_M: int = 4):
    M = T.dynamic('M')
    N = T.const('N')
    X: T.Tensor[[M, N], T.int8]
    out = T.empty((M, N), T.int8)
    with T.Kernel(T.ceildiv(M, block_M), threads=128) as bx:
        for i, j in T.Parallel(block_M, N):
            if bx * block_M + i < M:
                out[bx * block_M + i, j] = X[bx * block_M + i, j] + 1
    return out


@tile_nb.jit
def dynamic_broadcast(X, block_M: int = 4, width: int = 4096):
    M = T.dynamic('M')
    X: T.Tensor[[M], T.int8]
    out = T.empty((M, width), T.int8)
    with T.Kernel(T.ceildiv(M, block_M), threads=128) as bx:
        for i, j in T.Parallel(block_M, width):
            if bx * block_M + i < M:
                out[bx * block_M + i, j] = X[bx * block_M + i]
    return out


def test_dynamic_dims_over_2_31_elements_are_refused_at_the_call():
    """T.dynamic dims are indexed in 32 bits: a call whose tensor spans 2^31 elements says so, with the
    numbers (the tensor is allocated but never touched)."""
    small = torch.arange(-3, 3, dtype=torch.int8).reshape(2, 3)
    assert torch.equal(dynamic_rows(small), small + 1)
    big = torch.empty((2 ** 19, 4096), dtype=torch.int8)  # exactly 2^31 elements: one too many
    with pytest.raises(ArgumentError) as info:
        dynamic_rows(big)
    err = info.value
    text = str(err)
    assert "argument 'X' has shape (524288, 4096) (2147483648 elements)" in text, text
    assert "T.dynamic dims (M)" in text and "2147483647" in text and "T.const" in text, text
    assert err.lineno is not None and "X: T.Tensor[[M, N], T.int8]" in text, text
    assert torch.equal(dynamic_rows(small), small + 1)  # the kernel still serves smaller calls


def test_dynamic_outputs_over_2_31_elements_are_refused_at_the_call():
    with pytest.raises(
        ArgumentError, match=r"output 'out' has shape \(524289, 4096\) \(2147487744 elements\)"
    ):
        dynamic_broadcast(torch.empty(2 ** 19 + 1, dtype=torch.int8))
    x = torch.arange(5, dtype=torch.int8)
    assert torch.equal(dynamic_broadcast(x, width=3), x[:, None].expand(5, 3))


@pytest.mark.gpu
def test_elementwise_kernel_over_2_31_plus_3_fp16_elements_on_the_gpu():
    """Needs about 9 GB of GPU memory: X and Y are 4 GiB each. Every element, the
    last three past 2^31 included."""
    X = torch.randn(BIG_1D, device="cuda", dtype=torch.float16)
    Y = torch.full_like(X, float("nan"))
    scale_by_two(X, Y)
    torch.cuda.synchronize()
    chunk = 2 ** 28
    for start in range(0, BIG_1D, chunk):
        assert torch.equal(Y[start:start + chunk], X[start:start + chunk] * 2), start
    assert torch.equal(Y[-3:], X[-3:] * 2)


@pytest.mark.gpu
def test_row_kernel_over_2_31_elements_on_the_gpu():
    """Needs about 9 GB of GPU memory: rows past 2^31 elements copied through register fragments with vector
    accesses (add_bias over [2^19 + 8, 4096] fp16)."""
    from kernels import rowwise as rw

    M, N = 2 ** 19 + 8, 4096
    X = torch.randn(M, N, device="cuda", dtype=torch.float16)
    bias = torch.randn(N, device="cuda", dtype=torch.float16)
    Y = torch.full_like(X, float("nan"))
    rw.add_bias(X, bias, Y)
    torch.cuda.synchronize()
    rows = 2 ** 16
    for start in range(0, M, rows):
        assert torch.equal(Y[start:start + rows], X[start:start + rows] + bias), start
