"""`%%tilekernel` and the short error display, in-process in IPython's test shell
(as anywidget tests its magic)."""
from __future__ import annotations

import pytest

pytest.importorskip("IPython")

from tile_nb.notebook.views import MIME_TYPE, KernelView

GEMM_BODY = '''\
def gemm(A, B, C, block_M: int = 32, block_N: int = 32, block_K: int = 16):
    M, N, K = T.const('M, N, K')
    A: T.Tensor[[M, K], T.float16]
    B: T.Tensor[[K, N], T.float16]
    C: T.Tensor[[M, N], T.float32]
    with T.Kernel(T.ceildiv(M, block_M), T.ceildiv(N, block_N)) as (bx, by):
        A_shared = T.alloc_shared((block_M, block_K), A.dtype)
        B_shared = T.alloc_shared((block_K, block_N), B.dtype)
        C_local = T.alloc_fragment((block_M, block_N), T.float32)
        T.clear(C_local)
        for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=3):
            T.copy(A[bx * block_M, k * block_K], A_shared)
            T.copy(B[k * block_K, by * block_N], B_shared)
            T.gemm(A_shared, B_shared, C_local)
        T.copy(C_local, C[bx * block_M, by * block_N])
'''


@pytest.fixture(scope="module")
def ip():
    from IPython.testing.globalipapp import start_ipython

    shell = start_ipython()
    shell.run_line_magic("load_ext", "tile_nb.notebook")
    result = shell.run_cell(
        "import torch\nimport tile_nb\nimport tile_nb.language as T\n"
        "torch.manual_seed(0)\n"
        "A = torch.randn(64, 32).half(); B = torch.randn(32, 64).half(); C = torch.zeros(64, 64)\n")
    result.raise_error()
    yield shell
    from tile_nb.notebook.tracebacks import uninstall

    uninstall(shell)


def run_cell(ip, text: str):
    result = ip.run_cell(text)
    return result


def test_magic_is_registered_and_documented(ip):
    magic = ip.find_cell_magic("tilekernel")
    assert magic is not None
    doc = magic.__doc__
    for option in ("--shapes", "--call", "--cuda", "--lowered", "--cpu", "--bench", "--name", "--expect"):
        assert option in doc
    assert "tile_nb.notebook.show" in doc


def test_undecorated_cell_defines_the_kernel_and_shows_the_template(ip):
    result = run_cell(ip, "%%tilekernel\n" + GEMM_BODY)
    result.raise_error()
    view = result.result
    assert isinstance(view, KernelView)
    assert type(ip.user_ns["gemm"]).__name__ == "JITFunction"  # decorated by the magic
    assert [s.id for s in view.sections] == ["template"]
    text = view.section("template").text
    assert "T.int32()" in text  # consts symbolic
    assert any('"blockIdx.x"' in line and "M" in line for line in text.splitlines())


def test_shapes_specialize_without_tensors(ip):
    result = run_cell(ip, "%%tilekernel --shapes M=64 N=64 K=32\n" + GEMM_BODY)
    result.raise_error()
    view = result.result
    assert view.consts == {"M": 64, "N": 64, "K": 32}
    assert [s.id for s in view.sections] == ["template", "specialized"]
    assert view.section("specialized").changed_lines
    assert view.run is None and view.backend is None
    bundle = view._repr_mimebundle_()
    assert set(bundle) == {"text/plain", "text/html", MIME_TYPE}
    assert "consts: M=64, N=64, K=32" in bundle["text/plain"]
    # Stable: the same cell run again gives the same renderings.
    again = run_cell(ip, "%%tilekernel --shapes M=64 N=64 K=32\n" + GEMM_BODY).result._repr_mimebundle_()
    assert again == bundle


def test_call_runs_on_the_cpu_interpreter_and_compares(ip):
    result = run_cell(ip, '%%tilekernel --call "gemm(A, B, C)" --expect "A.float() @ B.float()"\n'
                          "@tile_nb.jit\n" + GEMM_BODY)
    result.raise_error()
    view = result.result
    assert view.backend == "cpu-interpreter"
    assert view.run["device"] == "cpu" and view.run["max_abs_err"] < 1e-3
    assert "ran on the CPU interpreter" in view.to_text()
    assert "CPU interpreter" in view.to_html()


def test_name_picks_one_of_several_functions(ip):
    cell = (
        "%%tilekernel --name gemm --shapes M=32 N=32 K=16\n" + GEMM_BODY + "\ndef helper():\n    return 1\n"
    )
    result = run_cell(ip, cell)
    result.raise_error()
    assert result.result.name == "gemm" and callable(ip.user_ns["helper"])


def test_cuda_and_lowered_sections_from_the_compiled_kernel(ip):
    from kernels.notebook_fakes import FakeGemm

    ip.user_ns["fake"] = FakeGemm()
    result = run_cell(ip, '%%tilekernel --call "fake(A, B, C)" --cuda --lowered --cpu\n' + GEMM_BODY)
    result.raise_error()
    view = result.result
    assert [s.id for s in view.sections] == ["template", "specialized", "lowered", "cuda", "ptx"]
    assert view.resources["registers"] == 40
    assert set(view.timings_ms) == {"lower", "codegen", "nvcc"}
    assert view.backend == "cpu-interpreter"


def test_bench_times_the_call_after_the_view(ip):
    pytest.importorskip("tile_nb.bench")
    result = run_cell(ip, '%%tilekernel --call "gemm(A, B, C)" --bench\n' + GEMM_BODY)
    result.raise_error()
    bench = result.result
    assert type(bench).__name__ == "BenchResult"
    assert bench.where == "the CPU interpreter" and bench.timing.median_ms > 0
    # registered by %load_ext tile_nb
    html = ip.display_formatter.formatters["text/html"].lookup(bench)(bench)
    assert "median" in html and "<script" not in html


@pytest.mark.parametrize("line, message", [
    ("%%tilekernel --shapes M\n", "NAME=VALUE"),
    ("%%tilekernel --call gemm\n", "call expression"),
    ("%%tilekernel --cpu\n", "need --call"),
    ("%%tilekernel --name nope\n", "defines no function 'nope'; its kernels: gemm"),
])
def test_usage_errors(ip, capsys, line, message):
    run_cell(ip, line + GEMM_BODY)
    assert message in capsys.readouterr().err


def test_cell_without_a_function(ip, capsys):
    result = run_cell(ip, "%%tilekernel\nx = 1\n")
    assert type(result.error_in_exec).__name__ == "NotAKernelError"
    assert "must define a kernel function" in capsys.readouterr().out


BAD_ANNOTATION = GEMM_BODY.replace("B: T.Tensor[[K, N], T.float16]", "B: T.Tensor[[K, N], 'float17']")


def test_error_shows_the_cell_line_with_a_caret(ip, capsys, monkeypatch):
    monkeypatch.delenv("TILE_NB_TRACEBACK", raising=False)
    result = run_cell(ip, "%%tilekernel --shapes M=64 N=64 K=32\n" + BAD_ANNOTATION)
    from tile_nb.errors import TileNBError

    assert isinstance(result.error_in_exec, TileNBError)
    out = capsys.readouterr().out
    lines = out.splitlines()
    # Line 5 of the cell as the editor numbers it (the %%tilekernel line is line 1).
    source = next(i for i, line in enumerate(lines) if "'float17']" in line and "|" in line)
    assert lines[source].lstrip().startswith("5 |")
    assert "^" in lines[source + 1]
    assert "line 5" in out and "%tb" in out
    assert "tile_nb/frontend" not in out and "Traceback" not in out
    import sys

    assert sys.last_value is result.error_in_exec  # %tb finds the full traceback
    ip.run_line_magic("tb", "")
    full = capsys.readouterr().out
    assert "Traceback" in full and "AnnotationError" in full and len(full.splitlines()) > 10


def test_full_traceback_on_request(ip, capsys, monkeypatch):
    monkeypatch.setenv("TILE_NB_TRACEBACK", "1")
    run_cell(ip, "%%tilekernel --shapes M=64 N=64 K=32\n" + BAD_ANNOTATION)
    out = capsys.readouterr().out
    assert "Traceback" in out or "tile_nb" in out
    assert len(out.splitlines()) > 10


def test_errors_outside_the_magic_are_short_too(ip, capsys):
    run_cell(ip, "gemm(A, B)\n")
    out = capsys.readouterr().out
    assert "ArgumentCountError" in out and "%tb" in out


def test_compiler_failure_is_short(ip, capsys, monkeypatch):
    from kernels.notebook_fakes import FakeGemm

    from tile_nb.backend.cuda_compile import CudaCompileError

    monkeypatch.delenv("TILE_NB_TRACEBACK", raising=False)

    class Failing(FakeGemm):
        def compile(self, *args, **kwargs):
            raise CudaCompileError("nvcc", "sm_90a", "kernel.cu(12): error: identifier \"foo\" is undefined\n"
                                   "1 error detected in the compilation of \"kernel.cu\".")

    ip.user_ns["failing"] = Failing()
    result = run_cell(ip, '%%tilekernel --call "failing(A, B, C)" --cuda\n# the kernel defined before')
    assert isinstance(result.error_in_exec, CudaCompileError)
    out = capsys.readouterr().out
    assert out.startswith("CudaCompileError: nvcc could not compile")
    assert 'identifier "foo" is undefined' in out and "%tb" in out
    assert "Traceback" not in out and "get_ipython()" not in out


OOB_KERNEL = '''\
def shift(X, Y, block: int = 32):
    N = T.const('N')
    X: T.Tensor[[N], T.float32]
    Y: T.Tensor[[N], T.float32]
    with T.Kernel(T.ceildiv(N, block)) as bx:
        for i in T.Parallel(block):
            Y[bx * block + i] = X[bx * block + i + 1]
'''


def test_interpreter_out_of_bounds_points_at_the_kernel_line(ip, capsys, monkeypatch):
    monkeypatch.delenv("TILE_NB_TRACEBACK", raising=False)
    run_cell(ip, "X = torch.zeros(64); Y = torch.zeros(64)")
    result = run_cell(ip, '%%tilekernel --call "shift(X, Y)"\n' + OOB_KERNEL)
    assert result.error_in_exec is not None
    out = capsys.readouterr().out
    assert "%tb" in out, out
    source = next(line for line in out.splitlines() if "X[bx * block + i + 1]" in line)
    assert source.lstrip().startswith("8 |")  # line 8 of the cell, counting the %%tilekernel line


def test_cuda_view_of_the_real_compile(ip):
    """No GPU needed: compiling gives the lowered IR, the CUDA source and (with
    NVRTC or nvcc) PTX and resources."""
    result = run_cell(ip, "%%tilekernel --shapes M=64 N=64 K=32 --cuda --lowered\n" + GEMM_BODY)
    if result.error_in_exec is not None and type(result.error_in_exec).__name__ == "ToolMissingError":
        pytest.skip("no CUDA compiler (NVRTC or nvcc) on this machine")
    result.raise_error()
    view = result.result
    ids = [s.id for s in view.sections]
    assert ids[:5] == ["template", "specialized", "plan", "lowered", "cuda"]
    plan = view.section("plan").text
    assert "C_local [32x32] float32: registers: T.gemm accumulator (mma.sync)" in plan
    assert "T.Pipelined loop k: 3 stages, prefetches A_shared, B_shared" in plan
    assert "__global__" in view.section("cuda").text
    assert view.timings_ms and all(ms >= 0 for ms in view.timings_ms.values())
    data = view.to_json()
    assert data["backend"] == "cuda" and set(data["resources"]) == {
        "registers",
        "shared_bytes",
        "spill_stores",
        "spill_loads",
    }
    assert " ms" not in view.to_text()  # timings stay out of the plain text
    # which pipeline the lowering built for T.Pipelined, and why (32x32 tiles on 128 threads: no wgmma)
    assert "note: pipeline: cp.async (no wgmma T.gemm" in view.to_text()


def test_syntax_error_in_the_cell_is_short(ip, capsys, monkeypatch):
    monkeypatch.delenv("TILE_NB_TRACEBACK", raising=False)
    result = run_cell(
        ip, "%%tilekernel\ndef broken(X):\n    N = T.const('N'\n    X: T.Tensor[[N], T.float32]\n"
    )
    from tile_nb.notebook.magic import CellSyntaxError

    assert isinstance(result.error_in_exec, CellSyntaxError)
    out = capsys.readouterr().out
    assert out.startswith("CellSyntaxError: ") and "line 3" in out and "N = T.const('N'" in out
    assert "Traceback" not in out and "IPython" not in out and len(out.splitlines()) <= 8


def test_shapes_of_a_dynamic_dim_keep_it_symbolic(ip):
    result = run_cell(ip, "%%tilekernel --shapes N=1000\n"
                          "def twice(X, Y, block: int = 128):\n"
                          "    N = T.dynamic('N')\n"
                          "    X: T.Tensor[[N], T.float32]\n"
                          "    Y: T.Tensor[[N], T.float32]\n"
                          "    with T.Kernel(T.ceildiv(N, block)) as bx:\n"
                          "        for i in T.Parallel(block):\n"
                          "            if bx * block + i < N:\n"
                          "                Y[bx * block + i] = X[bx * block + i] * 2.0\n")
    result.raise_error()
    view = result.result
    assert view.section("specialized") is not None and "N" not in view.consts
    assert any("N: T.dynamic" in note for note in view.notes)
    assert view.to_json()["notes"] == view.notes  # the JupyterLab extension shows the same note as the HTML
    assert "    N = T.int32()" in view.section("specialized").text.split("\n")  # still symbolic
