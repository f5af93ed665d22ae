"""Calls a kernel cannot run as given: each gets an error that names the kernel, the argument, its value and
what is expected, pointing at the user's line (never a raw torch or TVM error). Zero-size dims run nothing, as
torch ops on empty tensors do."""
import warnings

import pytest
import torch

import tile_nb
import tile_nb.language as T
from tests.kernels.seed import gemm
from tile_nb import errors

SM90 = "cuda -arch=sm_90a"


@tile_nb.jit
def scale(X, Y, block: int = 64):
    N = T.const('N')
    X: T.Tensor[[N], T.float32]
    Y: T.Tensor[[N], T.float32]
    with T.Kernel(T.ceildiv(N, block), threads=64) as bx:
        tile = T.alloc_fragment((block,), T.float32)
        T.copy(X[bx * block], tile)
        for i in T.Parallel(block):
            tile[i] = tile[i] * 2.0
        T.copy(tile, Y[bx * block])


@tile_nb.jit
def doubled(X, block: int = 64):
    N = T.const('N')
    X: T.Tensor[[N], T.float32]
    Y = T.empty((N,), T.float32)
    with T.Kernel(T.ceildiv(N, block), threads=64) as bx:
        tile = T.alloc_fragment((block,), T.float32)
        T.copy(X[bx * block], tile)
        for i in T.Parallel(block):
            tile[i] = tile[i] * 2.0
        T.copy(tile, Y[bx * block])
    return Y


@tile_nb.jit
def first_eight(X):
    N = T.const('N')
    X: T.Tensor[[N], T.float32]
    out = T.empty((8,), T.float32)
    with T.Kernel(T.ceildiv(N, 64), threads=32) as bx:
        if bx == 0:
            for i in T.Parallel(8):
                out[i] = X[i]
    return out


@tile_nb.jit
def shrunk_grid(X, Y):
    N = T.const('N')
    X: T.Tensor[[N], T.float32]
    Y: T.Tensor[[N], T.float32]
    with T.Kernel(N - 4, threads=32) as bx:
        Y[bx] = X[bx]


def _points_at(err, text: str):
    """The error shows the user's line holding `text`, and no tile_nb internals."""
    assert err.source_line() is not None and text in err.source_line(), err.source_line()
    assert err.filename.endswith(("test_call_errors.py", "seed.py")), err.filename
    assert "tile_nb/" not in str(err)


# ---- consts given as keywords ------------------------------------------------------------------------------

@pytest.mark.parametrize("call", [lambda: scale.compile(N=-128, target=SM90), lambda: scale.specialize(N=-1),
                                  lambda: gemm.compile(M=-128, N=128, K=64, target=SM90)])
def test_a_negative_const_keyword_is_refused_at_its_t_const_line(call):
    with pytest.raises(errors.ConstValueError) as info:
        call()
    err = info.value
    assert "const '" in err.message and "must be >= 0 (it stands for a tensor dim)" in err.message
    assert "=-1" in err.message or "=-128" in err.message
    assert "() const '" in err.message and err.message.split("(")[0] in ("scale", "gemm")
    _points_at(err, "T.const(")


def test_a_const_keyword_must_be_an_int():
    with pytest.raises(errors.ConstValueError, match=r"scale\(\) const 'N' must be an int; got float 1.5"):
        scale.specialize(N=1.5)
    with pytest.raises(errors.ConstValueError, match="must be an int; got bool True"):
        scale.specialize(N=True)

    class Size:  # an integer type that is not int (numpy's int64, say)
        def __index__(self):
            return 96

    assert scale.specialize(N=Size()).script() == scale.specialize(N=96).script()


def test_a_grid_extent_that_comes_out_negative_is_refused_at_the_t_kernel_line():
    with pytest.raises(
        errors.DSLError, match=r"T.Kernel grid extent 0 is -2; a grid extent must be >= 0"
    ) as info:
        shrunk_grid(torch.zeros(2), torch.zeros(2))
    assert "N=2" in info.value.hint
    _points_at(info.value, "T.Kernel(N - 4")


# ---- zero-size dims ----------------------------------------------------------------------------------------

def test_a_zero_size_call_runs_nothing_and_warns_nothing():
    X, Y = torch.zeros(0), torch.zeros(0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # not even the check that the GPU lowering would take it
        assert scale(X, Y) is None
        out = doubled(X)
    assert out.shape == (0,) and out.dtype == torch.float32
    assert scale.stats["compilations"] == 0 and doubled.stats["compilations"] == 0


def test_a_zero_size_contraction_still_runs_the_kernel():
    """K=0 leaves the grid whole: the k-loop runs zero times and C is A @ B,
    all zeros (torch's result too)."""
    A, B = torch.randn(70, 0).half(), torch.randn(0, 33).half()
    C = torch.full((70, 33), 5.0)
    gemm(A, B, C)
    torch.testing.assert_close(C, (A.float() @ B.float()))


def test_compiling_for_an_empty_grid_is_refused_at_the_t_kernel_line():
    with pytest.raises(errors.EmptyGridError) as info:
        scale.compile(N=0, target=SM90)
    err = info.value
    assert "scale() launches no block" in err.message and "blockIdx.x" in err.message and "= 0" in err.message
    assert "N" in err.message and "there is no kernel to compile" in err.message
    _points_at(err, "T.Kernel(")
    with pytest.raises(errors.EmptyGridError):
        gemm.compile(M=0, N=128, K=64, target=SM90)


def test_an_empty_grid_with_an_output_it_would_never_write_is_refused():
    with pytest.raises(
        errors.EmptyGridError, match=r"its output 'out' of shape \(8,\) would never be written"
    ) as info:
        first_eight(torch.zeros(0))
    _points_at(info.value, "T.Kernel(")
    torch.testing.assert_close(first_eight(torch.arange(10.0)), torch.arange(8.0))


# ---- tensors without data, not dense, quantized ------------------------------------------------------------

def test_meta_tensors_are_refused_with_what_tile_nb_runs_on():
    with pytest.raises(errors.UnsupportedTensorError) as info:
        scale(torch.empty(100, device="meta"), torch.empty(100, device="meta"))
    err = info.value
    assert "scale() argument 'X' is on the meta device" in err.message
    assert "tensors on the meta device have no data; tile_nb runs on cpu or cuda tensors" in err.message
    _points_at(err, "X: T.Tensor[[N], T.float32]")


def test_meta_tensors_are_refused_after_the_same_shapes_ran_on_the_cpu():
    scale(torch.ones(37), torch.zeros(37))  # the cached path knows these shapes now
    with pytest.raises(errors.UnsupportedTensorError, match="tensors on the meta device have no data"):
        scale(torch.empty(37, device="meta"), torch.empty(37, device="meta"))


@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta")
@pytest.mark.parametrize("to_sparse", [torch.Tensor.to_sparse, torch.Tensor.to_sparse_csr])
def test_sparse_tensors_are_refused(to_sparse):
    A = to_sparse(torch.randn(64, 32).half())
    B, C = torch.randn(32, 16).half(), torch.zeros(64, 16)
    gemm(torch.randn(64, 32).half(), B, C)  # and after a dense call with these shapes (the cached path)
    with pytest.raises(errors.UnsupportedTensorError) as info:
        gemm(A, B, C)
    err = info.value
    assert f"gemm() argument 'A' has layout {A.layout}" in err.message and "torch.strided" in err.message
    assert err.hint == "pass A.to_dense()"
    _points_at(err, "A: T.Tensor[[M, K], T.float16]")


@pytest.mark.filterwarnings("ignore:torch.quantize_per_tensor")
def test_quantized_tensors_are_refused():
    Q = torch.quantize_per_tensor(torch.randn(40), 0.1, 0, torch.qint8)
    with pytest.raises(
        errors.UnsupportedTensorError, match=r"argument 'X' is a quantized tensor \(torch.qint8\)"
    ):
        scale(Q, torch.zeros(40))


# ---- autograd ----------------------------------------------------------------------------------------------

def test_a_written_tensor_that_requires_grad_is_refused_with_how_to_detach():
    X, Y = torch.randn(50), torch.zeros(50, requires_grad=True)
    with pytest.raises(errors.RequiresGradError) as info:
        scale(X, Y)
    err = info.value
    assert (
        "scale() writes argument 'Y', which requires grad: autograd is not supported for tile_nb kernels yet"
        in err.message
    )
    assert "Y.detach()" in err.hint and "torch.no_grad()" in err.hint
    _points_at(err, "Y: T.Tensor[[N], T.float32]")
    assert torch.equal(Y.detach(), torch.zeros(50))  # nothing was written

    scale(X, Y.detach())  # the hint works: the result lands in Y's memory
    torch.testing.assert_close(Y.detach(), X * 2)


def test_a_written_non_leaf_that_requires_grad_is_refused_too():
    w = torch.ones(50, requires_grad=True)
    with pytest.raises(errors.RequiresGradError, match="writes argument 'Y'"):
        scale(torch.randn(50), w * 3)


def test_writing_a_tensor_that_requires_grad_is_allowed_under_no_grad():
    X, Y = torch.randn(50), torch.zeros(50, requires_grad=True)
    with torch.no_grad():
        scale(X, Y)
    torch.testing.assert_close(Y.detach(), X * 2)


def test_a_read_only_input_may_require_grad_and_nothing_is_recorded():
    A = torch.randn(33, 48).half().requires_grad_()
    B, C = torch.randn(48, 17).half(), torch.zeros(33, 17)
    gemm(A, B, C)
    torch.testing.assert_close(C, A.detach().float() @ B.float(), rtol=1e-3, atol=1e-3)
    # the interpreter, like the GPU, is invisible to autograd
    assert not C.requires_grad and C.grad_fn is None
    out = doubled(torch.randn(5, requires_grad=True))
    assert not out.requires_grad


def test_requires_grad_is_checked_on_the_cached_interpreter_path_too():
    X = torch.randn(29)
    scale(X, torch.zeros(29))
    with pytest.raises(errors.RequiresGradError):
        scale(X, torch.zeros(29, requires_grad=True))


def test_the_new_errors_pickle_with_their_location():
    import pickle

    with pytest.raises(errors.ConstValueError) as info:
        scale.specialize(N=-3)
    again = pickle.loads(pickle.dumps(info.value))
    assert type(again) is errors.ConstValueError and str(again) == str(info.value)


# ---- on the GPU --------------------------------------------------------------------------------------------

@pytest.mark.gpu
def test_gpu_a_zero_size_call_launches_nothing():
    X, Y = torch.zeros(0, device="cuda"), torch.zeros(0, device="cuda")
    assert scale(X, Y) is None
    assert scale(X, Y) is None  # the cached path too
    out = doubled(X)
    assert out.shape == (0,) and out.is_cuda
    torch.cuda.synchronize()
    X = torch.randn(300, device="cuda")
    Y = torch.zeros(300, device="cuda")
    scale(X, Y)
    torch.testing.assert_close(Y, X * 2)


@pytest.mark.gpu
def test_gpu_a_written_tensor_that_requires_grad_is_refused():
    X = torch.randn(50, device="cuda")
    Y = torch.zeros(50, device="cuda", requires_grad=True)
    with pytest.raises(errors.RequiresGradError, match="writes argument 'Y'"):
        scale(X, Y)
    scale(X.requires_grad_(), Y.detach())
    torch.testing.assert_close(Y.detach(), X.detach() * 2)
