"""Small pieces of tilelang's language and host API (issue 30's blockers): the `scope=` argument of the
allocations, `T.disable_warp_group_reg_alloc()` / `T.no_set_max_nreg()` (recorded hints),
`tilelang.language.dtypes._TORCH_DTYPE_TO_STR`, `Profiler.func`, and `tilelang.jit(compile_flags=...)`.
Kernels are checked against torch on the interpreter, built for sm_90a, and on the GPU (marked gpu)."""
import re

import pytest
import torch

import tile_nb
import tile_nb.language as T
import tile_nb.tilelang as tl
from tile_nb.errors import DSLError
from tile_nb.tilelang import UnsupportedTilelangAPI

BACKENDS = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


@tile_nb.jit
def scoped(X, block: int = 32, shared_scope: str = "shared", hint: str = "disable"):
    N = T.dynamic("N")
    D = T.const("D")
    X: T.Tensor[[N, D], T.float32]
    Y = T.empty((N, D), T.float32)
    with T.Kernel(T.ceildiv(N, block), threads=128) as bx:
        if hint == "disable":
            T.disable_warp_group_reg_alloc()
        else:
            T.no_set_max_nreg()
        xs = T.alloc_shared((block, D), T.float32, shared_scope)          # tilelang's positional scope
        xf = T.alloc_fragment((block, D), T.float32, scope="local.fragment")
        scale = T.alloc_fragment((1,), T.float32, "local")                # a per-thread array, as in stream-K
        bias = T.alloc_local((1,), T.float32, scope="local")
        scale[0] = 2.0
        bias[0] = scale[0] - 3.5
        T.copy(X[bx * block, 0], xs)
        for i, j in T.Parallel(block, D):
            xf[i, j] = xs[i, j] * scale[0] + bias[0]
        T.copy(xf, Y[bx * block, 0])
    return Y


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shared_scope,hint", [("shared", "disable"), ("shared.dyn", "no_set_max_nreg")])
@pytest.mark.parametrize("N,D", [(37, 5), (1, 1), (64, 16)])
def test_allocation_scopes(backend, shared_scope, hint, N, D):
    if backend == "cuda" and not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    torch.manual_seed(N * D)
    x = torch.randn(N, D, device=backend)
    y = scoped(x, shared_scope=shared_scope, hint=hint)
    torch.testing.assert_close(y, x * 2.0 - 1.5, atol=1e-6, rtol=1e-6)


def test_register_hint_is_recorded_and_the_kernel_builds_for_sm_90a():
    x = torch.randn(37, 5)
    hints = list(scoped.specialize(x).attrs["tile_nb.hints"])
    assert len(hints) == 1 and hints[0].startswith("disable_warp_group_reg_alloc()")
    assert list(scoped.specialize(x, hint="other").attrs["tile_nb.hints"])[0].startswith(
        "disable_warp_group_reg_alloc()")
    source = scoped.compile(x, target="sm_90a").cuda_source
    assert "scoped_kernel" in source and "setmaxnreg" not in source


@tile_nb.jit
def bad_scope(X, which: str = "shared"):
    N = T.const("N")
    X: T.Tensor[[N], T.float32]
    with T.Kernel(1, threads=32):
        if which == "shared":
            T.alloc_shared((N,), T.float32, scope="global")  # error: T.alloc_shared(scope=...)
        elif which == "fragment":
            T.alloc_fragment((N,), T.float32, "shared")      # error: T.alloc_fragment(scope=...)
        else:
            T.alloc_local((N,), T.float32, "local.var")       # error: T.alloc_local(scope=...)


@pytest.mark.parametrize("which,line_text", [("shared", 'scope="global"'), ("fragment", '"shared")'),
                                             ("local", '"local.var"')])
def test_unknown_scope_is_refused_at_its_line(which, line_text):
    with pytest.raises(DSLError) as info:
        bad_scope(torch.zeros(4), which=which)
    err = info.value
    assert "(scope=...): expected one of" in err.message and "got '" in err.message
    import linecache

    assert line_text in linecache.getline(err.filename, err.lineno)


def test_register_hint_outside_a_kernel_is_refused():
    @tile_nb.jit
    def outside(X):
        N = T.const("N")
        X: T.Tensor[[N], T.float32]
        T.disable_warp_group_reg_alloc()
        with T.Kernel(1, threads=32):
            X[0] = 1.0

    with pytest.raises(DSLError, match=r"must be called inside `with T\.Kernel"):
        outside(torch.zeros(4))


# -- tilelang.language.dtypes --------------------------------------------------------------------------------
def test_torch_dtype_table():
    from tile_nb.tilelang.language.dtypes import _TORCH_DTYPE_TO_STR, dtype

    assert _TORCH_DTYPE_TO_STR[torch.float16] == "float16"
    assert _TORCH_DTYPE_TO_STR[torch.bfloat16] == "bfloat16"
    assert _TORCH_DTYPE_TO_STR[torch.int8] == "int8" and _TORCH_DTYPE_TO_STR[torch.bool] == "bool"
    assert _TORCH_DTYPE_TO_STR[torch.float8_e4m3fn] == "float8_e4m3fn"
    assert dtype(_TORCH_DTYPE_TO_STR[torch.float32]) is T.float32
    assert dtype(torch.float16) is T.float16 and dtype("float") is T.float32
    for torch_dt, name in _TORCH_DTYPE_TO_STR.items():   # every entry round-trips through torch
        assert T.dtype(name).as_torch() is torch_dt


# -- Profiler.func -------------------------------------------------------------------------------------------
@tl.jit(out_idx=[-1])
def _scale_factory(N, factor=3.0):
    @T.prim_func
    def main(X: T.Tensor((N,), T.float32), Y: T.Tensor((N,), T.float32)):
        with T.Kernel(T.ceildiv(N, 32), threads=32) as bx:
            for i in T.Parallel(32):
                if bx * 32 + i < N:
                    Y[bx * 32 + i] = X[bx * 32 + i] * factor
    return main


def test_profiler_func_is_the_kernel():
    kernel = _scale_factory(45)
    profiler = kernel.get_profiler()
    x = torch.randn(45)
    torch.testing.assert_close(profiler.func(x), x * 3.0)
    torch.testing.assert_close(profiler(x), x * 3.0)
    out = profiler.run_once()
    assert out.shape == (45,)
    with pytest.raises(UnsupportedTilelangAPI, match=r"tilelang Profiler\.no_such_thing"):
        profiler.no_such_thing


# -- compile_flags -------------------------------------------------------------------------------------------
TILELANG_FLAGS = ["-O3", "-Wno-deprecated-declarations", "-U__CUDA_NO_HALF_OPERATORS__",
                  "-U__CUDA_NO_HALF_CONVERSIONS__", "-U__CUDA_NO_HALF2_OPERATORS__",
                  "-U__CUDA_NO_BFLOAT16_CONVERSIONS__", "--expt-relaxed-constexpr", "--expt-extended-lambda",
                  "--ptxas-options=-v,--register-usage-level=10", "-DNDEBUG"]


def test_compile_flags_map_onto_build_options():
    from tile_nb.tilelang.flags import compile_flag_options

    assert compile_flag_options(TILELANG_FLAGS) == {"ptxas_options": ["--register-usage-level=10"]}
    assert compile_flag_options("-O3 --use_fast_math") == {"fast_math": True}
    assert compile_flag_options(None) == {}
    assert compile_flag_options(["--fmad=false"]) == {"fmad": False}
    assert compile_flag_options("--fmad=true") == {"fmad": True}


def _multiply_add(**jit_options):
    @tl.jit(**jit_options)
    def multiply_add(X, Y, Z):
        N = T.const("N")
        X: T.Tensor((N,), T.float32)
        Y: T.Tensor((N,), T.float32)
        Z: T.Tensor((N,), T.float32)
        with T.Kernel(T.ceildiv(N, 32), threads=32) as bx:
            for i in T.Parallel(32):
                if bx * 32 + i < N:
                    Z[bx * 32 + i] = X[bx * 32 + i] * Y[bx * 32 + i] + Z[bx * 32 + i]

    return multiply_add


def test_device_compile_flags_pass_config_keeps_multiply_and_add_apart():
    """fla's tilelang kernels ask `pass_configs={TL_DEVICE_COMPILE_FLAGS: ['--fmad=false']}`: the build must
    not contract x * y + z into one FMA (its rounding differs), which the PTX shows."""
    from tile_nb.backend import cuda_compile

    plain = _multiply_add()
    unfused = _multiply_add(pass_configs={tl.PassConfigKey.TL_DEVICE_COMPILE_FLAGS: ["--fmad=false"]})
    assert unfused.compile_options == {"fmad": False}
    x, y, z = torch.randn(37), torch.randn(37), torch.randn(37)
    expected = x * y + z
    unfused(x, y, z)
    torch.testing.assert_close(z, expected)
    if cuda_compile.available_compiler("auto") is None:
        pytest.skip("no CUDA compiler here to show the PTX")
    for kernel, fused in ((plain, True), (unfused, False)):
        ptx = kernel.compile(N=37).compiled().ptx     # what the build's own compile kept
        assert ptx
        assert bool(re.search(r"\bfma\.rn(\.ftz)?\.f32", ptx)) is fused
        assert bool(re.search(r"\bmul\.rn(\.ftz)?\.f32", ptx)) is not fused


def test_device_compile_flags_reach_the_compilers():
    from tile_nb.backend.cuda_compile import math_flags

    assert math_flags(fast_math=True, fmad=False) == ["--use_fast_math", "--fmad=false"]
    assert math_flags(fast_math=False) == []


def test_unknown_compile_flags_are_refused_by_name():
    with pytest.raises(UnsupportedTilelangAPI) as info:
        tl.jit(compile_flags=["-O3", "-G", "--fmad=false", "-lineinfo"])
    assert "'-G', '-lineinfo'" in str(info.value) and "'-O3'" not in str(info.value)
    with pytest.raises(UnsupportedTilelangAPI, match=r"tilelang\.compile\(compile_flags=\['-G'\]\)"):
        tl.compile(object(), compile_flags=["-O3", "-G"])
    with pytest.raises(UnsupportedTilelangAPI, match="different math"):
        tl.jit(compile_flags=["--use_fast_math"], pass_configs={tl.PassConfigKey.TL_ENABLE_FAST_MATH: False})


def _flagged():
    @tl.jit(compile_flags=TILELANG_FLAGS + ["--use_fast_math"])
    def flagged(X):
        N = T.const("N")
        X: T.Tensor((N,), T.float32)
        Y = T.empty((N,), T.float32)
        with T.Kernel(T.ceildiv(N, 64), threads=64) as bx:
            for i in T.Parallel(64):
                if bx * 64 + i < N:
                    Y[bx * 64 + i] = T.exp(X[bx * 64 + i])
        return Y

    return flagged


def test_compile_flags_reach_the_build():
    flagged = _flagged()
    assert flagged.compile_options == {"fast_math": True, "ptxas_options": ["--register-usage-level=10"]}
    x = torch.randn(45)
    torch.testing.assert_close(flagged(x), torch.exp(x))
    kernel = flagged.compile(N=45).compiled()     # tilelang's compile binds N; tile_nb builds for sm_90a
    assert "flagged_kernel" in kernel.cuda_source and "sm_90" in str(kernel.target)
    # a CUDA compiler is here: ptxas took --register-usage-level=10
    if kernel.compiler:
        assert kernel.cubin


@pytest.mark.gpu
def test_compile_flags_on_gpu():
    flagged = _flagged()
    x = torch.randn(1000, device="cuda")
    torch.testing.assert_close(flagged(x), torch.exp(x), atol=1e-5, rtol=1e-5)


# -- refusals with their reason ------------------------------------------------------------------------------
def test_get_thread_binding_only_chooses_warp_groups():
    """tilelang's `tx = T.get_thread_binding()` is tile_nb's (language/sync.py): `if tx < 128:` chooses warp
    groups; any per-thread use is refused with the reason (tests/test_warp_specialize.py runs both)."""
    import tile_nb.language
    import tile_nb.tilelang.language as TL

    assert TL.get_thread_binding is tile_nb.language.get_thread_binding


def test_extern_code_names_are_tile_nb_s_and_other_names_are_refused():
    """T.import_source / T.call_extern / T.access_ptr are tile_nb's (tests/test_extern_source.py runs them); a
    name tile_nb lacks is refused naming it."""
    import tile_nb.tilelang.language as TL

    assert (TL.import_source, TL.call_extern, TL.access_ptr) == (T.import_source, T.call_extern, T.access_ptr)
    with pytest.raises(UnsupportedTilelangAPI, match=r"does not support tilelang.language.ptx_cp_async"):
        TL.ptx_cp_async
    assert TL.get_block_binding is T.get_block_binding and TL.im2col is T.im2col and TL.int4 == "int4"


# -- requires_package (tilelang.testing and, while the mapping is installed, tvm.testing) --------------------
def test_requires_package_marks_a_skip_only_for_a_package_that_cannot_be_imported():
    from tile_nb.tilelang.testing import requires_package

    calls = []

    @requires_package("torch", "no_such_package_tile_nb", "no_such_package_tile_nb.sub")
    def check():
        calls.append(1)

    marks = [(m.name, m.args[0], m.kwargs["reason"]) for m in check.pytestmark]
    assert sorted(marks) == [("skipif", False, "Cannot import 'torch'"),
                             ("skipif", True, "Cannot import 'no_such_package_tile_nb'"),
                             ("skipif", True, "Cannot import 'no_such_package_tile_nb.sub'")]
    check()  # only marked, as in tilelang's TVM: a direct call runs
    assert calls == [1]


def test_requires_package_skips_under_pytest(tmp_path):
    import subprocess
    import sys

    test = tmp_path / "test_needs.py"
    test.write_text(
        "import tilelang.testing\nfrom tilelang import tvm\n\n"
        "@tilelang.testing.requires_package('no_such_package_tile_nb')\ndef test_a():\n    assert False\n\n"
        "@tvm.testing.requires_package('no_such_package_tile_nb')\ndef test_b():\n    assert False\n\n"
        "@tvm.testing.requires_package('torch')\ndef test_c():\n    assert True\n"
    )
    import os
    from pathlib import Path

    root = str(Path(tile_nb.__file__).resolve().parents[1])  # this checkout's tile_nb in the child too
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    command = [sys.executable, "-m", "tile_nb.run", "--shadow", "--pytest", "--", str(test), "-q",
               "-p", "no:cacheprovider"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)
    assert "1 passed, 2 skipped" in done.stdout, done.stdout + done.stderr


def test_tvm_testing_requires_package_only_while_the_mapping_is_installed():
    import tvm.testing

    from tile_nb.tilelang import mapping
    from tile_nb.tilelang.testing import requires_package

    assert not hasattr(tvm.testing, "requires_package")  # Apache TVM 0.27 has none
    try:
        mapping.install(shadow=True)
        assert tvm.testing.requires_package is requires_package
    finally:
        mapping.uninstall()
    assert not hasattr(tvm.testing, "requires_package")


# -- tilelang.testing.process_func / regression (its examples' regression_*.py files) ------------------------
def test_regression_script_runs_and_prints_its_latencies(tmp_path):
    """A regression file in tilelang's form, with its example beside it, run by `tile_nb.run --cpu`: every
    `regression_*` function runs in name order and the table lists each latency process_func recorded."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    (tmp_path / "example_add.py").write_text(
        "import torch\nimport tilelang\nimport tilelang.language as T\n\n"
        "@tilelang.jit\ndef add(A, B, block: int = 32):\n"
        "    M = T.const('M')\n    A: T.Tensor((M,), T.float32)\n    B: T.Tensor((M,), T.float32)\n"
        "    C = T.empty((M,), T.float32)\n"
        "    with T.Kernel(T.ceildiv(M, block), threads=32) as bx:\n"
        "        for i in T.Parallel(block):\n"
        "            if bx * block + i < M:\n"
        "                C[bx * block + i] = A[bx * block + i] + B[bx * block + i]\n"
        "    return C\n\n"
        "def run_regression_perf(M=100):\n"
        "    a, b = torch.randn(M, device='cuda'), torch.randn(M, device='cuda')\n"
        "    torch.testing.assert_close(add(a, b), a + b)\n"
        "    from tilelang.profiler import do_bench\n"
        "    return do_bench(lambda: add(a, b))\n")
    (tmp_path / "regression_example_add.py").write_text(
        "import tilelang.testing\nimport example_add\n\n"
        "def regression_example_add_small():\n"
        "    tilelang.testing.process_func(example_add.run_regression_perf, M=7)\n\n"
        "def regression_example_add():\n"
        "    tilelang.testing.process_func(example_add.run_regression_perf)\n\n"
        "if __name__ == '__main__':\n    tilelang.testing.regression()\n")
    root = str(Path(tile_nb.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    command = [sys.executable, "-m", "tile_nb.run", "--shadow", "--cpu", "regression_example_add.py"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("[1/2] example_add ") and lines[1].startswith("[2/2] example_add_small ")
    table = lines[lines.index("| case | latency (ms) |"):]
    assert [row.split("|")[1].strip() for row in table[2:]] == ["example_add", "example_add"]
    assert all(float(row.split("|")[2]) > 0 for row in table[2:])


def test_process_func_refuses_a_latency_that_is_not_positive():
    from tile_nb.tilelang.testing import process_func

    def run_regression_perf():
        return None

    with pytest.raises(ValueError, match=r"run_regression_perf.* returned None as its latency"):
        process_func(run_regression_perf)


def test_sparse_layout_factors():
    """`tilelang.cuda.intrinsics.sparse_layout`: values per metadata integer (4 bits per group of 4, 2 for
    float32) and the compressor's thread replication."""
    from tile_nb.tilelang.cuda.intrinsics import sparse_layout as sl

    assert sl.get_e_factor(T.float16, T.int16) == 16 and sl.get_e_factor(T.int8, T.int32) == 32
    assert sl.get_e_factor(T.float32, T.int16) == 8 and sl.get_e_factor(T.bfloat16, T.int8) == 8
    assert sl.GROUP_CONFIG[T.float16] == (2, 4) and sl.GROUP_CONFIG[T.float32] == (1, 2)
    assert sl.get_e_replicate_factor(T.int8) == 1 and sl.get_e_replicate_factor(T.float16) == 2
    assert tl.cuda.intrinsics.sparse_layout is sl


def test_do_bench_takes_tilelang_s_arguments_and_refuses_others():
    """tilelang.profiler.do_bench has tilelang's signature: its keywords are accepted (return_mode checked),
    an unknown keyword is a TypeError as in tilelang (gdn's examples pass the function's own arguments, which
    tilelang refuses too), not silently dropped."""
    from tile_nb.tilelang.profiler import do_bench

    calls = []
    assert do_bench(lambda: calls.append(1), warmup=5, rep=10, backend="cupti", return_mode="min",
                    fast_flush=False, cache_size=64, device=None, early_stop_baseline=None) >= 0
    assert calls == [1]
    with pytest.raises(TypeError, match="unexpected keyword argument 'chunk_size'"):
        do_bench(lambda: None, chunk_size=64)
    with pytest.raises(ValueError, match=r"return_mode='average'"):
        do_bench(lambda: None, return_mode="average")
