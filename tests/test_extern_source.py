"""CUDA C in a kernel (language/extern.py): `T.import_source(code)` pastes device functions into the kernel's
CUDA module once, `T.call_extern` calls one with `T.access_ptr` addresses of locals and shared tiles. The
kernels: int4 dequantization of tilelang's dequantize_gemm examples' kind (an elementwise one with one row per
thread, and a GEMM whose weight tile each thread dequantizes into shared memory before T.gemm), at shapes that
are not multiples of the blocks and sizes of 1, against torch on the GPU (gpu twins); the CUDA they become,
compiled with nvcc; the CPU interpreter's refusal at the user's line; bad arguments."""
import shutil

import pytest
import torch

import tile_nb
import tile_nb.language as T
from tile_nb.backend import extern_sources, toolchain
from tile_nb.errors import DSLError
from tile_nb.interp.errors import InterpreterError

CALL, KERNEL = "tnb_test_dequant_int4x8(", 'extern "C" __global__'
needs_nvcc = pytest.mark.skipif(toolchain.find_tool("nvcc") is None, reason="needs nvcc to build cubins")

# Eight signed 4-bit values (two per byte, low nibble first, stored with an offset of 8), scaled.
DEQUANT_SOURCE = r"""
__device__ void tnb_test_dequant_int4x8(const unsigned char* q, half* out, float scale) {
  #pragma unroll
  for (int i = 0; i < 4; ++i) {
    out[2 * i] = __float2half((float)((int)(q[i] & 0xF) - 8) * scale);
    out[2 * i + 1] = __float2half((float)((int)(q[i] >> 4) - 8) * scale);
  }
}
"""


@tile_nb.jit
def dequant_rows(Q, S, ROWS: int = 32):
    """One row of 8 values per thread: the bytes into a local, the extern call, the halves out."""
    N = T.const("N")
    Q: T.Tensor((N, 4), T.uint8)
    S: T.Tensor((N,), T.float32)
    W = T.empty((N, 8), T.float16)
    with T.Kernel(T.ceildiv(N, ROWS), threads=ROWS) as bx:
        T.import_source(DEQUANT_SOURCE)
        q = T.alloc_local((4,), T.uint8)
        w = T.alloc_local((8,), T.float16)
        tx = T.get_thread_binding()
        row = bx * ROWS + tx
        if row < N:
            for v in T.vectorized(4):
                q[v] = Q[row, v]
            T.call_extern("handle", "tnb_test_dequant_int4x8", T.access_ptr(q, "r"), T.access_ptr(w, "w"),
                          S[row])
            for v in T.vectorized(8):
                W[row, v] = w[v]
    return W


@tile_nb.jit
def dequant_gemm(A, Wq, BLOCK: int = 64, threads: int = 128, dynamic_m: bool = False):
    """C = A @ dequant(Wq)^T: each K block of the packed weight is copied to shared memory, every thread
    dequantizes its groups of 8 into the weight tile through the extern function (tilelang's spelling of the
    call: name first, `dtype=` last), and T.gemm multiplies. `dynamic_m`: the activations' rows are
    T.dynamic (a batch of tokens)."""
    N, K = T.const("N, K")
    M = T.dynamic("M") if dynamic_m else T.const("M")
    A: T.Tensor((M, K), T.float16)
    Wq: T.Tensor((N, K // 2), T.uint8)
    C = T.empty((M, N), T.float32)
    groups = BLOCK * BLOCK // 8 // threads  # groups of 8 values each thread dequantizes per K block
    with T.Kernel(T.ceildiv(N, BLOCK), T.ceildiv(M, BLOCK), threads=threads) as (bx, by):
        A_s = T.alloc_shared((BLOCK, BLOCK), T.float16)
        Wq_s = T.alloc_shared((BLOCK, BLOCK // 2), T.uint8)
        W_s = T.alloc_shared((BLOCK, BLOCK), T.float16)
        C_f = T.alloc_fragment((BLOCK, BLOCK), T.float32)
        q = T.alloc_local((4,), T.uint8)
        w = T.alloc_local((8,), T.float16)
        T.import_source(DEQUANT_SOURCE)
        T.clear(C_f)
        for ko in T.Pipelined(K // BLOCK, num_stages=2):
            T.copy(A[by * BLOCK, ko * BLOCK], A_s)
            T.copy(Wq[bx * BLOCK, ko * BLOCK // 2], Wq_s)
            tx = T.get_thread_binding()
            for i in T.serial(groups):
                group = i * threads + tx
                for v in T.vectorized(4):
                    q[v] = Wq_s[group // 8, group % 8 * 4 + v]
                T.call_extern("tnb_test_dequant_int4x8", T.access_ptr(q[0], "r"), T.access_ptr(w[0], "w"),
                              1.0, dtype=T.float16)
                for v in T.vectorized(8):
                    W_s[group // 8, group % 8 * 8 + v] = w[v]
            T.gemm(A_s, W_s, C_f, transpose_B=True)
        T.copy(C_f, C[by * BLOCK, bx * BLOCK])
    return C


def _dequant_reference(q: torch.Tensor, scale) -> torch.Tensor:
    """int4 pairs (low nibble first, offset 8) of `q` [..., n] as float32 [..., 2n], times `scale`."""
    low, high = (q & 0xF).int() - 8, (q >> 4).int() - 8
    values = torch.stack((low, high), dim=-1).reshape(*q.shape[:-1], 2 * q.shape[-1]).float()
    return values * scale


def _packed(rows: int, cols: int, device: str) -> torch.Tensor:
    return torch.randint(0, 256, (rows, cols), dtype=torch.uint8, device=device)


# ---------------------------------------------------------------------------------------------- on the GPU

@pytest.mark.gpu
@pytest.mark.parametrize("n", [1, 31, 70, 257])
def test_dequant_rows_agree_with_torch(n):
    torch.manual_seed(n)
    q = _packed(n, 4, "cuda")
    s = torch.rand(n, device="cuda") + 0.25
    w = dequant_rows(q, s)
    torch.testing.assert_close(w.float(), _dequant_reference(q, s[:, None]).half().float(), rtol=0, atol=0)


@pytest.mark.gpu
@pytest.mark.parametrize("m, n, k", [(64, 64, 64), (72, 70, 128), (1, 1, 192), (200, 130, 256)])
def test_dequant_gemm_agrees_with_torch(m, n, k):
    torch.manual_seed(m + n + k)
    a = torch.randn(m, k, device="cuda").half()
    wq = _packed(n, k // 2, "cuda")
    c = dequant_gemm(a, wq)
    ref = a.float() @ _dequant_reference(wq, 1.0).T
    torch.testing.assert_close(c, ref, rtol=1e-3, atol=1e-2)


@pytest.mark.gpu
def test_one_dequant_gemm_with_dynamic_rows_agrees_with_torch_at_each_call():
    torch.manual_seed(0)
    wq = _packed(70, 64, "cuda")
    for m in (72, 1, 200, 64):
        a = torch.randn(m, 128, device="cuda").half()
        c = dequant_gemm(a, wq, dynamic_m=True)
        torch.testing.assert_close(c, a.float() @ _dequant_reference(wq, 1.0).T, rtol=1e-3, atol=1e-2)


# ---------------------------------------------------------------------------------------------- on the CPU

def _compiled(kernel, *args):
    return kernel.compile(*args, target="sm_90a")


def test_the_source_is_pasted_once_before_the_kernel_and_called_as_a_statement():
    q, s = _packed(70, 4, "cpu"), torch.rand(70)
    code = _compiled(dequant_rows, q, s).cuda_source
    assert code.count("__device__ void tnb_test_dequant_int4x8(") == 1
    assert code.index("tnb_test_dequant_int4x8(") < code.index('extern "C" __global__')
    calls = [line.strip() for line in code.splitlines() if line.strip().startswith(CALL)]
    # a void function called as a statement: no (void*) cast of its result (TVM's print of a handle call)
    assert len(calls) == 1 and calls[0].endswith(");"), calls
    assert "(void*)tnb_test_dequant_int4x8" not in code


def test_a_source_imported_in_a_loop_is_pasted_once():
    a, wq = torch.randn(72, 128).half(), _packed(70, 64, "cpu")
    code = _compiled(dequant_gemm, a, wq).cuda_source
    assert code.count("__device__ void tnb_test_dequant_int4x8(") == 1
    assert "tnb_test_dequant_int4x8((&(" in code


@needs_nvcc
def test_the_kernels_compile_with_nvcc():
    for kernel, args, kw in ((dequant_rows, (_packed(70, 4, "cpu"), torch.rand(70)), {}),
                             (dequant_gemm, (torch.randn(72, 128).half(), _packed(70, 64, "cpu")), {}),
                             (dequant_gemm, (torch.randn(72, 128).half(), _packed(70, 64, "cpu")),
                              {"dynamic_m": True})):
        compiled = kernel.compile(*args, target="sm_90a", **kw)
        assert compiled.cubin, compiled.compile_log
        (resources,) = compiled.resources_by_kernel.values()
        assert resources.spill_stores == 0


def test_source_lines_map_past_the_pasted_code():
    """The CUDA view's statement regions count the pasted lines: the region of the call's statement holds the
    line that calls the function."""
    compiled = _compiled(dequant_rows, _packed(70, 4, "cpu"), torch.rand(70))
    lines = compiled.cuda_source.split("\n")
    regions = compiled.source_regions["cuda"]
    call_line = next(i + 1 for i, line in enumerate(lines) if line.strip().startswith(CALL))
    assert any(call_line in region for region in regions.values())
    first_kernel_line = next(i + 1 for i, line in enumerate(lines) if line.startswith(KERNEL))
    assert all(line > first_kernel_line for region in regions.values() for line in region)


def test_the_interpreter_refuses_the_call_at_its_line():
    refusal = r"T\.call_extern\('tnb_test_dequant_int4x8'\).*cannot run"
    with pytest.raises(InterpreterError, match=refusal) as err:
        dequant_rows(_packed(5, 4, "cpu"), torch.rand(5))
    lines = open(__file__).read().split("\n")
    assert lines[err.value.lineno - 1].strip().startswith('T.call_extern("handle", "tnb_test_dequant_int4x8"')
    assert "GPU" in (err.value.hint or "")


def test_paste_puts_sources_before_the_first_kernel_or_at_the_end():
    head, kernel = "#include <x.h>\n", 'extern "C" __global__ void k() {}\n'
    pasted = extern_sources.paste(head + kernel, ["__device__ int f();", "__device__ int g();"])
    assert pasted.startswith(head) and pasted.endswith(kernel)
    assert pasted.index("int f()") < pasted.index("int g()") < pasted.index("__global__")
    assert extern_sources.paste("int x;\n", ["__device__ int f();"]).endswith("__device__ int f();\n\n")
    assert extern_sources.paste("int x;\n", []) == "int x;\n"


@tile_nb.jit
def _bad(A, case: str = "fragment"):
    N = T.const("N")
    A: T.Tensor((N,), T.float32)
    with T.Kernel(1, threads=32):
        f = T.alloc_fragment((32,), T.float32)
        r = T.alloc_local((4,), T.float32)
        if case == "fragment":
            T.call_extern("handle", "f", T.access_ptr(f, "w"))
        elif case == "access":
            T.call_extern("handle", "f", T.access_ptr(r, "x"))
        elif case == "source":
            T.import_source(42)
        elif case == "name":
            T.call_extern("handle")
        elif case == "identifier":
            T.call_extern("handle", "not a name", T.access_ptr(r))


@pytest.mark.parametrize("case, message", [
    ("fragment", r"T\.access_ptr\(f\): a fragment's elements are spread over the threads' registers"),
    ("access", r"access_type=\.\.\.\): expected one of 'r', 'w', 'rw' \(or 1, 2, 3\), got 'x'"),
    ("source", r"T\.import_source\(source=\.\.\.\): expected CUDA source text \(a str\), got int"),
    ("name", r"expected a result dtype and a function name, got 1 argument"),
    ("identifier", r"the function name must be a C identifier \(a str\), got 'not a name'"),
])
def test_bad_arguments_are_refused_at_their_line(case, message):
    with pytest.raises(DSLError, match=message) as err:
        _bad.compile(torch.zeros(4), case=case, target="sm_90a")
    assert err.value.lineno is not None


def test_import_source_of_none_imports_nothing():
    @tile_nb.jit
    def copy_rows(A):
        N = T.const("N")
        A: T.Tensor((N,), T.float32)
        B = T.empty((N,), T.float32)
        with T.Kernel(T.ceildiv(N, 32), threads=32) as bx:
            T.import_source(None)
            for i in T.Parallel(32):
                if bx * 32 + i < N:
                    B[bx * 32 + i] = A[bx * 32 + i]
        return B

    x = torch.randn(40)
    torch.testing.assert_close(copy_rows(x), x)
    assert "T.import_source" not in copy_rows.compile(x, target="sm_90a").cuda_source


def test_the_weight_tile_stored_by_vector_stores_is_fenced_before_wgmma_reads_it():
    """The per-thread stores of the dequantized weights into W_s (16-byte vector stores:
    lower/emit/vector_copies.py) are ordinary stores, which wgmma's async proxy sees only after
    `fence.proxy.async`; without the fence the H100 read stale weights (2026-12-07, 2 of 4 shapes wrong)."""
    code = _compiled(dequant_gemm, torch.randn(72, 128).half(), _packed(70, 64, "cpu")).cuda_source
    store = code.index("tnb_vst_float16x8_float16((")
    fence = code.index("tnb_fence_proxy_async();", store)
    assert fence < code.index("tnb_wgmma_m64n64k16", store)


@pytest.mark.skipif(not (toolchain.find_tool("nvcc") and shutil.which("ninja")),
                    reason="needs nvcc and ninja")
def test_the_cuda_host_launcher_carries_the_imported_source(tmp_path):
    """host='cuda_host' builds kernel and host code in one translation unit: the imported source is in it
    once, and nvcc compiles it (an object file here; linking needs the CUDA driver library)."""
    from tile_nb.backend.cuda_host import build_launcher, cuda_host_source
    from tile_nb.backend.target import resolve_target
    from tile_nb.lower.sourcemap import split_marks
    from tile_nb.runtime.compile import _lower

    func = dequant_rows.specialize(_packed(70, 4, "cpu"), torch.rand(70))
    lowered, _ = _lower(func, resolve_target("sm_90a"))
    source = cuda_host_source(lowered, "sm_90a", split_marks)
    assert source.count("__device__ void tnb_test_dequant_int4x8(") == 1 and "cudaLaunchKernelEx" in source
    path, _ = build_launcher(source, "sm_90a", tmp_path, link=False)
    assert path.suffix == ".o" and path.stat().st_size > 1000


def _increment_kernel(code: str):
    @tile_nb.jit
    def increment(A):
        N = T.const("N")
        A: T.Tensor((N,), T.float32)
        with T.Kernel(1, threads=32):
            T.import_source(code)
            T.call_extern("handle", "tnb_test_increment", T.access_ptr(A[0], "rw"))

    return increment


def test_kernels_that_differ_only_in_their_imported_source_are_built_apart():
    """A long, multi-line source is kept in the IR's metadata, which TVMScript leaves out of its text unless
    asked: the cache key prints it, so the second kernel is not served the first one's build."""
    padding = "// " + "-" * 200 + "\n"
    body = "__device__ void tnb_test_increment(float* x) {{\n  x[0] += {};\n}}\n"
    sources = [body.format(k) + padding for k in (1, 2)]
    x = torch.zeros(4)
    built = [_increment_kernel(code).compile(x, target="sm_90a").cuda_source for code in sources]
    assert "x[0] += 1;" in built[0] and "x[0] += 2;" in built[1]
