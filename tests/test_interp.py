"""CPU interpreter: every construct of the tile IR against a float64 torch reference, on random inputs."""
import pytest
import torch
from kernels.ir_builder import (
    alloc,
    atomic_sum_kernel,
    ceildiv,
    elementwise_kernel,
    f32,
    gemm_kernel,
    kernel,
    randn,
    reduce_kernel,
    rmsnorm_kernel,
    softmax_kernel,
    store,
)
from tvm import tirx
from tvm.script.ir_builder import tirx as T
from tvm.tirx.script import tile as Tx

from tile_nb import interp


def close(out, ref, dtype=torch.float32, scale=1.0):
    tol = {torch.float16: 2e-2, torch.bfloat16: 5e-2, torch.float32: 1e-4, torch.float64: 1e-10}[dtype]
    torch.testing.assert_close(out.double(), ref.double(), rtol=tol, atol=tol * scale)


# ---- GEMM --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("M,N,K,tiles", [
    (256, 128, 64, (128, 128, 32)),
    (1000, 1030, 999, (128, 128, 32)),     # nothing is a multiple of the tiles
    (70, 33, 45, (32, 32, 16)),
    (1, 1, 1, (16, 16, 16)),
])
def test_gemm_matches_torch(M, N, K, tiles):
    bm, bn, bk = tiles
    A, B = randn(M, K, dtype=torch.float16, seed=1), randn(K, N, dtype=torch.float16, seed=2)
    C = torch.full((M, N), float("nan"))
    interp.run(gemm_kernel(M, N, K, bm, bn, bk), [A, B, C])
    close(C, A.double() @ B.double(), scale=K ** 0.5)


@pytest.mark.parametrize("trans_a,trans_b", [(True, False), (False, True), (True, True)])
def test_gemm_transposes(trans_a, trans_b):
    M, N, K = 96, 80, 72
    A = randn(*((K, M) if trans_a else (M, K)), dtype=torch.float16, seed=3)
    B = randn(*((N, K) if trans_b else (K, N)), dtype=torch.float16, seed=4)
    C = torch.zeros(M, N)
    interp.run(gemm_kernel(M, N, K, 64, 64, 32, trans_a=trans_a, trans_b=trans_b), [A, B, C])
    a = A.double().T if trans_a else A.double()
    b = B.double().T if trans_b else B.double()
    close(C, a @ b, scale=K ** 0.5)


def test_gemm_fp16_output_accumulates_in_fp32_then_rounds():
    M, N, K = 64, 64, 256
    A, B = randn(M, K, dtype=torch.float16, seed=5), randn(K, N, dtype=torch.float16, seed=6)
    C = torch.zeros(M, N, dtype=torch.float16)
    interp.run(gemm_kernel(M, N, K, 64, 64, 32, out_dtype="float16", accum_dtype="float16"), [A, B, C])
    close(C, A.double() @ B.double(), dtype=torch.float16, scale=K ** 0.5)


def test_gemm_clear_accum_keeps_only_the_last_k_tile():
    M, N, K = 32, 32, 64
    A, B = randn(M, K, seed=7), randn(K, N, seed=8)
    C = torch.zeros(M, N)
    func = gemm_kernel(M, N, K, 32, 32, 32, in_dtype="float32", clear_accum=True)
    interp.run(func, [A, B, C])
    close(C, A[:, 32:].double() @ B[32:].double(), scale=4)


def test_gemm_int8_accumulates_exactly_in_int32():
    M, N, K = 48, 40, 300
    g = torch.Generator().manual_seed(9)
    A = torch.randint(-128, 128, (M, K), generator=g, dtype=torch.int8)
    B = torch.randint(-128, 128, (K, N), generator=g, dtype=torch.int8)
    C = torch.zeros(M, N, dtype=torch.int32)
    interp.run(gemm_kernel(M, N, K, 32, 32, 64, in_dtype="int8", out_dtype="int32", accum_dtype="int32"),
               [A, B, C])
    assert torch.equal(C, (A.long() @ B.long()).int())


# ---- elementwise, softmax, RMSNorm, reductions, atomics ----------------------------------------------------

@pytest.mark.parametrize("M,N", [(64, 128), (100, 70), (1, 3)])
def test_elementwise_with_row_guard_and_scalar_param(M, N):
    A, B = randn(M, N, seed=10), randn(M, N, seed=11)
    C = torch.zeros(M, N)
    interp.run(elementwise_kernel(M, N), [A, B, C, 0.5])
    close(C, torch.sigmoid(A.double()) * 0.5 + B.double())


@pytest.mark.parametrize("M,N", [(16, 256), (37, 200), (5, 1)])
def test_softmax(M, N):
    A = randn(M, N, seed=12, scale=3.0)
    Out = torch.zeros(M, N)
    interp.run(softmax_kernel(M, N), [A, Out])
    close(Out, torch.softmax(A.double(), dim=1))


@pytest.mark.parametrize("M,N", [(8, 128), (13, 100)])
def test_rmsnorm_fp16(M, N):
    A, W = randn(M, N, dtype=torch.float16, seed=13), randn(N, dtype=torch.float16, seed=14)
    Out = torch.zeros(M, N, dtype=torch.float16)
    interp.run(rmsnorm_kernel(M, N), [A, W, Out])
    a = A.double()
    close(Out, a * torch.rsqrt(a.pow(2).mean(1, keepdim=True) + 1e-6) * W.double(), dtype=torch.float16)


@pytest.mark.parametrize("kind", ["sum", "max", "min"])
@pytest.mark.parametrize("dim", [0, 1])
@pytest.mark.parametrize("M,N", [(64, 96), (45, 77)])
def test_reductions_accumulate_across_tiles(kind, dim, M, N):
    A = randn(M, N, seed=15)
    Out = torch.zeros(N if dim == 0 else M)
    interp.run(reduce_kernel(M, N, kind, dim), [A, Out])
    ref = {"sum": lambda x: x.sum(dim), "max": lambda x: x.amax(dim), "min": lambda x: x.amin(dim)}[kind](
        A.double()
    )
    close(Out, ref, scale=10)


@pytest.mark.parametrize("M,N", [(64, 24), (50, 7)])
def test_atomic_add_from_every_block(M, N):
    A = randn(M, N, seed=16)
    Out = torch.ones(N)
    interp.run(atomic_sum_kernel(M, N), [A, Out])
    close(Out, 1 + A.double().sum(0))


# ---- block-level scalars, loops and per-thread buffers -----------------------------------------------------

def test_local_var_accumulator_in_serial_and_unrolled_loops():
    M, K = 6, 10
    with kernel("rowsum", [("A", (M, K), "float32"), ("Out", (M, 2), "float32")], M) as (k, (bx,)):
        A, Out = k["A"], k["Out"]
        acc = alloc("acc", (1,), "float32", "local.var")
        sq = alloc("sq", (2,), "float32", "local")
        store(acc, f32(0), [0])
        store(sq, f32(0), [1])
        with T.serial(0, K) as j:
            store(acc, acc[0] + A[bx, j], [0])
        with T.unroll(0, K) as j:
            store(sq, sq[1] + A[bx, j] * A[bx, j], [1])
        store(Out, acc[0], [bx, 0])
        store(Out, sq[1], [bx, 1])
    A = randn(M, K, seed=17)
    Out = torch.zeros(M, 2)
    interp.run(k.func, [A, Out])
    close(Out, torch.stack([A.double().sum(1), A.double().pow(2).sum(1)], 1))


def test_local_buffer_written_inside_parallel_loop_is_per_iteration():
    N = 40
    with kernel("per_thread", [("X", (N,), "float32"), ("Y", (N,), "float32")], 1) as (k, _):
        X, Y = k["X"], k["Y"]
        tmp = alloc("tmp", (1,), "float32", "local.var")
        with T.parallel(0, N) as i:
            store(tmp, X[i] * f32(2), [0])
            with T.If(i % 2 == 0):
                with T.Then():
                    store(tmp, tmp[0] + f32(1), [0])
            store(Y, tmp[0], [i])
    X = randn(N, seed=18)
    Y = torch.zeros(N)
    interp.run(k.func, [X, Y])
    close(Y, X.double() * 2 + (torch.arange(N) % 2 == 0).double())


def test_serial_loop_inside_parallel_loop_and_else_branch():
    M, K = 20, 9
    with kernel("rows", [("A", (M, K), "float32"), ("Out", (M,), "float32")], 1) as (k, _):
        A, Out = k["A"], k["Out"]
        s = alloc("s", (M,), "float32", "local.fragment")
        with T.parallel(0, M) as i:
            store(s, f32(0), [i])
            with T.serial(0, K) as j:
                store(s, s[i] + A[i, j], [i])
            with T.If(i < 7):
                with T.Then():
                    store(Out, s[i], [i])
                with T.Else():
                    store(Out, -s[i], [i])
    A = randn(M, K, seed=19)
    Out = torch.zeros(M)
    interp.run(k.func, [A, Out])
    ref = A.double().sum(1)
    ref[7:] *= -1
    close(Out, ref)


def test_ragged_serial_loop_bound_by_parallel_var():
    N = 12
    with kernel("triangle", [("A", (N, N), "float32"), ("Out", (N,), "float32")], 1) as (k, _):
        A, Out = k["A"], k["Out"]
        with T.parallel(0, N) as i:
            store(Out, f32(0), [i])
            with T.serial(0, i + 1) as j:
                store(Out, Out[i] + A[i, j], [i])
    A = randn(N, N, seed=20)
    Out = torch.zeros(N)
    interp.run(k.func, [A, Out])
    close(Out, torch.tril(A.double()).sum(1))


@pytest.mark.parametrize("name,fn,ref", [
    ("exp", tirx.exp, torch.exp), ("exp2", tirx.exp2, torch.exp2), ("log", tirx.log, torch.log),
    ("log2", tirx.log2, torch.log2), ("rsqrt", tirx.rsqrt, torch.rsqrt), ("sqrt", tirx.sqrt, torch.sqrt),
    ("sigmoid", tirx.sigmoid, torch.sigmoid), ("tanh", tirx.tanh, torch.tanh),
    ("max", lambda x: tirx.max(x, f32(1.0)), lambda x: x.clamp(min=1.0)),
    ("min", lambda x: tirx.min(x, f32(1.0)), lambda x: x.clamp(max=1.0)),
    ("cast", lambda x: tirx.Cast("float32", tirx.Cast("int32", x * f32(3))), lambda x: torch.trunc(x * 3)),
    ("if_then_else", lambda x: tirx.if_then_else(x > f32(1), x, -x), lambda x: torch.where(x > 1, x, -x)),
])
@pytest.mark.parametrize("vectorized", [True, False])
def test_math_intrinsics(name, fn, ref, vectorized):
    N = 16
    with kernel(name, [("X", (N,), "float32"), ("Y", (N,), "float32")], 1 if vectorized else N) as (k, (bx,)):
        X, Y = k["X"], k["Y"]
        if vectorized:
            with T.parallel(0, N) as i:
                store(Y, fn(X[i]), [i])
        else:
            store(Y, fn(X[bx]), [bx])  # block-level scalar code: one element per block
    X = randn(N, seed=21).abs() + 0.1
    Y = torch.zeros(N)
    interp.run(k.func, [X, Y])
    close(Y, ref(X.double()).to(torch.float32))


def test_max_value_min_value_and_infinity():
    with kernel("limits", [("Y", (4,), "float32")], 1) as (k, _):
        Y = k["Y"]
        store(Y, tirx.max_value("float32"), [0])
        store(Y, tirx.min_value("float32"), [1])
        store(Y, tirx.infinity("float32"), [2])
        store(Y, -tirx.infinity("float32"), [3])
    Y = torch.zeros(4)
    interp.run(k.func, [Y])
    fmax = torch.finfo(torch.float32).max
    assert Y.tolist() == [fmax, -fmax, float("inf"), float("-inf")]


def test_integer_division_semantics():
    vals = [7, -7, 0, 13, -1, 5]
    with kernel("divs", [("X", (6,), "int32"), ("Y", (6, 4), "int32")], 1) as (k, _):
        X, Y = k["X"], k["Y"]
        with T.parallel(0, 6) as i:
            store(Y, tirx.floordiv(X[i], 3), [i, 0])
            store(Y, tirx.floormod(X[i], 3), [i, 1])
            store(Y, tirx.truncdiv(X[i], 3), [i, 2])
            store(Y, tirx.truncmod(X[i], 3), [i, 3])
        with T.serial(0, 6) as i:  # the same at block level, on Python ints
            with T.If(X[i] < -100):
                with T.Then():
                    store(Y, tirx.floordiv(X[i], 3), [i, 0])
    X = torch.tensor(vals, dtype=torch.int32)
    Y = torch.zeros(6, 4, dtype=torch.int32)
    interp.run(k.func, [X, Y])
    x = torch.tensor(vals)
    ref = torch.stack([torch.div(x, 3, rounding_mode="floor"), torch.remainder(x, 3),
                       torch.div(x, 3, rounding_mode="trunc"), torch.fmod(x, 3)], 1)
    assert torch.equal(Y.long(), ref)


# ---- shapes: dynamic dims, strides, staged shared buffers, unit dims ---------------------------------------

def test_dynamic_dim_bound_from_tensor_and_strided_buffer():
    from tvm.script.ir_builder import IRBuilder
    with IRBuilder() as ib:
        with T.prim_func():
            T.func_name("scale")
            a = T.arg("A", T.handle())
            x = T.arg("x", T.float32())
            n = T.int32()
            IRBuilder.name("N", n)
            s0 = T.int32()
            IRBuilder.name("s0", s0)
            A = T.match_buffer(a, (n, 64), "float32", strides=(s0, 1))
            IRBuilder.name("A", A)
            with (
                T.launch_thread("blockIdx.x", tirx.ceildiv(n, 16)) as bx,
                T.launch_thread("threadIdx.x", 128),
            ):
                S = alloc("S", (16, 64), "float32", "shared.dyn")
                Tx.copy(S[0:16, 0:64], A[bx * 16:bx * 16 + 16, 0:64])
                with T.parallel(0, 16) as i:
                    with T.parallel(0, 64) as j:
                        store(S, S[i, j] * x + tirx.Cast("float32", j), (i, j))
                Tx.copy(A[bx * 16:bx * 16 + 16, 0:64], S[0:16, 0:64])
    func = ib.get()
    for rows in (50, 16, 3):
        base = randn(rows, 80, seed=22)
        A = base[:, 8:72]                      # strided view: stride (80, 1)
        ref = A.double() * 2 + torch.arange(64).double()
        interp.run(func, [A, 2.0])
        close(A, ref)
        assert torch.equal(base[:, :8], randn(rows, 80, seed=22)[:, :8])   # nothing written outside the view


def test_three_stage_shared_buffer_and_unit_dim_copies():
    M, K, bk, stages = 4, 96, 16, 3
    with kernel("staged", [("A", (M, K), "float32"), ("Out", (M, K), "float32")], M) as (k, (bx,)):
        A, Out = k["A"], k["Out"]
        S = alloc("S", (stages, bk), "float32", "shared.dyn")
        with T.serial(0, K // bk, annotations={"num_stages": stages}) as ko:
            Tx.copy(S[ko % stages, 0:bk], A[bx, ko * bk:ko * bk + bk])        # [1, bk] <- [1, bk]
            Tx.copy(Out[bx:bx + 1, ko * bk:ko * bk + bk], S[ko % stages:ko % stages + 1, 0:bk])
    A = randn(M, K, seed=23)
    Out = torch.zeros(M, K)
    interp.run(k.func, [A, Out])
    assert torch.equal(Out, A)


def test_fill_on_global_edge_region_writes_only_inside():
    M, N, bm = 10, 6, 4
    with kernel("fill", [("Out", (M, N), "float32")], ceildiv(M, bm)) as (k, (bx,)):
        Tx.fill(k["Out"][bx * bm:bx * bm + bm, 0:N], f32(3.5))
    Out = torch.zeros(M, N)
    interp.run(k.func, [Out])
    assert torch.equal(Out, torch.full((M, N), 3.5))


def test_copy_reads_zeros_past_the_edge_and_casts():
    M, bm = 5, 8
    with kernel("edge", [("A", (M,), "float16"), ("Out", (bm,), "float32")], 1) as (k, _):
        F = alloc("F", (bm,), "float32", "local.fragment")
        Tx.fill(F, f32(-1))
        Tx.copy(F[0:bm], k["A"][0:bm])
        Tx.copy(k["Out"][0:bm], F[0:bm])
    A = randn(M, dtype=torch.float16, seed=24)
    Out = torch.zeros(bm)
    interp.run(k.func, [A, Out])
    assert torch.equal(Out, torch.cat([A.float(), torch.zeros(bm - M)]))


def test_program_is_cached_per_primfunc():
    func = elementwise_kernel(8, 8)
    assert interp.compile_func(func) is interp.compile_func(func)


# ---- parallel loops: slice accesses (`var + offset`) agree with the gather path ----------------------------

def test_parallel_slice_and_gather_accesses_agree():
    """Transposed, offset, reversed and strided-step indices; the in-place
    transpose reads before it writes."""
    n = 8
    with kernel("access", [("X", (n, n), "float32"), ("Y", (5, n, n), "float32")], 1) as (k, _):
        X, Y = k["X"], k["Y"]
        S = alloc("S", (n, n), "float32", "shared.dyn")
        Tx.copy(S[0:n, 0:n], X[0:n, 0:n])
        with T.parallel(0, n) as i:
            with T.parallel(0, n) as j:
                store(S, S[j, i], (i, j))                                     # in-place transpose
        Tx.copy(Y[0, 0:n, 0:n], S[0:n, 0:n])
        with T.parallel(0, n) as i:
            with T.parallel(0, n) as j:
                store(Y, X[n - 1 - i, j] + X[i, tirx.min(j + 1, n - 1)], (1, i, j))   # gather path
                store(Y, X[i, j] * f32(2), (2, j, i))                               # transposed store
        with T.parallel(0, n // 2) as i:
            with T.parallel(0, n) as j:
                # offset store, strided read
                store(Y, X[i * 2, j], (3, i + 2, j))
        with T.parallel(0, n) as i:
            store(Y, X[i, i], (4, 0, i))                                            # diagonal: same var twice
    X = randn(n, n, seed=30)
    Y = torch.zeros(5, n, n)
    interp.run(k.func, [X, Y])
    ref = torch.zeros(5, n, n)
    ref[0] = X.T
    ref[1] = X.flip(0) + X[:, torch.clamp(torch.arange(n) + 1, max=n - 1)]
    ref[2] = (X * 2).T
    ref[3, 2:2 + n // 2] = X[0::2]
    ref[4, 0] = torch.diagonal(X)
    torch.testing.assert_close(Y, ref)


def test_guarded_edge_block_uses_masks_and_interior_blocks_use_slices():
    N, block = 100, 32
    with kernel("axpy", [("X", (N,), "float32"), ("Y", (N,), "float32")], ceildiv(N, block)) as (k, (bx,)):
        X, Y = k["X"], k["Y"]
        with T.parallel(0, block) as i:
            with T.If(bx * block + i < N):
                with T.Then():
                    store(Y, X[bx * block + i] * f32(3) + Y[bx * block + i], [bx * block + i])
    X, Y = randn(N, seed=31), randn(N, seed=32)
    ref = X * 3 + Y
    interp.run(k.func, [X, Y])
    torch.testing.assert_close(Y, ref)


def test_loops_with_a_step():
    n = 12
    with kernel("steps", [("X", (n,), "float32"), ("Y", (2, n), "float32")], 1) as (k, _):
        X, Y = k["X"], k["Y"]
        with T.serial(1, n, step=3) as s:
            store(Y, X[s], (0, s))
        with T.parallel(2, n, step=4) as p:
            store(Y, X[p] * f32(2), (1, p))
    X = randn(n, seed=33)
    Y = torch.zeros(2, n)
    interp.run(k.func, [X, Y])
    ref = torch.zeros(2, n)
    ref[0, 1::3] = X[1::3]
    ref[1, 2::4] = X[2::4] * 2
    torch.testing.assert_close(Y, ref)


def test_in_place_reverse_reads_before_it_writes():
    n = 10
    with kernel("reverse", [("X", (n,), "float32")], 1) as (k, _):
        X = k["X"]
        with T.parallel(0, n) as i:
            store(X, X[i], [n - 1 - i])    # a slice (view) read, scattered into the same buffer
    X = randn(n, seed=34)
    ref = X.flip(0).clone()
    interp.run(k.func, [X])
    torch.testing.assert_close(X, ref)


def test_every_tile_op_of_the_language_has_an_interpreter_rule():
    from tile_nb.interp.compiler import TILE_RULES
    # what tile_nb.language emits (docs/IR.md)
    for op in ("copy", "fill", "gemm", "sum", "max", "min", "cumsum"):
        assert op in TILE_RULES, op


def test_gemm_with_alpha_beta_into_another_buffer():
    """D = 2 * A @ B + 0.5 * C with D distinct from C (the general, out-of-place path)."""
    M, N, K = 16, 24, 8
    with kernel("axpby", [("A", (M, K), "float32"), ("B", (K, N), "float32"), ("C", (M, N), "float32"),
                          ("D", (M, N), "float16")], 1) as (k, _):
        Tx.gemm(k["D"], k["A"], k["B"], k["C"], False, False, 2.0, 0.5)
    A, B, C = randn(M, K, seed=35), randn(K, N, seed=36), randn(M, N, seed=37)
    D = torch.zeros(M, N, dtype=torch.float16)
    interp.run(k.func, [A, B, C, D])
    close(D, 2 * A.double() @ B.double() + 0.5 * C.double(), dtype=torch.float16, scale=4)


def test_copy_from_a_negative_start_reads_zeros_and_fill_takes_a_runtime_scalar():
    n = 8
    with kernel("shifted", [("X", (n,), "float32"), ("Y", (n,), "float32"), ("s", "float32")], 1) as (k, _):
        F = alloc("F", (n,), "float32", "local.fragment")
        Tx.fill(F, k["s"])
        Tx.copy(F[0:n], k["X"][-3:n - 3])        # the first 3 elements are before the tensor: read as 0
        Tx.copy(k["Y"][0:n], F[0:n])
    X = randn(n, seed=38)
    Y = torch.zeros(n)
    interp.run(k.func, [X, Y, 7.0])
    assert torch.equal(Y, torch.cat([torch.zeros(3), X[:n - 3]]))


def test_bind_inside_parallel_loop_keeps_the_value_read():
    n = 6
    with kernel("swap", [("X", (n,), "float32"), ("Y", (n,), "float32")], 1) as (k, _):
        X, Y = k["X"], k["Y"]
        with T.parallel(0, n) as i:
            old = tirx.Var("old", "float32")
            T.add_to_parent(tirx.Bind(old, X[i]))
            store(X, f32(0), [i])
            store(Y, old + X[i], [i])   # X[i] is 0 now; `old` must still be the value read before
    X = randn(n, seed=39)
    ref = X.clone()
    Y = torch.zeros(n)
    interp.run(k.func, [X, Y])
    assert torch.equal(Y, ref) and torch.equal(X, torch.zeros(n))


def test_if_then_else_of_two_constants_under_a_parallel_mask():
    n = 10
    with kernel("mask", [("Y", (n,), "float32")], 1) as (k, _):
        with T.parallel(0, n) as i:
            store(k["Y"], tirx.if_then_else(i < 4, -tirx.infinity("float32"), f32(0)), [i])
    Y = torch.ones(n)
    interp.run(k.func, [Y])
    assert torch.equal(Y, torch.tensor([float("-inf")] * 4 + [0.0] * 6))
