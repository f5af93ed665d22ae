"""tilelang's CUDA source callbacks (`tilelang.engine.callback.register_cuda_postproc_callback`, applied by
tile_nb/backend/postproc.py before the CUDA compile).

The callback rewrites the generated source, so it can change results: the test callback turns the kernel's
`+ 3.0` into `+ 4.0`. Checked without a GPU: the source the kernel keeps and the PTX compiled from it (nvcc or
NVRTC) hold 4.0; kernels compiled before it are not reused (memory caches) and nothing is written to the disk
cache while it is registered; the interpreter refuses to run a kernel while one is registered. On the GPU
(marked gpu): the launch gives X + 4 with the callback, X + 3 before and after it, through the cached call
path.
"""
import pytest
import torch

import tile_nb.tilelang as tilelang
import tile_nb.tilelang.language as T
from tile_nb.backend import postproc
from tile_nb.jit import InterpreterCallbackError
from tile_nb.runtime.cache import cache_dir
from tile_nb.tilelang import UnsupportedTilelangAPI
from tile_nb.tilelang.engine.callback import register_cuda_postproc_callback, register_hip_postproc_callback

THREE, FOUR = "0x1.8p+1f", "0x1p+2f"      # how TVM writes 3.0f and 4.0f in the CUDA source


@pytest.fixture(autouse=True)
def no_callback_left(tmp_path, monkeypatch):
    monkeypatch.setenv("TILE_NB_CACHE_DIR", str(tmp_path / "cache"))
    postproc.clear_cuda_postproc()
    yield
    postproc.clear_cuda_postproc()


@tilelang.jit
def add_three(X, block: int = 64):
    N = T.dynamic("N")
    X: T.Tensor((N,), T.float32)
    Y = T.empty((N,), T.float32)
    with T.Kernel(T.ceildiv(N, block), threads=64) as bx:
        for i in T.Parallel(block):
            if bx * block + i < N:
                Y[bx * block + i] = X[bx * block + i] + 3.0
    return Y


def four_instead_of_three(code, target):
    assert THREE in code, "the test's premise: TVM writes 3.0f this way"
    return "// rewritten by the test's callback\n" + code.replace(THREE, FOUR)


@pytest.mark.parametrize("N", [1, 77, 200])
def test_importing_the_callbacks_changes_nothing(N):
    x = torch.randn(N)
    torch.testing.assert_close(add_three(x), x + 3.0, rtol=0, atol=0)


def test_the_callback_rewrites_what_is_compiled():
    before = add_three.compile(block=32).compiled().cuda_source
    assert THREE in before and FOUR not in before
    register_cuda_postproc_callback(four_instead_of_three)
    kernel = add_three.compile(block=32).compiled()                 # not the kernel compiled before
    assert kernel.cuda_source.startswith("// rewritten by the test's callback")
    assert FOUR in kernel.cuda_source and THREE not in kernel.cuda_source
    if kernel.cubin is not None:                                # nvcc or NVRTC compiled the rewritten source
        assert "0f40800000" in kernel.ptx and "0f40400000" not in kernel.ptx   # 4.0, not 3.0
    # tilelang's own check: get_kernel_source() shows the callback's result
    assert FOUR in add_three.compile(block=32).get_kernel_source()
    postproc.clear_cuda_postproc()
    assert add_three.compile(block=32).compiled().cuda_source == before


def test_the_decorator_forms_and_override():
    @register_cuda_postproc_callback()
    def first(code, target):
        return "// first\n" + code

    assert add_three.compile().compiled().cuda_source.startswith("// first")
    with pytest.raises(ValueError, match="already registered"):
        @register_cuda_postproc_callback(override=False)
        def second(code, target):
            return code

    @register_cuda_postproc_callback(True)
    def third(code, target):
        assert target.kind.name == "cuda" and "sm_" in str(target.attrs["arch"])
        return "// third\n" + code

    assert add_three.compile().compiled().cuda_source.startswith("// third")
    tilelang.register_cuda_postproc(lambda code, target: "// fourth\n" + code)
    assert add_three.compile().compiled().cuda_source.startswith("// fourth")


def test_a_callback_must_return_the_source():
    register_cuda_postproc_callback(lambda code, target: None)
    with pytest.raises(TypeError, match="must return the CUDA source as a str; it returned NoneType"):
        add_three.compile().compiled()


def test_nothing_reaches_the_disk_cache_while_a_callback_is_registered():
    register_cuda_postproc_callback(four_instead_of_three)
    kernel = add_three.compile(block=32).compiled()
    assert FOUR in kernel.cuda_source
    assert not (cache_dir() / "v1").exists() or not any((cache_dir() / "v1").rglob("kernel.cu"))
    postproc.clear_cuda_postproc()
    assert THREE in add_three.compile(block=32).compiled().cuda_source


def test_the_interpreter_refuses_while_a_callback_is_registered():
    x = torch.randn(40)
    torch.testing.assert_close(add_three(x), x + 3.0)            # the cached call path knows these shapes now
    register_cuda_postproc_callback(four_instead_of_three)
    with pytest.raises(InterpreterCallbackError) as info:
        add_three(x)
    message = str(info.value)
    assert "add_three() cannot run on the CPU interpreter" in message
    assert "four_instead_of_three" in message and "cannot apply the callback" in message
    postproc.clear_cuda_postproc()
    torch.testing.assert_close(add_three(x), x + 3.0)


def test_hip_and_other_callbacks_are_refused_when_registered():
    with pytest.raises(UnsupportedTilelangAPI, match="register_hip_postproc"):
        @register_hip_postproc_callback
        def hip(code, target):
            return code
    with pytest.raises(UnsupportedTilelangAPI, match="register_c_postproc"):
        tilelang.register_c_postproc(lambda code, target: code)
    with pytest.raises(UnsupportedTilelangAPI, match="tilelang.engine.lower"):
        tilelang.engine.lower  # noqa: B018


@pytest.mark.gpu
@pytest.mark.parametrize("N", [1, 77, 5000])
def test_the_callback_changes_the_gpu_result(N):
    x = torch.randn(N, device="cuda")
    torch.testing.assert_close(add_three(x), x + 3.0)            # launched, then kept by the cached call path
    register_cuda_postproc_callback(four_instead_of_three)
    torch.testing.assert_close(add_three(x), x + 4.0)            # the kept launch was forgotten
    postproc.clear_cuda_postproc()
    torch.testing.assert_close(add_three(x), x + 3.0)
