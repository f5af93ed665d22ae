"""tilelang's spellings of tile_nb's language (DESIGN.md section 3): the call form `T.Tensor((M, K), dtype)`
beside the subscript form `T.Tensor[[M, K], dtype]`, in the body and in the signature. Each spelling is parsed
into the same parameter classes, so the IR and the errors are the same as the subscript form's."""
import importlib.util
import sys

import pytest
import torch

import tile_nb
import tile_nb.language as T
from tile_nb.errors import AnnotationError, ArgumentError, DSLError

BACKENDS = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


def _device(backend):
    if backend == "cuda" and not torch.cuda.is_available():
        pytest.skip("needs a CUDA device; none is present on this machine")
    return backend


def _axpy(spelling: str):
    """The same kernel, `axpy`, with its tensors annotated in one of the spellings."""
    if spelling == "subscript":
        @tile_nb.jit
        def axpy(X, Y, alpha: float = 2.0, block: int = 32):
            M, N = T.const('M, N')
            X: T.Tensor[[M, N], T.float32]
            Y: T.Tensor[[M, N], T.float32]
            out = T.empty((M, N), T.float32)
            with T.Kernel(T.ceildiv(M, block), threads=64) as bx:
                for i, j in T.Parallel(block, N):
                    if bx * block + i < M:
                        out[bx * block + i, j] = X[bx * block + i, j] * alpha + Y[bx * block + i, j]
            return out
    elif spelling == "tuple":
        @tile_nb.jit
        def axpy(X, Y, alpha: float = 2.0, block: int = 32):
            M, N = T.const('M, N')
            X: T.Tensor((M, N), T.float32)
            Y: T.Tensor((M, N), T.float32)
            out = T.empty((M, N), T.float32)
            with T.Kernel(T.ceildiv(M, block), threads=64) as bx:
                for i, j in T.Parallel(block, N):
                    if bx * block + i < M:
                        out[bx * block + i, j] = X[bx * block + i, j] * alpha + Y[bx * block + i, j]
            return out
    else:  # a list, keywords, and the default dtype (float32, as in tilelang)
        @tile_nb.jit
        def axpy(X, Y, alpha: float = 2.0, block: int = 32):
            M, N = T.const('M, N')
            X: T.Tensor([M, N], dtype=T.float32)
            Y: T.Tensor(shape=(M, N))
            out = T.empty((M, N), T.float32)
            with T.Kernel(T.ceildiv(M, block), threads=64) as bx:
                for i, j in T.Parallel(block, N):
                    if bx * block + i < M:
                        out[bx * block + i, j] = X[bx * block + i, j] * alpha + Y[bx * block + i, j]
            return out
    return axpy


SPELLINGS = ["subscript", "tuple", "keywords"]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("spelling", SPELLINGS)
@pytest.mark.parametrize("shape", [(37, 5), (1, 1), (1, 13), (64, 3)])
def test_call_form_in_the_body_runs(backend, spelling, shape):
    device = _device(backend)
    x, y = torch.randn(*shape, device=device), torch.randn(*shape, device=device)
    out = _axpy(spelling)(x, y, alpha=0.5)
    torch.testing.assert_close(out, x * 0.5 + y)


def test_call_form_gives_the_same_template_and_specialization():
    kernels = [_axpy(s) for s in SPELLINGS]
    templates = {k.template().script() for k in kernels}
    assert len(templates) == 1
    specialized = {k.specialize(M=37, N=5).script() for k in kernels}
    assert len(specialized) == 1
    assert "37" in specialized.pop()


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_call_form_gives_the_same_argument_errors(spelling):
    kernel, reference = _axpy(spelling), _axpy("subscript")
    x = torch.randn(7, 5)
    messages = []
    for k in (kernel, reference):
        with pytest.raises(ArgumentError) as info:
            k(x, torch.randn(7, 6))
        messages.append(info.value.message)
    assert messages[0] == messages[1]


def test_call_form_reads_consts_when_the_template_stops_early():
    # A Python `if` on a const ends the template before the annotations run: the consts still come from the
    # call-form annotations (read from the source).
    @tile_nb.jit
    def half_or_double(X, Y):
        N = T.const('N')
        if N > 4:
            factor = 0.5
        else:
            factor = 2.0
        X: T.Tensor((N,), T.float32)
        Y: T.Tensor((N,), T.float32)
        with T.Kernel(1, threads=32) as bx:
            for i in T.Parallel(N):
                Y[i] = X[i] * factor

    for n in (1, 3, 9):
        x, y = torch.randn(n), torch.zeros(n)
        half_or_double(x, y)
        torch.testing.assert_close(y, x * (0.5 if n > 4 else 2.0))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("rows", [1, 6, 33])
def test_strided_tensor_call_form(backend, rows):
    device = _device(backend)

    @tile_nb.jit
    def copy_view(A, B):
        M, N, sA, sB = T.const('M, N, sA, sB')
        A: T.StridedTensor((M, N), (sA, 1), T.float32)
        B: T.StridedTensor[[M, N], [sB, 1], T.float32]
        with T.Kernel(M, threads=32) as bx:
            for j in T.Parallel(N):
                B[bx, j] = A[bx, j] + 1.0

    base = torch.randn(rows, 11, device=device)
    target = torch.zeros(rows, 9, device=device)
    copy_view(base[:, 2:7], target[:, 1:6])
    torch.testing.assert_close(target[:, 1:6], base[:, 2:7] + 1.0)
    assert torch.count_nonzero(target[:, :1]) == 0 and torch.count_nonzero(target[:, 6:]) == 0


def test_tensor_call_with_strides_keyword_is_a_strided_tensor():
    assert T.Tensor((4, 5), T.float16, strides=(8, 1)) == T.StridedTensor[[4, 5], [8, 1], T.float16]
    assert T.Tensor((4, 5), T.float16) == T.Tensor[[4, 5], T.float16]
    assert T.Tensor(7) == T.Tensor[[7], T.float32]


def test_call_form_refusals_are_annotation_errors():
    with pytest.raises(DSLError, match=r"T.Tensor\(shape, dtype, data\) can only run inside the body"):
        # a view (tests/test_tensor_views.py) is made in a kernel body
        T.Tensor((4,), T.float32, data=object())
    with pytest.raises(AnnotationError, match="2 dims but 1 strides"):
        T.StridedTensor((4, 4), (1,), T.float32)
    with pytest.raises(AnnotationError, match="T.Tensor shape entries"):
        T.Tensor((4, 2.5), T.float32)

    @tile_nb.jit
    def bad(A):
        A: T.Tensor((4,), T.float32, scope="shared")
        with T.Kernel(1) as bx:
            A[0] = 1.0

    with pytest.raises(AnnotationError, match="kernel parameters are global tensors") as info:
        bad(torch.zeros(4))
    assert info.value.lineno is not None


# -- signature annotations (tilelang's eager style: dims are Python values when `def` runs) ------------------

ROWS = 5


def _signature_kernels():
    cols = 3  # a closure value: the signature is evaluated by `def`

    @tile_nb.jit
    def add_rows(A: T.Tensor((ROWS, cols), T.float16), B: T.Tensor[[ROWS, cols], T.float16], C):
        C: T.Tensor((ROWS, cols), T.float16)
        with T.Kernel(ROWS, threads=32) as bx:
            for j in T.Parallel(cols):
                C[bx, j] = A[bx, j] + B[bx, j]

    return add_rows


@pytest.mark.parametrize("backend", BACKENDS)
def test_signature_annotations_beside_in_body_ones(backend):
    device = _device(backend)
    add_rows = _signature_kernels()
    a, b = torch.randn(ROWS, 3, device=device).half(), torch.randn(ROWS, 3, device=device).half()
    c = torch.zeros(ROWS, 3, device=device).half()
    add_rows(a, b, c)
    torch.testing.assert_close(c, a + b)
    assert [p.name for p in add_rows.signature.runtime] == ["A", "B", "C"]
    with pytest.raises(ArgumentError, match="'A'"):
        add_rows(torch.randn(ROWS, 4).half(), b.cpu(), c.cpu())


def test_signature_annotation_with_dynamic_body_dims_and_keyword_only():
    @tile_nb.jit
    def fill(X: T.Tensor[[1], T.float32], Y, *, Z: T.Tensor((1,), T.float32)):
        N = T.dynamic('N')
        Y: T.Tensor((N,), T.float32)
        with T.Kernel(T.ceildiv(N, 32), threads=32) as bx:
            for i in T.Parallel(32):
                if bx * 32 + i < N:
                    Y[bx * 32 + i] = X[0] + Z[0]

    for n in (1, 45):
        x, z, y = torch.randn(1), torch.randn(1), torch.zeros(n)
        fill(x, y, Z=z)
        torch.testing.assert_close(y, (x + z).expand(n))


def test_signature_and_body_annotation_of_one_parameter_is_refused():
    @tile_nb.jit
    def twice(A: T.Tensor((4,), T.float32)):
        A: T.Tensor((4,), T.float32)
        with T.Kernel(1) as bx:
            A[0] = 1.0

    with pytest.raises(AnnotationError, match="'A' is annotated twice"):
        twice(torch.zeros(4))


FUTURE_MODULE = '''
from __future__ import annotations
import tile_nb
import tile_nb.language as T

WIDTH = 6


@tile_nb.jit
def negate(A: T.Tensor((WIDTH,), T.float32), B: T.Tensor[[WIDTH], T.float32]):
    with T.Kernel(1, threads=32) as bx:
        for i in T.Parallel(WIDTH):
            B[i] = -A[i]


@tile_nb.jit
def negate_const(A: T.Tensor((M,), T.float32), B):
    M = T.const('M')
    B: T.Tensor((M,), T.float32)
    with T.Kernel(1, threads=32) as bx:
        for i in T.Parallel(M):
            B[i] = -A[i]
'''


def test_string_annotations_from_future_import(tmp_path):
    path = tmp_path / "future_kernels.py"
    path.write_text(FUTURE_MODULE)
    spec = importlib.util.spec_from_file_location("future_kernels_tnb", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
        a, b = torch.randn(6), torch.zeros(6)
        module.negate(a, b)
        torch.testing.assert_close(b, -a)
        # a string annotation naming a T.const of the body cannot be evaluated with the signature: refused,
        # saying where to write it instead
        with pytest.raises(AnnotationError, match="could not evaluate: NameError") as info:
            module.negate_const(a, b)
        assert "annotate it in the body instead" in info.value.hint
    finally:
        del sys.modules[spec.name]


def test_call_form_compiles_for_sm_90a():
    axpy = _axpy("tuple")
    kernel = axpy.compile(M=37, N=5, target="sm_90a")
    assert "__global__" in kernel.cuda_source
    add_rows = _signature_kernels()
    assert "__global__" in add_rows.compile(target="sm_90a").cuda_source


# -- tilelang's other spellings: T.Kernel without a grid, loop aliases, T.clamp /
# T.floordiv / T.floormod / T.Cast --

@tile_nb.jit
def spellings_mix(X, Y, Z, block: int = 32):
    N = T.const('N')
    X: T.Tensor((N,), T.float32)
    Y: T.Tensor((N,), T.float16)
    Z: T.Tensor((N,), T.int32)
    with T.Kernel(T.ceildiv(N, block), threads=32) as bx:
        for i in T.Parallel(block):
            g = bx * block + i
            if g < N:
                Y[g] = T.Cast(T.float16, T.clamp(X[g], -0.5, 0.75))
                Z[g] = T.floordiv(g - 3, 4) * 10 + T.floormod(g - 3, 4)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("n", [1, 29, 64])
def test_clamp_floordiv_floormod_cast(backend, n):
    device = _device(backend)
    x = torch.randn(n, device=device)
    y = torch.zeros(n, device=device, dtype=torch.float16)
    z = torch.zeros(n, device=device, dtype=torch.int32)
    spellings_mix(x, y, z)
    torch.testing.assert_close(y, x.clamp(-0.5, 0.75).half())
    g = torch.arange(n, device=device) - 3
    torch.testing.assert_close(z, (torch.div(g, 4, rounding_mode="floor") * 10 + g % 4).int())


def test_floordiv_floormod_fold_python_ints():
    assert T.floordiv(-7, 2) == -4 and T.floormod(-7, 2) == 1 and T.clamp(9, 0, 4) == 4


@tile_nb.jit
def prefix_rows(X, Y):
    M, N = T.const('M, N')
    X: T.Tensor((M, N), T.float32)
    Y: T.Tensor((M, N), T.float32)
    with T.Kernel(threads=64):  # no grid: one CTA
        for r in T.Parallel(M):
            acc = T.alloc_local((1,), T.float32)
            acc[0] = 0.0
            for c in T.Serial(N):
                acc[0] += X[r, c]
                Y[r, c] = acc[0]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", [(1, 1), (5, 7), (64, 3)])
def test_kernel_without_grid_and_serial_alias(backend, shape):
    device = _device(backend)
    x = torch.randn(*shape, device=device)
    y = torch.zeros(*shape, device=device)
    prefix_rows(x, y)
    torch.testing.assert_close(y, x.cumsum(1))


@tile_nb.jit
def vector_scale(X, Y, width: int = 4):
    M = T.const('M')
    X: T.Tensor((M, width), T.float32)
    Y: T.Tensor((M, width), T.float32)
    with T.Kernel(T.ceildiv(M, 32), threads=32) as bx:
        for i in T.Parallel(32):
            if bx * 32 + i < M:
                for v in T.vectorized(width):
                    Y[bx * 32 + i, v] = X[bx * 32 + i, v] * 2.0 + v
                for v in T.Unroll(width):
                    Y[bx * 32 + i, v] += 1.0


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("rows", [1, 33])
def test_vectorized_and_unroll_aliases(backend, rows):
    device = _device(backend)
    x = torch.randn(rows, 4, device=device)
    y = torch.zeros(rows, 4, device=device)
    vector_scale(x, y)
    torch.testing.assert_close(y, x * 2.0 + torch.arange(4.0, device=device) + 1.0)


def test_other_spellings_compile_for_sm_90a():
    for kernel, consts in (
        (spellings_mix, dict(N=29)),
        (prefix_rows, dict(M=5, N=7)),
        (vector_scale, dict(M=33)),
    ):
        assert "__global__" in kernel.compile(target="sm_90a", **consts).cuda_source


def test_tile_form_of_atomic_add_adds_the_whole_tile():
    # tilelang's `T.atomic_add(C[r, c], C_local)` adds a whole tile (tile_nb once took one element
    # of it silently, seen in tilelang's split-K example; then refused it;
    # tests/test_atomic_tile.py has the full tests)
    @tile_nb.jit
    def tile_add(C):
        C: T.Tensor((4, 4), T.float32)
        with T.Kernel(1, threads=32) as bx:
            C_local = T.alloc_fragment((4, 4), T.float32)
            T.fill(C_local, 1.0)
            T.atomic_add(C[0, 0], C_local)

    c = torch.zeros(4, 4)
    tile_add(c)
    assert torch.equal(c, torch.ones(4, 4))

@tile_nb.jit
def gathered_rows(X, idx, mode: str = "hints", block: int = 16):
    """Y[i, :] = X[idx[i], :] through shared memory (the minference example's prefetch, row gather with zeros
    past `count`), its T.Parallel with tilelang's loop keywords per `mode`."""
    M, N, R = T.const('M, N, R')
    X: T.Tensor[[R, N], T.float32]
    idx: T.Tensor[[M], T.int32]
    Y = T.empty((M, N), T.float32)
    with T.Kernel(T.ceildiv(M, block), threads=64) as bx:
        tile = T.alloc_shared((block, N), T.float32)
        if mode == "hints":
            loop = T.Parallel(block, N, coalesced_width=4, prefer_async=True,
                              loop_layout=T.Fragment((block, N), forward_fn=lambda i, j: (i, j)),
                              annotations={"parallel_async_without_async_commit_wait": False})
        elif mode == "in flight":
            loop = T.Parallel(block, N, annotations={"parallel_async_without_async_commit_wait": True})
        elif mode == "unknown key":
            loop = T.Parallel(block, N, annotations={"parallel_loop_layout": None})
        else:
            loop = T.Parallel(block, N, loop_layout=T.Fragment((block,), forward_fn=lambda i: (i, 0)))
        for i, j in loop:
            row = bx * block + i
            tile[i, j] = T.if_then_else(row < M, X[idx[T.min(row, M - 1)], j], 0)
        for i, j in T.Parallel(block, N):
            if bx * block + i < M:
                Y[bx * block + i, j] = tile[i, j]
    return Y


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("M, N", [(37, 8), (1, 1)])
def test_parallel_loop_keywords_are_recorded_and_change_nothing(backend, M, N):
    device = _device(backend)
    torch.manual_seed(M)
    X, idx = torch.randn(50, N), torch.randint(0, 50, (M,), dtype=torch.int32)
    torch.testing.assert_close(gathered_rows(X.to(device), idx.to(device)).cpu(), X[idx.long()])
    hints = [str(h) for h in gathered_rows.specialize(X, idx).attrs["tile_nb.hints"]]
    assert [h.split(" (not applied")[0] for h in hints] == [
        "T.Parallel(coalesced_width=4)", "T.Parallel(loop_layout=T.Fragment(...))",
        "T.Parallel(prefer_async=True)"]


@pytest.mark.parametrize("mode, refusal", [
    ("in flight", r"\{'parallel_async_without_async_commit_wait': True\}\): copies that stay in flight until "
                  r"the kernel's T.ptx_commit_group / T.ptx_wait_group are not supported yet"),
    ("unknown key", r"tile_nb knows no loop annotation 'parallel_loop_layout'"),
    ("bad layout", r"loop_layout=\.\.\.\): expected a T.Fragment of 2 dims"),
])
def test_parallel_loop_keywords_that_would_change_the_program_are_refused(mode, refusal):
    with pytest.raises(DSLError, match=refusal) as info:
        gathered_rows.specialize(torch.randn(50, 8), torch.zeros(37, dtype=torch.int32), mode=mode)
    assert info.value.lineno is not None   # at the user's T.Parallel line
