"""tile_nb.backend on the CPU: CUDA source from TVM, cubins from NVRTC/nvcc, ptxas resource reports.

Tests that need a CUDA compiler skip with the reason when the machine has none."""
import pickle
import shutil

import pytest
from kernels.tirx_modules import add_module, rowsum_module

from tile_nb.backend import (
    CudaCompileError,
    Resources,
    available_compiler,
    build,
    compile_cuda,
    disassemble,
    parse_ptxas_log,
    resolve_target,
    toolchain,
)
from tile_nb.backend.cuda_compile import slim_source_for_nvrtc

COMPILERS = [c for c in ("nvrtc", "nvcc") if available_compiler(c) == c]
needs_compiler = pytest.mark.skipif(
    not COMPILERS, reason="neither NVRTC (cuda-bindings) nor nvcc is installed"
)


# ------------------------------------------------------------------------------------------ ptxas reports

NVCC_LOG = """\
kernel.cu(74): warning #177-D: variable "bx" was declared but never referenced
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'rowsum_kernel' for 'sm_90a'
ptxas info    : Function properties for rowsum_kernel
    8 bytes stack frame, 12 bytes spill stores, 16 bytes spill loads
ptxas info    : Used 22 registers, used 1 barriers, 1024 bytes smem, 400 bytes cmem[0]
ptxas info    : Compiling entry function 'other_kernel' for 'sm_90a'
ptxas info    : Function properties for helper
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Function properties for other_kernel
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 168 registers, 384 bytes cmem[0]
ptxas info    : Compile time = 17.4 ms
"""

NVRTC_LOG = """\
ptxas info    : 45 bytes gmem
ptxas info    : Compiling entry function 'add_kernel' for 'sm_80'
ptxas info    : Function properties for add_kernel
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 12 registers, used 0 barriers, 360 bytes cmem[0]
"""


def test_parse_ptxas_log_nvcc_form_with_two_entries_and_a_device_function():
    res = parse_ptxas_log(NVCC_LOG)
    assert set(res) == {"rowsum_kernel", "other_kernel"}          # `helper` is no entry
    assert res["rowsum_kernel"] == Resources(registers=22, shared_bytes=1024, spill_stores=12, spill_loads=16,
                                             stack_bytes=8, barriers=1)
    assert res["other_kernel"].registers == 168 and res["other_kernel"].shared_bytes == 0


def test_parse_ptxas_log_nvrtc_form():
    assert parse_ptxas_log(NVRTC_LOG) == {"add_kernel": Resources(registers=12)}


def test_parse_ptxas_log_without_report_is_empty():
    assert parse_ptxas_log("") == {}


def test_resources_round_trip_through_json_dict():
    r = Resources(registers=40, shared_bytes=2048, spill_stores=4, dynamic_shared_bytes=49152)
    assert Resources.from_dict(r.to_dict()) == r
    assert r.total_shared_bytes == 2048 + 49152
    assert "40 registers" in str(r)


# ------------------------------------------------------------------------------------------ targets

@pytest.mark.parametrize("spec, arch", [
    ("sm_80", "sm_80"),
    ("cuda -arch=sm_86", "sm_86"),
    ({"kind": "cuda", "arch": "sm_90a"}, "sm_90a"),
])
def test_resolve_target_spellings(spec, arch):
    assert str(resolve_target(spec).attrs["arch"]) == arch


def test_resolve_target_default_uses_device_or_sm90a(monkeypatch):
    from tile_nb.backend import target as target_mod

    monkeypatch.setattr(target_mod, "device_arch", lambda: None)
    assert str(resolve_target(None).attrs["arch"]) == "sm_90a"
    assert str(resolve_target("cuda").attrs["arch"]) == "sm_90a"
    monkeypatch.setattr(target_mod, "device_arch", lambda: "sm_80")
    assert str(resolve_target(None).attrs["arch"]) == "sm_80"


@pytest.mark.parametrize("bad", ["llvm", "cuda -mcpu=x", "sm_9x", {"kind": "llvm"}])
def test_resolve_target_rejects_other_kinds_with_a_message(bad):
    with pytest.raises(ValueError, match="unsupported"):
        resolve_target(bad)


def test_arch_for_capability():
    from tile_nb.backend.target import arch_for_capability

    assert arch_for_capability(9, 0) == "sm_90a"
    assert arch_for_capability(8, 6) == "sm_86"


# ------------------------------------------------------------------------------------------ NVRTC source

def test_slim_source_drops_unused_type_traits_only():
    header = (
        "#ifdef __CUDACC_RTC__\n  #include <cuda/std/cstdint>\n  #include <cuda/std/type_traits>\n"
        "  namespace std {\n    using cuda::std::is_same;\n    using cuda::std::is_same_v;\n  }\n#endif\n"
    )
    unused = header + "extern \"C\" __global__ void k(float* x) { x[0] = 1; }\n"
    used = header + "template <class T> __device__ void f() { if constexpr (std::is_same_v<T, float>) {} }\n"
    assert "type_traits" not in slim_source_for_nvrtc(unused)
    assert "cstdint" in slim_source_for_nvrtc(unused)
    assert slim_source_for_nvrtc(used) == used


# ------------------------------------------------------------------------------------------ builds

def test_build_produces_cuda_source_without_any_compiler(monkeypatch):
    from tile_nb.backend import cuda_compile, cuda_runtime_loaded

    if cuda_runtime_loaded():
        pytest.skip("with a GPU runtime TVM itself needs a compiler for the cubin")

    monkeypatch.setattr(cuda_compile, "available_compiler", lambda preference="auto": None)
    result = build(add_module(), "sm_90a")
    assert 'extern "C" __global__' in result.cuda_source and "add_kernel" in result.cuda_source
    assert result.cubin is None and result.skipped and "CUDA source only" in result.skipped
    assert result.timings["codegen"] > 0 and "cubin" not in result.timings


@needs_compiler
@pytest.mark.parametrize("compiler", COMPILERS)
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_build_elementwise_cubin_and_resources(compiler, arch):
    result = build(add_module(), arch, {"compiler": compiler})
    assert result.arch == arch
    assert result.cubin and result.cubin[:4] == b"\x7fELF"         # a cubin is an ELF image
    assert result.compiler.startswith(compiler)
    assert result.ptx and f".target {arch}" in result.ptx
    res = result.resources["add_kernel"]
    assert 0 < res.registers < 64 and res.spill_stores == res.spill_loads == 0 and res.stack_bytes == 0
    assert set(result.timings) == {"codegen", "cubin"} and result.timings["cubin"] > 0


@needs_compiler
def test_build_reports_static_shared_memory_and_barriers():
    result = build(rowsum_module(cols=256), "sm_90a")
    res = result.resources["rowsum_kernel"]
    assert res.shared_bytes == 256 * 4 and res.barriers == 1


def test_build_options_are_checked():
    with pytest.raises(ValueError, match="unknown build option"):
        build(add_module(), "sm_90a", {"fastmath": True})
    with pytest.raises(ValueError, match="compiler must be"):
        build(add_module(), "sm_90a", {"compiler": "clang"})
    with pytest.raises(ValueError, match="host must be 'llvm'.*'cuda_host'.*got 'c'"):
        build(add_module(), "sm_90a", {"host": "c"})


def test_the_host_option_joins_the_cache_key_only_when_set():
    """host='llvm' (the default) leaves the build options' dict, and so every existing kernel's cache key, as
    it was; host='cuda_host' is part of the key."""
    from tile_nb.backend.build import BuildOptions

    assert (
        "host" not in BuildOptions().to_dict()
        and "host" not in BuildOptions.from_dict({"host": "llvm"}).to_dict()
    )
    assert BuildOptions.from_dict({"host": "cuda_host"}).to_dict()["host"] == "cuda_host"


def test_cuda_host_launcher_names_the_missing_tools(monkeypatch, tmp_path):
    from tile_nb.backend import cuda_host
    from tile_nb.backend.cuda_compile import ToolMissingError

    monkeypatch.setattr(cuda_host.shutil, "which", lambda name: None)
    monkeypatch.setattr(cuda_host, "find_tool", lambda name: None)
    with pytest.raises(ToolMissingError, match="host='cuda_host' needs nvcc and ninja on PATH.*host='llvm'"):
        cuda_host.build_launcher("", "sm_90a", tmp_path)


@pytest.mark.skipif(
    not (toolchain.find_tool("nvcc") and shutil.which("ninja")), reason="needs nvcc and ninja"
)
def test_cuda_host_launcher_of_the_seed_gemm_compiles_with_nvcc(tmp_path):
    """host='cuda_host': TVM writes the host function as CUDA C++ (tensor maps encoded and the kernel
    launched by the CUDA APIs themselves, no packed calls into TVM's runtime), and nvcc builds it
    with the kernel. Without a CUDA driver here only the object file is built (linking needs
    libcuda); the GPU tests load and run it."""
    from kernels.seed import gemm_ir

    from tile_nb.backend.cuda_host import build_launcher, cuda_host_source
    from tile_nb.lower.sourcemap import split_marks
    from tile_nb.runtime.compile import _lower

    lowered, _ = _lower(
        gemm_ir(256, 256, 256, block_N=256, block_K=64, threads=256), resolve_target("sm_90a")
    )
    assert "tile_nb_src_begin" in cuda_host_source(lowered, "sm_90a")   # the runtime lowers with source marks
    source = cuda_host_source(lowered, "sm_90a", split_marks)
    assert "cudaLaunchKernelEx" in source and "cuTensorMapEncodeTiled(" in source
    assert "runtime.cuTensorMapEncodeTiled" not in source          # no packed call per tensor map
    # the launch caches (cache_launch_setup): both tensor maps and the shared-memory attribute go through them
    assert "tensormap_error = tile_nb_encode_tiled<0>(" in source
    assert "tensormap_error_1 = tile_nb_encode_tiled<1>(" in source
    assert "tile_nb_set_max_dynamic_smem<0>(::gemm_variant_kernel, cuda_device, cuda_arg_6)" in source
    path, seconds = build_launcher(source, "sm_90a", tmp_path, link=False)
    assert path.suffix == ".o" and path.stat().st_size > 10_000 and seconds > 0

    # a cp.async kernel has no tensor map to cache, only the shared-memory attribute
    lowered, _ = _lower(gemm_ir(256, 256, 256).with_attr("tile_nb.tma", 0), resolve_target("sm_90a"))
    source = cuda_host_source(lowered, "sm_90a", split_marks)
    assert "__grid_constant__ CUtensorMap" not in source and "tile_nb_encode_tiled<0>" not in source
    assert "tile_nb_set_max_dynamic_smem<0>(::gemm_variant_kernel, cuda_device, cuda_arg_6)" in source


@needs_compiler
@pytest.mark.parametrize("compiler", COMPILERS)
def test_compile_error_carries_the_log_and_pickles(compiler):
    with pytest.raises(CudaCompileError) as info:
        compile_cuda('extern "C" __global__ void k(float* x) { x[0] = undefined_name; }', "sm_90a",
                     compiler=compiler)
    err = info.value
    assert "undefined_name" in err.log and "undefined_name" in str(err)
    again = pickle.loads(pickle.dumps(err))
    assert again.log == err.log and again.arch == "sm_90a"


@needs_compiler
def test_disassemble_when_a_disassembler_exists():
    result = build(add_module(), "sm_90a")
    if not (toolchain.find_tool("cuobjdump") or toolchain.find_tool("nvdisasm")):
        assert disassemble(result.cubin) is None          # a missing tool is skipped, not an error
        pytest.skip("no cuobjdump/nvdisasm on this machine")
    sass = disassemble(result.cubin)
    assert "add_kernel" in sass and ("LDG" in sass or "ld.global" in sass.lower())


def test_toolchain_describe_never_raises():
    info = toolchain.describe()
    assert set(info) >= {"nvcc", "nvrtc", "cuobjdump", "nvdisasm"}


def _two_kernels():
    """A function with two T.Kernel: an fp16 [64, 64] tile in the first, a float32 [32, 32] tile in the second
    (8192 and 4096 bytes: each kernel is planned on its own, with its own shared pool)."""
    import tile_nb
    import tile_nb.language as T

    @tile_nb.jit
    def two(X, block: int = 64):
        N = T.const('N')
        X: T.Tensor[[N, 64], T.float16]
        Y = T.empty((N, 64), T.float16)
        Z = T.empty((N, 32), T.float32)
        with T.Kernel(T.ceildiv(N, block), threads=128) as bx:
            s = T.alloc_shared((block, 64), T.float16)
            T.copy(X[bx * block, 0], s)
            T.copy(s, Y[bx * block, 0])
        with T.Kernel(T.ceildiv(N, 32), threads=128) as bx:
            t = T.alloc_shared((32, 32), T.float32)
            for i, j in T.Parallel(32, 32):
                t[i, j] = T.cast(X[bx * 32 + i, j], T.float32)
            T.copy(t, Z[bx * 32, 0])
        return Y, Z

    return two.specialize(N=256)


def test_dynamic_shared_memory_of_each_kernel_read_from_the_ir():
    """Each T.Kernel's own figure, under the name TVM gives its kernel; not their sum for each (what reading
    the printed module once gave a function with several kernels)."""
    from tile_nb.backend.resources import dynamic_shared_by_kernel
    from tile_nb.lower import lower

    mod = lower(_two_kernels(), resolve_target("sm_90a"))
    assert dynamic_shared_by_kernel(mod) == {"two_kernel": 64 * 64 * 2, "two_kernel_1": 32 * 32 * 4}


@pytest.mark.skipif(not (toolchain.find_tool("nvcc") and toolchain.find_tool("ptxas")),
                    reason="needs nvcc and ptxas")
def test_compiled_kernels_report_their_own_dynamic_shared_memory():
    from tile_nb.runtime import compile as rt_compile

    compiled = rt_compile(_two_kernels(), "sm_90a", options={"cache": False, "compiler": "nvcc"})
    assert {k: r.dynamic_shared_bytes for k, r in compiled.resources_by_kernel.items()} == {
        "two_kernel": 8192, "two_kernel_1": 4096}
    assert compiled.resources.total_shared_bytes == 8192  # the largest of the two (resources.combine)


@pytest.mark.skipif(not (toolchain.find_tool("nvcc") and toolchain.find_tool("ptxas")),
                    reason="needs nvcc and ptxas")
def test_ptxas_report_from_ptx_when_the_compiler_log_has_none():
    """The path NVRTC 13.0 takes: its log lacks the -v report, so ptxas is run on the PTX."""
    from tile_nb.backend.cuda_compile import _ptxas_report

    source = build(rowsum_module(), "sm_90a", {"compiler": "nvcc"}).cuda_source
    ptx = compile_cuda(source, "sm_90a", compiler="nvcc").ptx
    res = parse_ptxas_log(_ptxas_report(ptx, "sm_90a", ()))
    assert res["rowsum_kernel"].shared_bytes == 256 * 4 and res["rowsum_kernel"].registers > 0
