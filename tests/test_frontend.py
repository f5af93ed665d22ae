"""The lazy JIT front end: parameter forms, two-phase elaboration, caching,
source capture and argument errors."""
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from kernels.seed import gemm, gemm_ptr

import tile_nb
import tile_nb.language as T
from tile_nb import errors
from tile_nb.jit import CallFacts


def rand(*shape, dtype=torch.float32):
    return torch.randn(*shape).to(dtype)


# -- golden IR in tests/golden/seed_gemm_*.txt, written by hand from the IR the seed GEMM must elaborate to
# (docs/IR.md)

GOLDEN = Path(__file__).resolve().parent / "golden"


def golden(name: str) -> str:
    return (GOLDEN / name).read_text().rstrip("\n")


def _body(script: str) -> str:
    lines = script.splitlines()
    start = next(i for i, line in enumerate(lines) if "T.launch_thread" in line)
    return "\n".join(lines[start:])


def test_template_golden():
    template = gemm.template()
    assert template.stopped is None
    script = template.script()
    assert 'def gemm(A: T.Buffer(("M", "K"), "float16"), B: T.Buffer((K, "N"), "float16"), ' \
           'C: T.Buffer((M, N), "float32")):' in script
    assert _body(script) == golden("seed_gemm_template.txt")


def test_specialized_golden_from_keywords():
    func = gemm.specialize(M=1000, N=500, K=512)
    script = func.script()
    assert 'def gemm(A: T.Buffer((1000, 512), "float16"), B: T.Buffer((512, 500), "float16"), ' \
           'C: T.Buffer((1000, 500), "float32")):' in script
    assert _body(script) == golden("seed_gemm_specialized.txt")


def test_specialize_from_tensors_matches_keywords():
    A, B, C = rand(1000, 512, dtype=torch.float16), rand(512, 500, dtype=torch.float16), rand(1000, 500)
    assert gemm.specialize(A, B, C).script() == gemm.specialize(M=1000, N=500, K=512).script()


def test_compile_time_args_change_the_template():
    script = gemm.template(block_M=64, out_dtype=T.float16).script()
    assert "(M + 64 - 1) // 64" in script and 'C: T.Buffer((M, N), "float16")' in script


# -- running on the interpreter ------------------------------------------------------------------------------

@pytest.mark.parametrize("shape", [(256, 128, 64), (200, 130, 70)])
def test_seed_gemm_runs(shape):
    m, n, k = shape
    A, B = rand(m, k, dtype=torch.float16), rand(k, n, dtype=torch.float16)
    C = torch.full((m, n), float("nan"))
    gemm(A, B, C, block_M=64, block_N=64)
    ref = A.double() @ B.double()
    assert torch.linalg.norm(C.double() - ref) / torch.linalg.norm(ref) < 1e-5


def test_seed_gemm_with_pointers():
    A, B = rand(64, 32, dtype=torch.float16), rand(32, 64, dtype=torch.float16)
    C = torch.full((64, 64), float("nan"))
    gemm_ptr(A.data_ptr(), B.data_ptr(), C.data_ptr(), M=64, N=64, K=32, block_M=32, block_N=32)
    assert torch.allclose(C, A.float() @ B.float(), rtol=1e-4, atol=1e-3)


def test_pointer_call_without_its_consts_names_them():
    A = rand(64, 32, dtype=torch.float16)
    with pytest.raises(
        errors.MissingConstError,
        match=r"const 'M': it is a dim of the pointer argument 'A', which "
        r"was given as an address \(int\), and an address carries no",
    ):
        gemm_ptr(A.data_ptr(), A.data_ptr(), A.data_ptr())


@tile_nb.jit
def scale_rows(X, Y, alpha: T.float32, block: int = 64):
    N = T.dynamic('N')
    D = T.const('D')
    X: T.Tensor[[N, D], T.float32]
    Y: T.Tensor[[N, D], T.float32]
    with T.Kernel(T.ceildiv(N, block)) as bx:
        for i, j in T.Parallel(block, D):
            if bx * block + i < N:
                Y[bx * block + i, j] = X[bx * block + i, j] * alpha


def test_dynamic_dim_serves_every_value_with_one_specialization():
    before = scale_rows.stats["specializations"]
    for n in (10, 64, 100):
        X = rand(n, 8)
        Y = torch.zeros(n, 8)
        scale_rows(X, Y, 2.5)
        assert torch.allclose(Y, X * 2.5)
    assert scale_rows.stats["specializations"] - before == 1
    assert "N = T.int32()" in scale_rows.specialize(D=8).script()


@tile_nb.jit
def add_one(X, *, block: int = 32):
    M = T.const('M')
    X: T.Tensor[[M], T.float32]
    out = T.empty((M,), T.float32)
    with T.Kernel(T.ceildiv(M, block)) as bx:
        for i in T.Parallel(block):
            if bx * block + i < M:
                out[bx * block + i] = X[bx * block + i] + 1.0
    return out


def test_empty_output_is_allocated_and_returned():
    X = rand(50)
    out = add_one(X)
    assert out.shape == (50,) and torch.allclose(out, X + 1)
    assert add_one(X, block=16).shape == (50,)  # keyword-only compile-time parameter


def test_shape_arithmetic_is_a_pure_expression():
    @tile_nb.jit
    def pad(A, B):
        N = T.dynamic('N')
        M = N * 2 + 1
        A: T.Tensor[[N], T.float32]
        B: T.Tensor[[M], T.float32]
        with T.Kernel(1) as bx:
            for i in T.serial(N):
                B[i * 2 + 1] = A[i]

    script = pad.specialize().script()
    assert "T.Buffer((N * 2 + 1,)" in script and "LetStmt" not in script and "T.bind" not in script


def test_const_used_only_in_grid_comes_from_keyword():
    @tile_nb.jit
    def fill_rows(Y):
        R = T.const('R')
        Y: T.Tensor[[64], T.float32]
        with T.Kernel(R) as bx:
            Y[bx] = 1.0

    func = fill_rows.specialize(R=3)
    assert 'T.launch_thread("blockIdx.x", 3)' in func.script()
    with pytest.raises(
        errors.MissingConstError, match=r"needs a value for const 'R'.*fill_rows\(\.\.\., R=1024\)|R=1024"
    ):
        fill_rows(torch.zeros(64))


# -- caching -------------------------------------------------------------------------------------------------

def test_cache_hits_and_misses_are_counted():
    @tile_nb.jit
    def copy1d(A, B):
        N = T.const('N')
        A: T.Tensor[[N], T.float32]
        B: T.Tensor[[N], T.float32]
        with T.Kernel(1):
            T.copy(A, B)

    for n in (8, 8, 16, 8):
        copy1d(rand(n), torch.zeros(n))
    assert copy1d.stats == {"templates": 1, "specializations": 2, "compilations": 0}


def test_closure_value_is_part_of_the_key():
    def make(scale):
        @tile_nb.jit
        def k(A):
            A: T.Tensor[[4], T.float32]
            with T.Kernel(1):
                for i in T.Parallel(4):
                    A[i] = A[i] * scale
        return k

    k = make(3.0)
    A = torch.ones(4)
    k(A)
    assert torch.equal(A, torch.full((4,), 3.0))


FACTOR = 2.0


@tile_nb.jit
def times_factor(A):
    A: T.Tensor[[4], T.float32]
    with T.Kernel(1):
        for i in T.Parallel(4):
            A[i] = A[i] * FACTOR


def test_global_value_is_part_of_the_key():
    global FACTOR
    A = torch.ones(4)
    times_factor(A)
    assert torch.equal(A, torch.full((4,), 2.0))
    FACTOR = 5.0
    try:
        times_factor(A)
        assert torch.equal(A, torch.full((4,), 10.0))
        assert times_factor.stats["templates"] == 2
        times_factor(A)
        assert times_factor.stats["templates"] == 2
    finally:
        FACTOR = 2.0


# -- source capture ------------------------------------------------------------------------------------------

KERNEL_SOURCE = textwrap.dedent("""
    import tile_nb
    import tile_nb.language as T

    def outer(block):
        @tile_nb.jit
        def inc(A, step: int = block):
            N = T.const('N')
            A: T.Tensor[[N], T.float32]
            with T.Kernel(T.ceildiv(N, step)) as bx:
                for i in T.Parallel(step):
                    if bx * step + i < N:
                        A[bx * step + i] = A[bx * step + i] + 1.0
        return inc
""")


def test_exec_with_run_source_and_closure_default():
    ns = tile_nb.run_source(KERNEL_SOURCE)
    inc = ns["outer"](16)  # parameter default from the enclosing scope
    A = torch.zeros(40)
    inc(A)
    assert torch.equal(A, torch.ones(40))


def test_exec_without_registered_source_says_how_to_fix():
    ns = {}
    with pytest.raises(errors.SourceNotFoundError) as info:
        exec(compile(KERNEL_SOURCE, "<not-registered>", "exec"), ns)
        ns["outer"](16)
    message = str(info.value)
    assert "cannot find the source of kernel" in message and "run_source" in message


def test_source_from_a_py_file(tmp_path, monkeypatch):
    (tmp_path / "mykernels.py").write_text(KERNEL_SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path))
    import mykernels

    A = torch.zeros(5)
    mykernels.outer(4)(A)
    assert torch.equal(A, torch.ones(5))


# -- errors: each names the kernel and parameter, says expected vs given, and points at the annotation line

def _raise(fn, *args, **kwargs):
    with pytest.raises(errors.TileNBError) as info:
        fn(*args, **kwargs)
    return info.value


def test_error_lower_and_higher_rank():
    B, C = rand(64, 64, dtype=torch.float16), rand(64, 64)
    for A in (rand(64, dtype=torch.float16), rand(2, 64, 64, dtype=torch.float16)):
        err = _raise(gemm, A, B, C)
        assert isinstance(err, errors.RankMismatchError)
        assert "gemm() argument 'A' must be a 2-d tensor" in str(err)
        assert "A: T.Tensor[[M, K], T.float16]" in str(err) and "^^^" in str(err)


def test_error_dtype():
    err = _raise(gemm, rand(64, 64), rand(64, 64, dtype=torch.float16), rand(64, 64))
    assert isinstance(err, errors.DtypeMismatchError)
    assert "'A' must have dtype float16; got torch.float32" in str(err)


def test_error_shared_const_disagrees():
    err = _raise(gemm, rand(64, 32, dtype=torch.float16), rand(48, 64, dtype=torch.float16), rand(64, 64))
    assert isinstance(err, errors.ShapeMismatchError)
    assert "'B' must have shape (K=32, N=64); got (48, 64)" in str(err)
    assert "K is taken from A.shape[1] = 32" in str(err)
    assert "B: T.Tensor[[K, N], T.float16]" in str(err)


def test_error_literal_dim():
    err = _raise(times_factor, torch.ones(5))
    assert "'A' must have shape (4,); got (5,)" in str(err)


def test_error_non_contiguous_and_strided_allowed():
    A = rand(64, 64, dtype=torch.float16).t()
    err = _raise(gemm, A, rand(64, 64, dtype=torch.float16), rand(64, 64))
    assert isinstance(err, errors.NotContiguousError) and "T.StridedTensor" in str(err)

    @tile_nb.jit
    def col_copy(A, B):
        N, S = T.const('N, S')
        A: T.StridedTensor[[N], [S], T.float32]
        B: T.Tensor[[N], T.float32]
        with T.Kernel(1):
            for i in T.serial(N):
                B[i] = A[i]

    X = rand(6, 3)
    out = torch.zeros(6)
    col_copy(X[:, 1], out)
    assert torch.equal(out, X[:, 1])


def test_error_device_mix():
    err = _raise(gemm, rand(64, 64, dtype=torch.float16), rand(64, 64, dtype=torch.float16).to("meta"),
                 rand(64, 64))
    assert isinstance(err, errors.DeviceMismatchError) and "'B' is on meta" in str(err)


def test_error_argument_count_and_unknown_keyword():
    assert "missing 1 runtime argument(s): 'C'" in str(_raise(gemm, rand(4, 4), rand(4, 4)))
    assert "takes 7 positional arguments but 8 were given" in str(_raise(gemm, *([1] * 8)))
    err = _raise(
        gemm, rand(64, 64, dtype=torch.float16), rand(64, 64, dtype=torch.float16), rand(64, 64), Q=3
    )
    assert "unexpected keyword argument(s) 'Q'" in str(err)


def test_error_unhashable_compile_time_argument():
    @tile_nb.jit
    def scaled(X, factors=(1, 2)):
        N = T.const('N')
        X: T.Tensor[[N], T.float32]
        with T.Kernel(1) as bx:
            for i in T.Parallel(N):
                X[i] = X[i] * factors[0]

    err = _raise(scaled, rand(4), factors=[1, 2])
    assert isinstance(err, errors.UnhashableArgumentError) and "'factors' must be hashable" in str(err)


def test_error_compile_time_argument_against_its_annotation():
    err = _raise(gemm, rand(4, 4), rand(4, 4), rand(4, 4), block_M=[64])
    assert isinstance(err, errors.ArgumentError)
    assert "compile-time argument 'block_M' must be an int; got list [64]" in str(err)
    err = _raise(gemm, rand(4, 4), rand(4, 4), rand(4, 4), block_M=64.0)
    assert "'block_M' must be an int; got float 64.0" in str(err) and "block_M: int" in str(err)
    assert err.lineno is not None  # the kernel's def line


def test_error_positional_only_at_decoration():
    with pytest.raises(errors.SignatureError, match="positional-only parameter 'A'"):
        @tile_nb.jit
        def bad(A, /, B):
            A: T.Tensor[[4], T.float32]


def test_error_tensor_without_annotation():
    @tile_nb.jit
    def forgot(A, D):
        A: T.Tensor[[4], T.float32]
        with T.Kernel(1):
            A[0] = 1.0

    err = _raise(forgot, torch.zeros(4), torch.zeros(4))
    assert "argument 'D' is a tensor but has no annotation" in str(err) and "D: T.Tensor" in str(err)


def test_error_empty_not_returned():
    @tile_nb.jit
    def no_return(A):
        A: T.Tensor[[4], T.float32]
        out = T.empty((4,), T.float32)
        with T.Kernel(1):
            out[0] = A[0]

    err = _raise(no_return, torch.zeros(4))
    assert isinstance(err, errors.ReturnError) and "never returned" in str(err)
    err = _raise(no_return, torch.zeros(4))  # the failed elaboration left no cache entry behind
    assert no_return.stats["specializations"] == 0


def test_error_unsupported_construct_names_it():
    with pytest.raises(errors.UnsupportedSyntaxError) as info:
        @tile_nb.jit
        def loops(A):
            A: T.Tensor[[4], T.float32]
            try:
                pass
            finally:
                pass
    assert "`try` blocks are not supported" in str(info.value) and "try:" in str(info.value)


def test_dsl_misuse_points_at_the_users_line():
    @tile_nb.jit
    def bad_gemm(A):
        A: T.Tensor[[16, 16], T.float16]
        with T.Kernel(1):
            X = T.alloc_shared((16, 8), T.float16)
            Y = T.alloc_fragment((16, 16), T.float32)
            T.gemm(A, X, Y)

    err = _raise(bad_gemm, torch.zeros(16, 16, dtype=torch.float16))
    assert "T.gemm: K of A and B differ (16 vs 16)" not in str(err)
    assert "T.gemm" in str(err) and "T.gemm(A, X, Y)" in str(err)


def test_template_stops_where_python_needs_a_const():
    @tile_nb.jit
    def branchy(A):
        N = T.const('N')
        A: T.Tensor[[N], T.float32]
        with T.Kernel(1):
            A[0] = 1.0
            if N > 16:
                A[1] = 2.0

    template = branchy.template()
    assert template.stopped is not None and "needs the value of N" in template.stopped.reason
    assert "A[0] = T.float32(1.0)" in template.script()
    A = torch.zeros(32)
    branchy(A)
    assert A[:2].tolist() == [1.0, 2.0]


def test_import_is_light():
    code = (
        "import sys, tile_nb; bad = [m for m in ('IPython', 'ipywidgets', 'matplotlib', 'jupyter_client') "
        "if m in sys.modules]; print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_verbose_reports_phases(caplog):
    @tile_nb.jit(verbose=True)
    def noisy(A):
        N = T.const('N')
        A: T.Tensor[[N], T.float32]
        with T.Kernel(1):
            A[0] = 1.0

    with caplog.at_level("INFO", logger="tile_nb"):
        noisy.specialize(N=8)
    text = caplog.text
    assert "noisy: template" in text and "noisy: specialized {'N': 8}" in text


def test_assert_is_checked_once_consts_are_known_and_does_not_stop_the_template():
    @tile_nb.jit
    def tiled(A, block: int = 16):
        N = T.const('N')
        assert N % block == 0, "N must be a multiple of the block"
        A: T.Tensor[[N], T.float32]
        with T.Kernel(N // block) as bx:
            for i in T.Parallel(block):
                A[bx * block + i] = 1.0

    template = tiled.template()
    assert template.stopped is None and template.assumptions == [
        (template.assumptions[0][0], "N % block == 0")
    ]
    A = torch.zeros(32)
    tiled(A)
    assert torch.equal(A, torch.ones(32))
    err = _raise(tiled, torch.zeros(40))
    assert "kernel assertion failed: `N % block == 0`: N must be a multiple of the block" in str(err)
    assert 'assert N % block == 0, "N must be a multiple of the block"' in str(err)


def test_equality_on_a_const_stops_the_template_instead_of_picking_a_branch():
    @tile_nb.jit
    def eq(A):
        N = T.const('N')
        A: T.Tensor[[N], T.float32]
        with T.Kernel(1):
            if N == 4:
                A[0] = 4.0
            else:
                A[0] = -1.0

    assert "needs the value of N" in eq.template().stopped.reason
    A = torch.zeros(4)
    eq(A)
    assert A[0] == 4.0


def test_template_stopped_before_annotations_still_reads_consts_from_tensors():
    @tile_nb.jit
    def early(A, B):
        M, N = T.const('M, N')
        block = 64 if M > 1000 else 16
        A: T.Tensor[[M, N], T.float32]
        B: T.Tensor[[M, N], T.float32]
        with T.Kernel(T.ceildiv(M, block)) as bx:
            for i, j in T.Parallel(block, N):
                if bx * block + i < M:
                    B[bx * block + i, j] = A[bx * block + i, j] * 2.0

    assert early.template().stopped is not None
    A = torch.randn(20, 3)
    B = torch.zeros(20, 3)
    early(A, B)
    assert torch.allclose(B, A * 2)


def test_edge_guards_mixing_consts_and_loop_vars_stay_in_the_template():
    @tile_nb.jit
    def guarded(X, Y, block: int = 128):
        N = T.const('N')
        X: T.Tensor[[N], T.float32]
        Y: T.Tensor[[N], T.float32]
        with T.Kernel(T.ceildiv(N, block)) as bx:
            for i in T.Parallel(block):
                if bx * block + i < N:
                    Y[bx * block + i] = X[bx * block + i]
                if N > 64:
                    Y[0] = 1.0

    template = guarded.template()
    assert "if bx * 128 + i < N:" in template.script()
    assert template.stopped.reason == "this `if` needs the value of N"


def test_fast_path_still_checks_dtype_layout_and_device():
    @tile_nb.jit
    def double(A, B):
        N = T.const('N')
        A: T.Tensor[[N], T.float32]
        B: T.Tensor[[N], T.float32]
        with T.Kernel(1):
            for i in T.Parallel(N):
                B[i] = A[i] * 2.0

    A, B = torch.randn(8), torch.zeros(8)
    double(A, B)
    double(A, B)  # cached: the fast path
    assert double.stats["specializations"] == 1 and double._fast is not None
    with pytest.raises(errors.DtypeMismatchError):
        double(A.double(), B)
    with pytest.raises(errors.NotContiguousError):
        double(torch.randn(16)[::2], B)
    with pytest.raises(errors.DeviceMismatchError):
        double(A, B.to("meta"))
    double(torch.randn(4), torch.zeros(4))
    assert double.stats["specializations"] == 2


def test_compile_time_values_equal_in_python_but_of_other_types_get_their_own_template():
    @tile_nb.jit
    def fill(A, value):
        A: T.Tensor[[2], T.float32]
        with T.Kernel(1):
            A[0] = value

    assert "A[0] = T.float32(1.0)" in fill.specialize(value=1.0).script()
    fill.specialize(value=1)
    assert fill.stats["templates"] == 2


def test_fast_path_launches_directly_by_call_facts():
    """The cached-call fast path (CPU side of it): tensors that report CUDA go straight to the
    launch kept for their facts (alignment of each pointer, divisibility of each T.dynamic dim);
    other facts go the checked way."""
    import tile_nb
    import tile_nb.language as T

    @tile_nb.jit
    def scale(X, Y):
        N = T.dynamic('N')
        X: T.Tensor[[N], T.float32]
        Y: T.Tensor[[N], T.float32]
        with T.Kernel(T.ceildiv(N, 64), threads=64) as bx:
            for i in T.Parallel(64):
                if bx * 64 + i < N:
                    Y[bx * 64 + i] = X[bx * 64 + i] * 3.0

    class ReportsCuda(torch.Tensor):  # a CPU tensor that says it is on CUDA, for the fast path's test only
        @property
        def is_cuda(self):
            return True

    x, y = torch.randn(64), torch.empty(64)
    scale(x, y)  # the interpreter: binds, checks, and fills the fast table
    (spec,) = [s for t in scale._templates.values() for s in t.specializations.values()]
    assert spec.facts_key((x, y)) == (False, False, True)   # both aligned, N = 64 divisible by 16
    assert spec.facts(spec.facts_key((x[1:], y[1:]))) == CallFacts(unaligned=("X", "Y"))
    launched = []
    spec.launches[(False, False, True)] = lambda *args: launched.append(args)
    fx, fy = x.as_subclass(ReportsCuda), y.as_subclass(ReportsCuda)
    assert scale(fx, fy) is None and len(launched) == 1 and launched[0][0] is fx
    scale(x, y)                                  # really on the CPU: the interpreter, not the launch
    assert len(launched) == 1 and torch.equal(y, x * 3)
    misaligned = torch.randn(65).as_subclass(ReportsCuda)[1:]
    scale(misaligned, fy)                        # other facts, nothing kept for them: the checked path
    assert len(launched) == 1 and torch.equal(fy, misaligned * 3)


def test_fast_path_takes_compile_time_values_by_position():
    """tilelang's call form `kernel(x, y, 64)`: compile-time values by position after the runtime arguments
    reach the launch kept for them without binding the call again (it took the checked path every time, some
    40 us a call); another value is another entry."""
    import tile_nb
    import tile_nb.language as T

    @tile_nb.jit
    def scale_by(X, Y, block: int):
        N = T.dynamic('N')
        X: T.Tensor[[N], T.float32]
        Y: T.Tensor[[N], T.float32]
        with T.Kernel(T.ceildiv(N, block), threads=64) as bx:
            for i in T.Parallel(block):
                if bx * block + i < N:
                    Y[bx * block + i] = X[bx * block + i] * 3.0

    class ReportsCuda(torch.Tensor):  # a CPU tensor that says it is on CUDA, for the fast path's test only
        @property
        def is_cuda(self):
            return True

    x, y = torch.randn(100), torch.empty(100)
    scale_by(x, y, 64)  # the interpreter: binds, checks, and fills the fast table
    assert torch.equal(y, x * 3)
    (spec,) = [s for t in scale_by._templates.values() for s in t.specializations.values()]
    launched = []
    spec.launches[spec.facts_key((x, y))] = lambda *args: launched.append(args)
    fx, fy = x.as_subclass(ReportsCuda), y.as_subclass(ReportsCuda)
    scale_by(fx, fy, 64)  # the seen shapes: kept under its direct key
    slow = scale_by._call_slow
    scale_by._call_slow = None  # from here on, a call that binds again fails
    scale_by(fx, fy, 64)
    assert len(launched) == 2 and all(len(args) == 2 and args[0] is fx for args in launched)
    scale_by._call_slow = slow
    scale_by(x, y, 32)  # another value: checked, specialized, and given its own entry
    assert len(scale_by._fast) == 2 and scale_by.stats["templates"] == 2


def test_direct_launch_leaves_dtype_and_layout_to_the_kernel_and_falls_back_when_it_refuses():
    """After one checked call, a call with the same shapes and facts goes straight to the kernel's launch
    without reading dtypes or strides in Python: the compiled host function checks them (TVM raises TypeError
    or ValueError, as the stand-in below does) and a refused call takes the checked path, which names the
    problem. A runtime scalar's type is part of the key, so True never reaches a launch kept for an int."""
    import tile_nb
    import tile_nb.language as T
    from tile_nb.errors import ArgumentError

    @tile_nb.jit
    def scale(X, Y, k: T.int32):
        N = T.const('N')
        X: T.Tensor[[N], T.float32]
        Y: T.Tensor[[N], T.float32]
        with T.Kernel(1, threads=64) as bx:
            for i in T.Parallel(N):
                Y[i] = X[i] * k

    class Tensor(torch.Tensor):  # a CPU tensor that says it is on CUDA (named so the checked path takes it)
        @property
        def is_cuda(self):
            return True

    ReportsCuda = Tensor

    def host_function(x, y, k):      # what a TVM host function checks before it launches
        if x.dtype != torch.float32 or y.dtype != torch.float32:
            raise TypeError("Mismatched X.dtype on argument #0")
        if not (x.is_contiguous() and y.is_contiguous()):
            raise ValueError("Mismatched X.strides on argument #0")
        launched.append((x, y, k))

    launched = []
    x, y = torch.randn(64), torch.empty(64)
    scale(x, y, 2)
    (spec,) = [s for t in scale._templates.values() for s in t.specializations.values()]
    spec.launches[spec.facts_key((x, y, 2))] = host_function
    fx, fy = x.as_subclass(ReportsCuda), y.as_subclass(ReportsCuda)
    scale(fx, fy, 2)                              # checked in Python once, then kept under its direct key
    (fast,) = scale._fast.values()
    assert len(launched) == 1 and list(fast.direct.values()) == [host_function]
    scale(fx, fy, 3)                              # direct: nothing read but shapes, pointers and types
    assert len(launched) == 2 and launched[1][2] == 3
    wrong = torch.randn(64, dtype=torch.float64).as_subclass(ReportsCuda)
    with pytest.raises(ArgumentError, match="float64"):
        scale(wrong, fy, 2)                       # the host function refused it; the checked path says why
    strided = torch.randn(128).as_subclass(ReportsCuda)[::2]
    with pytest.raises(ArgumentError, match="contiguous"):
        scale(strided, fy, 2)
    with pytest.raises(ArgumentError, match="bool"):
        scale(fx, fy, True)
    assert len(launched) == 2


X = torch.randn(7)   # a module global with the name of the kernel's parameter, as notebooks have
SCALE = torch.tensor([2.0])


@tile_nb.jit
def shadowing(X, Y):
    N = T.const('N')
    X: T.Tensor[[N], T.float32]
    Y: T.Tensor[[N], T.float32]
    with T.Kernel(1, threads=32) as bx:
        for i in T.Parallel(N):
            Y[i] = X[i] + 1.0


def test_parameters_shadow_globals_of_the_same_name():
    """A global X beside a parameter X is not part of the kernel's environment: rebinding it to another tensor
    neither rebuilds the kernel nor compares tensors (which raised on other shapes)."""
    global X
    assert shadowing._global_names == ()
    x, y = torch.randn(16), torch.empty(16)
    shadowing(x, y)
    X = torch.randn(1000)
    shadowing(x, y)
    assert (
        torch.equal(y, x + 1)
        and shadowing.stats["templates"] == 1
        and shadowing.stats["specializations"] == 1
    )


def test_a_global_tensor_in_the_environment_is_keyed_by_identity():
    from tile_nb.jit import _key_part

    a, b = torch.randn(3), torch.randn(5)
    assert _key_part(a) == _key_part(a) and _key_part(a) != _key_part(b)   # no elementwise comparison


def test_error_misspelled_tile_name_suggests_and_underlines_it():
    @tile_nb.jit
    def typo(A):
        A: T.Tensor[[16], T.float32]
        with T.Kernel(1):
            X = T.alloc_fragmnet((16,), T.float32)  # error: did you mean T.alloc_fragment?
            T.copy(A, X)

    err = _raise(typo, torch.zeros(16))
    assert isinstance(err, errors.UnknownNameError) and isinstance(err, AttributeError)
    text = str(err)
    assert "T.alloc_fragmnet is not part of the tile language; did you mean T.alloc_fragment?" in text
    lines = text.splitlines()
    source = next(i for i, line in enumerate(lines) if "X = T.alloc_fragmnet((16,), T.float32)" in line)
    caret = lines[source + 1]
    start = lines[source].index("T.alloc_fragmnet")
    assert caret.index("^") == start and caret.count("^") == len("T.alloc_fragmnet")
    assert "elaborate.py" not in text and "language/__init__" not in text
    assert not hasattr(T, "alloc_fragmnet") and not hasattr(T, "__no_such_dunder__")
