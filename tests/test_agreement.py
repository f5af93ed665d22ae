"""The interpreter and the GPU compute the same function, or the GPU path refuses the kernel with an error at
the user's line. One test per way they were found to differ (strided views, (M, 1) tiles, pipelined gathers,
negative starts, negative steps, mutable globals, budgets, argument checks, accumulation dtypes); each runs on
the interpreter against torch, and marked gpu, on CUDA against the interpreter."""
import pytest
import torch

import tile_nb
import tile_nb.language as T
from tile_nb import errors
from tile_nb.jit import CallFacts
from tile_nb.lower import LoweringError

BACKENDS = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


def rand(*shape, dtype=torch.float32, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def poisoned(*shape, dtype=torch.float32, device="cpu"):
    return torch.full(shape, float("nan"), dtype=dtype, device=device)


def cuda_source(fn, *args, **kwargs) -> str:
    return fn.compile(*args, target="sm_90a", **kwargs).cuda_source


# ---- strided views and unaligned pointers ------------------------------------------------------------------

@tile_nb.jit
def copy_through_shared(X, Y, block: int = 32):
    M, N, S0, S1 = T.const('M, N, S0, S1')
    X: T.StridedTensor[[M, N], [S0, S1], T.float16]
    Y: T.Tensor[[M, N], T.float16]
    with T.Kernel(T.ceildiv(M, block), T.ceildiv(N, block)) as (bx, by):
        tile = T.alloc_shared((block, block), T.float16)
        T.copy(X[bx * block, by * block], tile)
        T.copy(tile, Y[bx * block, by * block])


@pytest.mark.parametrize("backend", BACKENDS)
def test_transposed_view_is_read_through_its_strides(backend):
    base = rand(70, 64, dtype=torch.float16, seed=1).to(backend)
    X = base.t()  # shape (64, 70), strides (1, 64)
    Y = poisoned(64, 70, dtype=torch.float16, device=backend)
    copy_through_shared(X, Y)
    assert torch.equal(Y.cpu(), X.cpu())


def test_strided_source_gets_no_vector_copies():
    X = rand(70, 64, dtype=torch.float16).t()
    # A 16-byte cp.async would read 8 elements that are not adjacent in memory.
    assert "tnb_cp_async_16" not in cuda_source(copy_through_shared, X, torch.empty(64, 70).half())
    contiguous = rand(64, 64, dtype=torch.float16)
    assert "tnb_cp_async_16" in cuda_source(copy_through_shared, contiguous, torch.empty(64, 64).half())


@tile_nb.jit
def scale_rows(X, Y, block_M: int = 16, block_N: int = 64):
    M, N = T.const('M, N')
    X: T.Tensor[[M, N], T.float16]
    Y: T.Tensor[[M, N], T.float16]
    with T.Kernel(T.ceildiv(M, block_M), T.ceildiv(N, block_N)) as (bx, by):
        tile = T.alloc_shared((block_M, block_N), T.float16)
        T.copy(X[bx * block_M, by * block_N], tile)
        for i, j in T.Parallel(block_M, block_N):
            tile[i, j] = tile[i, j] * T.float16(2)
        T.copy(tile, Y[bx * block_M, by * block_N])


def test_unaligned_pointer_gets_its_own_kernel_without_vector_copies():
    X = rand(48, 64, dtype=torch.float16)
    spec = scale_rows._specialize((X, X), {})[1]
    assert spec.buffer_args == [(0, "X"), (1, "Y")]  # what a GPU call checks the alignment of
    aligned = scale_rows._compiled(spec, "sm_90a")
    unaligned = scale_rows._compiled(spec, "sm_90a", facts=CallFacts(unaligned=("X",)))
    assert aligned is not unaligned
    assert "tnb_cp_async_16" in aligned.cuda_source and "tnb_cp_async" not in unaligned.cuda_source


@pytest.mark.gpu
def test_unaligned_view_on_gpu():
    storage = rand(48 * 64 + 1, dtype=torch.float16, seed=2).cuda()
    X = storage[1:].view(48, 64)  # contiguous, data pointer 2 bytes past a 16-byte boundary
    assert X.data_ptr() % 16
    Y = poisoned(48, 64, dtype=torch.float16, device="cuda")
    scale_rows(X, Y)
    assert torch.equal(Y, X * 2)


# ---- (M, 1) tiles copy columns, not rows -------------------------------------------------------------------

@tile_nb.jit
def column_copy(X, Y, block_M: int = 8):
    M = T.const('M')
    X: T.Tensor[[M, 3], T.float32]
    Y: T.Tensor[[M, 1], T.float32]
    with T.Kernel(T.ceildiv(M, block_M)) as bx:
        col = T.alloc_fragment((block_M, 1), T.float32)
        T.copy(X[bx * block_M, 2], col)
        for i, j in T.Parallel(block_M, 1):
            col[i, j] = col[i, j] + 1.0
        T.copy(col, Y[bx * block_M, 0])


@pytest.mark.parametrize("backend", BACKENDS)
def test_trailing_unit_dim_tile_is_a_column(backend):
    X = rand(20, 3, seed=3).to(backend)
    Y = poisoned(20, 1, device=backend)
    column_copy(X, Y)
    assert torch.equal(Y.cpu(), X.cpu()[:, 2:3] + 1)


@pytest.mark.parametrize("backend", BACKENDS)
def test_reference_softmax_and_rmsnorm_at_n_1(backend):
    from kernels import reference as ref

    X = rand(10, 1, seed=4).to(backend)
    Y = poisoned(10, 1, device=backend)
    ref.softmax(X, Y)
    assert torch.equal(Y.cpu(), torch.ones(10, 1))
    X, W = (
        rand(7, 1, dtype=torch.float16, seed=5).to(backend),
        rand(1, dtype=torch.float16, seed=6).to(backend),
    )
    Y = poisoned(7, 1, dtype=torch.float16, device=backend)
    ref.rms_norm(X, W, Y)
    x = X.double().cpu()
    expected = x * torch.rsqrt(x * x + 1e-6) * W.double().cpu()
    torch.testing.assert_close(Y.double().cpu(), expected, rtol=2e-3, atol=2e-3)


# ---- a pipelined copy whose start the loop body computes ---------------------------------------------------

@tile_nb.jit
def gather_rows(A, Idx, Out, rows: int = 32):
    N, K, B = T.const('N, K, B')
    A: T.Tensor[[N, K], T.float16]
    Idx: T.Tensor[[B], T.int32]
    Out: T.Tensor[[B * rows, K], T.float16]
    with T.Kernel(1) as bx:
        row = T.alloc_var(T.int32)
        A_s = T.alloc_shared((rows, K), T.float16)
        for k in T.Pipelined(B, num_stages=3):
            row[0] = Idx[k]
            T.copy(A[row[0] * rows, 0], A_s)
            T.copy(A_s, Out[k * rows, 0])


@pytest.mark.parametrize("backend", BACKENDS)
def test_pipelined_gather_reads_the_index_of_its_own_iteration(backend):
    A = rand(8 * 32, 64, dtype=torch.float16, seed=7).to(backend)
    Idx = torch.tensor([5, 0, 7, 7, 2, 1], dtype=torch.int32, device=backend)
    Out = poisoned(6 * 32, 64, dtype=torch.float16, device=backend)
    gather_rows(A, Idx, Out)
    expected = A.cpu().view(8, 32, 64)[Idx.cpu().long()].reshape(6 * 32, 64)
    assert torch.equal(Out.cpu(), expected)


def test_pipelined_gather_keeps_the_copy_in_order():
    A, Idx = torch.empty(256, 64).half(), torch.zeros(6, dtype=torch.int32)
    kernel = gather_rows.compile(A, Idx, torch.empty(192, 64).half(), target="sm_90a")
    assert "A_s is copied in order: its start reads `row`, which the loop body writes" in kernel.lowered_ir


# ---- copies that start before the tensor -------------------------------------------------------------------

@tile_nb.jit
def shifted(X, Y, block: int = 128):
    N = T.const('N')
    X: T.Tensor[[N], T.float32]
    Y: T.Tensor[[N], T.float32]
    with T.Kernel(T.ceildiv(N, block)) as bx:
        t = T.alloc_shared((block,), T.float32)
        T.copy(X[bx * block - 1], t)  # t[i] = X[bx * block - 1 + i]; X[-1] reads as 0
        T.copy(t, Y[bx * block])


@pytest.mark.parametrize("backend", BACKENDS)
def test_negative_start_reads_zeros(backend):
    X = rand(300, seed=8).to(backend)
    Y = poisoned(300, device=backend)
    shifted(X, Y)
    expected = torch.cat([torch.zeros(1), X.cpu()[:-1]])
    assert torch.equal(Y.cpu(), expected)


def test_negative_start_is_guarded_in_the_cuda_source():
    kernel = shifted.compile(torch.empty(300), torch.empty(300), target="sm_90a")
    assert ">= 0 and" in kernel.lowered_ir  # the lower bound, next to the upper one


# ---- loops counting down -----------------------------------------------------------------------------------

@tile_nb.jit
def horner(X, Y):
    N = T.const('N')
    X: T.Tensor[[N], T.float32]
    Y: T.Tensor[[N], T.float32]
    with T.Kernel(1, threads=32) as bx:
        acc = T.alloc_var(T.float32, init=0.0)
        for i in range(N - 1, -1, -1):
            acc[0] = acc[0] * 0.5 + X[i]
            Y[i] = acc[0]
        for i in range(N - 1, -1, -3):   # every third element, from the top
            Y[i] = -Y[i]


@pytest.mark.parametrize("backend", BACKENDS)
def test_negative_range_steps(backend):
    X = rand(10, seed=9).to(backend)
    Y = poisoned(10, device=backend)
    horner(X, Y)
    expected, acc = torch.empty(10, dtype=torch.float64), 0.0
    for i in range(9, -1, -1):
        acc = acc * 0.5 + float(X[i])
        expected[i] = acc
    for i in range(9, -1, -3):
        expected[i] = -expected[i]
    torch.testing.assert_close(Y.double().cpu(), expected, rtol=1e-6, atol=1e-6)


def test_range_step_must_be_a_nonzero_int():
    @tile_nb.jit
    def bad(X):
        X: T.Tensor[[4], T.float32]
        with T.Kernel(1):
            for i in range(0, 4, 0):
                X[i] = 1.0

    with pytest.raises(errors.DSLError, match="step must be a nonzero compile-time int") as info:
        bad(torch.zeros(4))
    assert info.value.lineno is not None


# ---- globals the body reads are keyed by value -------------------------------------------------------------

SETTINGS = {"scale": 2.0}


@tile_nb.jit
def scaled(X, Y):
    N = T.const('N')
    X: T.Tensor[[N], T.float32]
    Y: T.Tensor[[N], T.float32]
    with T.Kernel(1) as bx:
        for i in T.Parallel(N):
            Y[i] = X[i] * SETTINGS["scale"]


def test_mutated_global_dict_rebuilds():
    X, Y = rand(8, seed=10), torch.zeros(8)
    try:
        scaled(X, Y)
        assert torch.equal(Y, X * 2)
        SETTINGS["scale"] = 3.0
        scaled(X, Y)
        assert torch.equal(Y, X * 3)
    finally:
        SETTINGS["scale"] = 2.0


# ---- resource budgets --------------------------------------------------------------------------------------

def test_shared_memory_budget_is_checked_at_compile_with_every_buffer():
    from kernels import reference as ref

    X = torch.empty(64, 8192).half()
    with pytest.raises(LoweringError) as info:
        ref.rms_norm.compile(X, torch.empty(8192).half(), X, block_M=4, target="sm_90a")
    message = str(info.value)
    assert "sm_90a allows 227.0 KiB" in message
    assert "x: local.fragment (4, 8192) float32 = 128.0 KiB" in message and "sq: " in message
    assert info.value.lineno is not None and "alloc_fragment" in info.value.source_line()



@tile_nb.jit
def row_softmax_of_wide_gemm(A, B, P):
    M, N, K = T.const('M, N, K')
    A: T.Tensor[[M, K], T.float16]
    B: T.Tensor[[N, K], T.float16]
    P: T.Tensor[[M, N], T.float32]
    with T.Kernel(T.ceildiv(M, 64), threads=128) as bx:
        A_s = T.alloc_shared((64, K), T.float16)
        B_s = T.alloc_shared((N, K), T.float16)
        scores = T.alloc_fragment((64, N), T.float32)
        row_max = T.alloc_fragment((64,), T.float32)
        T.copy(A[bx * 64, 0], A_s)
        T.copy(B[0, 0], B_s)
        T.clear(scores)
        T.gemm(A_s, B_s, scores, transpose_B=True)
        T.reduce_max(scores, row_max, dim=1)
        for i, j in T.Parallel(64, N):
            scores[i, j] = T.exp(scores[i, j] - row_max[i])
        T.copy(scores, P[bx * 64, 0])


def wide_gemm_inputs(m, n, k, device="cpu"):
    return (rand(m, k, seed=17).half().to(device), rand(n, k, seed=18).half().to(device),
            poisoned(m, n, device=device))


def test_fragments_over_the_register_budget_move_to_shared_memory():
    # scores alone takes 224 of a thread's registers, over the 215 it can spare: the row fragment moves to
    # shared memory (this looped forever when the T.Parallel loop kept giving row_max a register layout)
    plan = row_softmax_of_wide_gemm.compile(*wide_gemm_inputs(64, 448, 32), target="sm_90a").plan
    where = {f["name"]: (f["where"], f["layout"]) for f in plan["fragments"]}
    assert where["row_max"][0] == "shared memory" and "registers a thread can spare" in where["row_max"][1]
    assert plan["fragment_registers"] == 224


@pytest.mark.parametrize("backend", BACKENDS)
def test_row_fragment_in_shared_memory_computes_the_same(backend):
    A, B, P = wide_gemm_inputs(70, 448, 32, backend)
    row_softmax_of_wide_gemm(A, B, P)
    scores = A.cpu().double() @ B.cpu().double().T
    torch.testing.assert_close(P.cpu().double(), torch.exp(scores - scores.amax(1, keepdim=True)), rtol=2e-3,
                               atol=2e-3)


# ---- argument checks ---------------------------------------------------------------------------------------

@tile_nb.jit
def axpy(X, Y, alpha: T.float32, block: int = 64):
    N = T.dynamic('N')
    X: T.Tensor[[N], T.float32]
    Y: T.Tensor[[N * 2 + 1], T.float32]
    with T.Kernel(T.ceildiv(N, block)) as bx:
        for i in T.Parallel(block):
            if bx * block + i < N:
                Y[bx * block + i] = X[bx * block + i] * alpha


def _error(fn, *args, **kwargs):
    with pytest.raises(tile_nb.TileNBError) as info:
        fn(*args, **kwargs)
    return info.value


def test_argument_errors_name_the_parameter():
    X, Y = rand(5), torch.zeros(11)
    err = _error(axpy, X, Y, None)
    assert (
        "argument 'alpha' is a runtime scalar of dtype float32: it must be a float or an int; got NoneType"
        in str(err)
    )
    assert err.lineno is not None
    assert "got str '2'" in str(_error(axpy, X, Y, "2"))
    assert "got bool True" in str(_error(axpy, X, Y, True))
    err = _error(axpy, X, Y, 1.0, block=64.0)
    assert "compile-time argument 'block' must be an int; got float 64.0" in str(err)
    err = _error(axpy, X, Y, 1.0, X)
    assert "positional argument 4, which is the compile-time parameter 'block'" in str(err)
    err = _error(axpy, X, Y, 1.0, backend="cuda")
    assert "backend='cuda' but with tensors on cpu" in str(err)


def test_dynamic_dims_must_agree_between_tensors():
    err = _error(axpy, rand(5), torch.zeros(10), 1.0)
    assert isinstance(err, errors.ShapeMismatchError)
    assert "argument 'Y' must have N * 2 + 1 = 11 in dim 0; got shape (10,)" in str(err)
    assert "N from X.shape[0]" in err.hint and "Y: T.Tensor[[N * 2 + 1]" in err.source_line()
    Y = torch.zeros(11)
    axpy(rand(5), Y, 2.0)  # the right size passes


# ---- one accumulation rule ---------------------------------------------------------------------------------

@tile_nb.jit
def gemm_fp16_acc(A, B, C, block_K: int = 16):
    M, N, K = T.const('M, N, K')
    A: T.Tensor[[M, K], T.float16]
    B: T.Tensor[[K, N], T.float16]
    C: T.Tensor[[M, N], T.float16]
    with T.Kernel(1) as bx:
        A_s = T.alloc_shared((M, block_K), T.float16)
        B_s = T.alloc_shared((block_K, N), T.float16)
        acc = T.alloc_fragment((M, N), T.float16)
        T.clear(acc)
        for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=2):
            T.copy(A[0, k * block_K], A_s)
            T.copy(B[k * block_K, 0], B_s)
            T.gemm(A_s, B_s, acc)
        T.copy(acc, C)


def _fp16_accumulation_model(A, B, block_K):
    """docs/IR.md: each T.gemm accumulates in float32 and rounds its result to C's dtype."""
    acc = torch.zeros(A.shape[0], B.shape[1], dtype=torch.float16)
    for k in range(0, A.shape[1], block_K):
        acc = (acc.float() + A[:, k:k + block_K].float() @ B[k:k + block_K].float()).half()
    return acc


@pytest.mark.parametrize("backend", BACKENDS)
def test_fp16_accumulator_rounds_after_every_gemm(backend):
    A, B = rand(64, 128, dtype=torch.float16, seed=11), rand(128, 64, dtype=torch.float16, seed=12)
    C = poisoned(64, 64, dtype=torch.float16, device=backend)
    gemm_fp16_acc(A.to(backend), B.to(backend), C)
    model = _fp16_accumulation_model(A, B, 16)
    # Within one T.gemm the GPU's float32 sums run in another order: one fp16 rounding step apart at most.
    torch.testing.assert_close(C.cpu().float(), model.float(), rtol=1e-3, atol=1e-2)
    full_precision = (A.float() @ B.float()).half()
    assert not torch.equal(model, full_precision)  # the rule is observable at this size


@tile_nb.jit
def row_sums_fp16(X, Y):
    M, N = T.const('M, N')
    X: T.Tensor[[M, N], T.float16]
    Y: T.Tensor[[M], T.float16]
    with T.Kernel(1) as bx:
        x = T.alloc_fragment((M, N), T.float16)
        s = T.alloc_fragment((M,), T.float16)
        T.copy(X, x)
        T.reduce_sum(x, s, dim=1)
        T.copy(s, Y)


@pytest.mark.parametrize("backend", BACKENDS)
def test_fp16_sums_accumulate_in_float32(backend):
    X = (rand(4, 2000, seed=13) + 1.0).half().to(backend)
    Y = poisoned(4, dtype=torch.float16, device=backend)
    row_sums_fp16(X, Y)
    expected = X.cpu().float().sum(dim=1).half()
    # fp16 running sums of ~2000 values near 1 would lose whole units; float32 sums round once.
    torch.testing.assert_close(Y.cpu().float(), expected.float(), rtol=1e-3, atol=0)


# ---- lowering errors point at the user's line --------------------------------------------------------------

def test_lowering_error_points_at_the_tile_op():
    @tile_nb.jit
    def int_gemm(A, B, C):
        A: T.Tensor[[16, 16], T.int8]
        B: T.Tensor[[16, 16], T.int8]
        C: T.Tensor[[16, 16], T.int32]
        with T.Kernel(1) as bx:
            a = T.alloc_shared((16, 16), T.int8)
            b = T.alloc_shared((16, 16), T.int8)
            c = T.alloc_fragment((16, 16), T.int32)
            T.copy(A, a)
            T.copy(B, b)
            T.gemm(a, b, c, clear_accum=True)
            T.copy(c, C)

    args = (torch.ones(16, 16, dtype=torch.int8), torch.ones(16, 16, dtype=torch.int8),
            torch.zeros(16, 16, dtype=torch.int32))
    with pytest.raises(tile_nb.lower.LoweringError) as info:
        int_gemm.compile(*args, target="sm_80")
    assert "T.gemm(a, b, c, clear_accum=True)" in info.value.source_line()
    with pytest.warns(tile_nb.NotLowerableWarning, match="T.gemm"):
        int_gemm(*args)
    assert torch.equal(args[2], torch.full((16, 16), 16, dtype=torch.int32))


# ---- boolean logic on IR values ----------------------------------------------------------------------------

@tile_nb.jit
def logic(X, Y):
    X: T.Tensor[[6, 6], T.float32]
    Y: T.Tensor[[6, 6], T.float32]
    with T.Kernel(1) as bx:
        for i, j in T.Parallel(6, 6):
            a = X[i, j] if i == 0 else -X[i, j]          # x if c else y on an IR condition
            b = T.if_then_else(i == 0 and j < 2, 10.0, 0.0)   # `and` with an IR `==` (was: `j < 2` dropped)
            Y[i, j] = a + b
            if not (i == 1) or 2 < j <= 4:               # `not`, `or`, a chained comparison
                Y[i, j] = a + b + 100.0


@pytest.mark.parametrize("backend", BACKENDS)
def test_boolean_logic_on_ir_values(backend):
    X = rand(6, 6, seed=14).to(backend)
    Y = poisoned(6, 6, device=backend)
    logic(X, Y)
    expected = torch.empty(6, 6)
    x = X.cpu()
    for i in range(6):
        for j in range(6):
            a = x[i, j] if i == 0 else -x[i, j]
            if i == 0 and j < 2:
                a = a + 10.0
            if not (i == 1) or 2 < j <= 4:
                a = a + 100.0
            expected[i, j] = a
    torch.testing.assert_close(Y.cpu(), expected)


def test_rebinding_a_python_name_under_a_runtime_if_is_refused():
    @tile_nb.jit
    def clamp(X, Y):
        X: T.Tensor[[8], T.float32]
        Y: T.Tensor[[8], T.float32]
        with T.Kernel(1) as bx:
            for i in T.Parallel(8):
                x = X[i]
                if x < 0.0:
                    x = 0.0  # error: would hold for every element
                Y[i] = x

    with pytest.raises(errors.DSLError, match="`x` is assigned under an `if` on a run-time value") as info:
        clamp(rand(8), torch.zeros(8))
    assert "if x < 0.0:" in info.value.source_line() and "T.if_then_else" in info.value.hint


# ---- casts between the two 16-bit float types --------------------------------------------------------------

@tile_nb.jit
def half_bf16_round_trip(X, Y, Z):
    N = T.const('N')
    X: T.Tensor[[N], T.float16]
    Y: T.Tensor[[N], T.bfloat16]
    Z: T.Tensor[[N], T.float16]
    with T.Kernel(1, threads=64) as bx:
        for i in T.Parallel(N):
            Y[i] = T.cast(X[i], T.bfloat16)
            Z[i] = T.cast(T.cast(X[i], T.bfloat16), T.float16)


@pytest.mark.parametrize("backend", BACKENDS)
def test_float16_bfloat16_casts_convert_values(backend):
    X = (rand(64, seed=15) * 100).half().to(backend)
    Y = torch.zeros(64, dtype=torch.bfloat16, device=backend)
    Z = torch.zeros(64, dtype=torch.float16, device=backend)
    half_bf16_round_trip(X, Y, Z)
    assert torch.equal(Y.cpu(), X.cpu().to(torch.bfloat16))
    assert torch.equal(Z.cpu(), X.cpu().to(torch.bfloat16).to(torch.float16))


def test_float16_bfloat16_casts_go_through_float32_in_cuda():
    X = torch.zeros(64).half()
    src = half_bf16_round_trip.compile(X, X.bfloat16(), X, target="sm_90a").cuda_source
    assert "((nv_bfloat16)((float)" in src  # CUDA would convert half -> nv_bfloat16 by its bits


# ---- T.Parallel over T.dynamic extents ---------------------------------------------------------------------

@tile_nb.jit
def scale_dynamic(X, Y):
    M, N = T.dynamic('M'), T.dynamic('N')
    X: T.Tensor[[M, N], T.float32]
    Y: T.Tensor[[M, N], T.float32]
    with T.Kernel(1, threads=128) as bx:
        for i, j in T.Parallel(M, N):
            Y[i, j] = X[i, j] * 3.0 + 1.0


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", [(5, 7), (1, 1), (33, 129)])
def test_parallel_over_dynamic_extents(backend, shape):
    X = rand(*shape, seed=16).to(backend)
    Y = poisoned(*shape, device=backend)
    scale_dynamic(X, Y)
    torch.testing.assert_close(Y.cpu(), X.cpu() * 3.0 + 1.0)
