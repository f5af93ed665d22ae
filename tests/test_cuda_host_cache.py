"""The launch caches of host='cuda_host' (tile_nb/backend/cuda_host.py, `cache_launch_setup`): the rewrite of
TVM's cuda_host source, and the prelude's caches run in a host-only program against counting fakes of the
driver calls. CPU only; the GPU tests launch the real thing."""
import os
import shutil
import subprocess

import pytest

from tile_nb.backend import toolchain
from tile_nb.backend.cuda_host import LAUNCH_CACHE_PRELUDE, LaunchCacheError, cache_launch_setup

# The spellings of TVM 0.27's cuda_host codegen, cut down to what the rewrite looks at.
HOST = """extern "C" __global__ void k(const __grid_constant__ CUtensorMap A_tensormap, float* C);
#include <cuda.h>
#define TVM_DLL TVM_FFI_DLL_EXPORT
TVM_DLL int32_t __tvm_ffi_k(void* self_handle, void* args, int32_t num_args, void* result) {
  alignas(64) CUtensorMap cuda_tensormap[1];
  CUresult tensormap_error = cuTensorMapEncodeTiled(static_cast<CUtensorMap*>(tensormap_arg), CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, tensormap_arg_1, v, v_1, v_2, v_3, static_cast<CUtensorMapInterleave>(0), static_cast<CUtensorMapSwizzle>(3), static_cast<CUtensorMapL2promotion>(3), static_cast<CUtensorMapFloatOOBfill>(0));
  const char* message = "cuTensorMapEncodeTiled failed";
  CUresult tensormap_error_1 = cuTensorMapEncodeTiled(static_cast<CUtensorMap*>(tensormap_arg_9), CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, tensormap_arg_10, v_4, v_5, v_6, v_7, static_cast<CUtensorMapInterleave>(0), static_cast<CUtensorMapSwizzle>(3), static_cast<CUtensorMapL2promotion>(3), static_cast<CUtensorMapFloatOOBfill>(0));
  int cuda_device;
  if (::tvm_cuda_host_check(cudaGetDevice(&cuda_device)) != 0) return -1;
  if (cuda_arg_6 >= 49152) {
    if (::tvm_cuda_host_check(cudaFuncSetAttribute(::k, cudaFuncAttributeMaxDynamicSharedMemorySize, cuda_arg_6)) != 0) return -1;
  }
}
"""


def test_the_rewrite_routes_each_call_site_through_its_own_cache():
    out = cache_launch_setup(HOST)
    assert (
        "CUresult tensormap_error = tile_nb_encode_tiled<0>(static_cast<CUtensorMap*>(tensormap_arg), " in out
    )
    assert (
        "CUresult tensormap_error_1 = tile_nb_encode_tiled<1>(static_cast<CUtensorMap*>(tensormap_arg_9), "
        in out
    )
    assert "tile_nb_set_max_dynamic_smem<0>(::k, cuda_device, cuda_arg_6)) != 0) return -1;" in out
    assert '"cuTensorMapEncodeTiled failed"' in out  # the error message is left alone
    assert out.index(LAUNCH_CACHE_PRELUDE) == out.index("#define TVM_DLL") + len(
        "#define TVM_DLL TVM_FFI_DLL_EXPORT\n"
    )
    assert cache_launch_setup(out) == out                                 # rewriting twice changes nothing


def test_a_kernel_without_tensor_maps_keeps_its_encode_free_source():
    """cp.async kernels: no tensor map, and below 48 KiB of dynamic shared memory no attribute either."""
    plain = HOST.replace("const __grid_constant__ CUtensorMap A_tensormap, ", "")
    plain = "\n".join(
        line for line in plain.splitlines() if "CUtensorMap" not in line and "cudaFunc" not in line
    )
    assert cache_launch_setup(plain) == plain
    with_smem = "\n".join(line for line in HOST.splitlines() if "CUtensorMap" not in line)
    out = cache_launch_setup(with_smem)
    assert (
        "tile_nb_set_max_dynamic_smem<0>(::k, cuda_device, cuda_arg_6)" in out and "_encode_tiled<" not in out
    )


@pytest.mark.parametrize(
    "change, expected",
    [
        (
            (
                "CUresult tensormap_error = cuTensorMapEncodeTiled(",
                "tensormap_error = cuTensorMapEncodeTiled(",
            ),
            "every tensor-map encode spelled `CUresult NAME = cuTensorMapEncodeTiled\\(`",
        ),
        (
            (
                "cudaFuncAttributeMaxDynamicSharedMemorySize, cuda_arg_6",
                "cudaFuncAttributeMaxDynamicSharedMemorySize, (int)cuda_arg_6",
            ),
            "every cudaFuncSetAttribute spelled",
        ),
        (("cudaGetDevice(&cuda_device)", "cudaGetDevice(cuda_device)"), "`cudaGetDevice\\(&NAME\\)` before"),
        (
            ("#define TVM_DLL TVM_FFI_DLL_EXPORT", "#define TVM_DLL"),
            "one line '#define TVM_DLL TVM_FFI_DLL_EXPORT' before",
        ),
    ],
)
def test_an_unexpected_spelling_fails_loudly(change, expected):
    with pytest.raises(LaunchCacheError, match=f"cache_launch_setup expected {expected}.*host='llvm'"):
        cache_launch_setup(HOST.replace(*change))


def test_host_tensor_maps_without_an_encode_call_fail_loudly():
    source = "\n".join(line for line in HOST.splitlines() if "cuTensorMapEncodeTiled(" not in line)
    with pytest.raises(LaunchCacheError, match="a cuTensorMapEncodeTiled call for the host's CUtensorMap"):
        cache_launch_setup(source)


# The prelude in a host-only program: cuTensorMapEncodeTiled and cudaFuncSetAttribute are counting fakes
# defined here (nothing from the driver or the CUDA runtime is linked), so the caches' hits and misses
# can be counted. g++ sees no __CUDACC__, so cuda_runtime.h leaves out its cudaFuncSetAttribute(T*
# kernel, ...) and the fake is that.
PROGRAM = r"""
#include <cuda.h>
#include <cuda_runtime.h>
#include <cstdio>
#include <thread>
static int encodes = 0, sets = 0;
static CUresult encode_result = CUDA_SUCCESS;
static cudaError_t set_result = cudaSuccess;
template <class Kernel>
cudaError_t cudaFuncSetAttribute(Kernel*, cudaFuncAttribute, int) { ++sets; return set_result; }
PRELUDE

CUresult cuTensorMapEncodeTiled(CUtensorMap* map, CUtensorMapDataType, cuuint32_t, void* address,
                                const cuuint64_t* dims, const cuuint64_t*, const cuuint32_t*, const cuuint32_t*,
                                CUtensorMapInterleave, CUtensorMapSwizzle, CUtensorMapL2promotion,
                                CUtensorMapFloatOOBfill) {
  ++encodes;
  if (encode_result != CUDA_SUCCESS) return encode_result;
  std::memset(map, 0, sizeof *map);   // a fake map that shows what it was encoded from, and by which call
  map->opaque[0] = reinterpret_cast<cuuint64_t>(address);
  map->opaque[1] = dims[0];
  map->opaque[2] = encodes;
  return CUDA_SUCCESS;
}

static void kernel(float*) {}
static float data[2];
static cuuint64_t dims[2] = {256, 512}, strides[1] = {512};
static cuuint32_t box[2] = {64, 128}, element_strides[2] = {1, 1};

template <int Site>
static CUresult encode(CUtensorMap* map, void* address) {
  return tile_nb_encode_tiled<Site>(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, address, dims, strides, box,
                                    element_strides, static_cast<CUtensorMapInterleave>(0),
                                    static_cast<CUtensorMapSwizzle>(3), static_cast<CUtensorMapL2promotion>(3),
                                    static_cast<CUtensorMapFloatOOBfill>(0));
}

#define CHECK(cond) do { if (!(cond)) { std::printf("FAILED line %d: %s\n", __LINE__, #cond); return 1; } } while (0)

int main() {
  alignas(64) CUtensorMap map, again;
  CHECK(encode<0>(&map, data) == CUDA_SUCCESS && encodes == 1 && map.opaque[2] == 1);
  CHECK(encode<0>(&again, data) == CUDA_SUCCESS && encodes == 1);           // same arguments: no driver call
  CHECK(std::memcmp(&map, &again, sizeof map) == 0);                        // ... and the same map
  CHECK(encode<0>(&map, data + 1) == CUDA_SUCCESS && encodes == 2);         // another global address
  CHECK(map.opaque[0] == reinterpret_cast<cuuint64_t>(data + 1) && map.opaque[2] == 2);
  CHECK(encode<0>(&again, data + 1) == CUDA_SUCCESS && encodes == 2 && again.opaque[2] == 2);
  dims[0] = 128;                                                            // one dimension
  CHECK(encode<0>(&map, data + 1) == CUDA_SUCCESS && encodes == 3 && map.opaque[1] == 128);
  box[1] = 64;                                                              // the box
  CHECK(encode<0>(&map, data + 1) == CUDA_SUCCESS && encodes == 4 && map.opaque[2] == 4);
  CHECK(tile_nb_encode_tiled<0>(&map, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, data + 1, dims, strides, box,
                                element_strides, static_cast<CUtensorMapInterleave>(0),
                                static_cast<CUtensorMapSwizzle>(2),                 // the swizzle
                                static_cast<CUtensorMapL2promotion>(3), static_cast<CUtensorMapFloatOOBfill>(0))
        == CUDA_SUCCESS && encodes == 5);
  CHECK(encode<0>(&map, data + 1) == CUDA_SUCCESS && encodes == 6);         // back to swizzle 3: a miss
  CHECK(encode<1>(&map, data + 1) == CUDA_SUCCESS && encodes == 7);         // another call site, its own cache
  encode_result = CUDA_ERROR_INVALID_VALUE;                                 // the driver's error comes back
  CHECK(encode<0>(&map, data) == CUDA_ERROR_INVALID_VALUE && encodes == 8);
  CHECK(encode<0>(&map, data) == CUDA_ERROR_INVALID_VALUE && encodes == 9); // and is never cached
  encode_result = CUDA_SUCCESS;
  CHECK(encode<0>(&again, data + 1) == CUDA_SUCCESS && encodes == 9 && again.opaque[2] == 6);  // last good map kept
  int other_thread = -1;
  std::thread([&] { other_thread = encode<0>(&map, data + 1); }).join();  // thread_local: its own cache
  CHECK(other_thread == CUDA_SUCCESS && encodes == 10);
  CHECK(encode<0>(&again, data + 1) == CUDA_SUCCESS && encodes == 10);     // this thread's cache still holds

  CHECK(tile_nb_set_max_dynamic_smem<0>(kernel, 0, 147504) == cudaSuccess && sets == 1);
  CHECK(tile_nb_set_max_dynamic_smem<0>(kernel, 0, 147504) == cudaSuccess && sets == 1);  // same size: no call
  CHECK(tile_nb_set_max_dynamic_smem<0>(kernel, 1, 147504) == cudaSuccess && sets == 2);  // per device
  CHECK(tile_nb_set_max_dynamic_smem<0>(kernel, 0, 100000) == cudaSuccess && sets == 3);  // another size
  CHECK(tile_nb_set_max_dynamic_smem<1>(kernel, 0, 100000) == cudaSuccess && sets == 4);  // another site
  set_result = cudaErrorInvalidValue;
  CHECK(tile_nb_set_max_dynamic_smem<0>(kernel, 0, 300000) == cudaErrorInvalidValue && sets == 5);
  CHECK(tile_nb_set_max_dynamic_smem<0>(kernel, 0, 300000) == cudaErrorInvalidValue && sets == 6);  // not cached
  set_result = cudaSuccess;
  CHECK(tile_nb_set_max_dynamic_smem<0>(kernel, 0, 100000) == cudaSuccess && sets == 7);  // failure forgot it
  CHECK(tile_nb_set_max_dynamic_smem<0>(kernel, 99, 100000) == cudaSuccess && sets == 8);  // past the table
  CHECK(tile_nb_set_max_dynamic_smem<0>(kernel, 99, 100000) == cudaSuccess && sets == 9);  // ... set every time
  std::printf("ok\n");
  return 0;
}
"""


def cuda_include() -> str | None:
    home = toolchain.cuda_home()
    folder = os.path.join(home, "include") if home else None
    return folder if folder and os.path.isfile(os.path.join(folder, "cuda_runtime.h")) else None


@pytest.mark.skipif(
    not (shutil.which("g++") and cuda_include()), reason="needs g++ and the CUDA toolkit's headers"
)
def test_the_prelude_caches_count_driver_calls_in_a_host_program(tmp_path):
    (tmp_path / "caches.cpp").write_text(PROGRAM.replace("PRELUDE", LAUNCH_CACHE_PRELUDE))
    build = subprocess.run(["g++", "-std=c++17", "-O1", "-Wall", "-Werror", "-pthread", "-I", cuda_include(),
                            "caches.cpp", "-o", "caches"], cwd=tmp_path, capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    run = subprocess.run([str(tmp_path / "caches")], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0 and run.stdout == "ok\n", run.stdout + run.stderr
