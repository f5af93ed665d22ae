"""T.print and T.device_assert (docs/debugging.md): the interpreter's text and errors, the CUDA they lower to
(compile only), the capture of C-level output around a launch, and GPU twins (marked gpu)."""
import inspect
import os

import pytest
import torch

import tile_nb
import tile_nb.language as T
from tile_nb.errors import DeviceAssertError, DSLError, TileNBError
from tile_nb.runtime.debug import DebugLaunch, captured_fds, debug_ops_of


def line_of(fn, text: str) -> int:
    """The file line of the first source line of `fn` containing `text`."""
    lines, first = inspect.getsourcelines(fn.fn if hasattr(fn, "fn") else fn)
    return first + next(i for i, t in enumerate(lines) if text in t)


def arange(*shape, dtype=torch.float32):
    n = 1
    for d in shape:
        n *= d
    return torch.arange(n, dtype=torch.float32).reshape(shape).to(dtype)


# ---- kernels -----------------------------------------------------------------------------------------------

@tile_nb.jit
def print_scalars(A, n: int = 4, block=None, thread=None):
    N = T.const('N')
    A: T.Tensor[[N], T.float32]
    with T.Kernel(T.ceildiv(N, n), threads=32) as bx:
        s = T.alloc_shared((n,), T.float32)
        T.copy(A[bx * n], s)
        T.print(bx * 10 + 1, msg="bx*10+1", block=block, thread=thread)
        T.print(s[n - 1], block=block, thread=thread)
        T.print(msg="plain message", block=block, thread=thread)


@tile_nb.jit
def print_tile(A, bm: int = 3, bn: int = 5, block=None):
    M, N = T.const('M, N')
    A: T.Tensor[[M, N], T.float32]
    with T.Kernel(T.ceildiv(M, bm), T.ceildiv(N, bn), threads=32) as (bx, by):
        s = T.alloc_shared((bm, bn), T.float32)
        T.copy(A[bx * bm, by * bn], s)
        T.print(s, msg="tile", block=block)


@tile_nb.jit
def print_region_and_fragment(A, element: bool = False):
    M, N = T.const('M, N')
    A: T.Tensor[[M, N], T.int32]
    with T.Kernel(1, threads=32) as bx:
        f = T.alloc_fragment((2, 2), T.int32)
        T.copy(A[1, 1], f)
        T.print(A[0:1, 0:N])
        T.print(f, msg="frag")
        if element:
            T.print(f[0, 0])


@tile_nb.jit
def print_half(A):
    N = T.const('N')
    A: T.Tensor[[N], T.float16]
    with T.Kernel(1, threads=32) as bx:
        T.print(A[1] * 2, msg="twice")
        T.print(A[0] > 0.5, msg="big")


@tile_nb.jit
def print_in_parallel(A):
    N = T.const('N')
    A: T.Tensor[[N], T.float32]
    with T.Kernel(1, threads=32) as bx:
        for i in T.Parallel(N):
            T.print(A[i])


@tile_nb.jit
def check_positive(A, B, n: int = 4):
    N = T.const('N')
    A: T.Tensor[[N], T.float32]
    B: T.Tensor[[N], T.float32]
    with T.Kernel(T.ceildiv(N, n), threads=32) as bx:
        for i in T.Parallel(n):
            if bx * n + i < N:
                T.device_assert(A[bx * n + i] > 0.0, "A must be positive")
                B[bx * n + i] = T.sqrt(A[bx * n + i])


@tile_nb.jit
def check_count(A, limit: int = 8):
    N = T.const('N')
    A: T.Tensor[[N], T.int32]
    with T.Kernel(1, threads=32) as bx:
        T.device_assert(A[0] < limit, "count over the limit")


# ---- T.print on the interpreter ----------------------------------------------------------------------------

def test_print_scalars_every_block_in_order(capsys):
    print_scalars(arange(8))
    line = line_of(print_scalars, "bx * 10 + 1")
    assert capsys.readouterr().out.splitlines() == [
        f"[line {line}, block (0)] bx*10+1 = 1",
        f"[line {line + 1}, block (0)] s[3] = 3",
        f"[line {line + 2}, block (0)] plain message",
        f"[line {line}, block (1)] bx*10+1 = 11",
        f"[line {line + 1}, block (1)] s[3] = 7",
        f"[line {line + 2}, block (1)] plain message",
    ]


def test_print_block_and_thread_filters(capsys):
    print_scalars(arange(12), block=1, thread=5)
    line = line_of(print_scalars, "bx * 10 + 1")
    assert capsys.readouterr().out.splitlines() == [
        f"[line {line}, block (1), thread 5] bx*10+1 = 11",
        f"[line {line + 1}, block (1), thread 5] s[3] = 7",
        f"[line {line + 2}, block (1), thread 5] plain message",
    ]


def test_print_tile_odd_shape_and_2d_grid(capsys):
    A = arange(3, 10)
    print_tile(A, block=(0, 1))
    line = line_of(print_tile, "T.print(s")
    assert capsys.readouterr().out.splitlines() == [
        f"[line {line}, block (0, 1)] tile: s[0:3, 0:5] float32",
        f"[line {line}, block (0, 1)] s[0, :] = 5 6 7 8 9",
        f"[line {line}, block (0, 1)] s[1, :] = 15 16 17 18 19",
        f"[line {line}, block (0, 1)] s[2, :] = 25 26 27 28 29",
    ]


def test_print_tile_of_size_one(capsys):
    print_tile(torch.full((1, 1), 2.5), bm=1, bn=1)
    line = line_of(print_tile, "T.print(s")
    assert capsys.readouterr().out.splitlines() == [
        f"[line {line}, block (0, 0)] tile: s[0:1, 0:1] float32",
        f"[line {line}, block (0, 0)] s[0, :] = 2.5",
    ]


def test_print_wide_rows_are_split_every_16_values(capsys):
    print_tile(arange(1, 20), bm=1, bn=20)
    out = capsys.readouterr().out.splitlines()
    assert out[1].endswith("s[0, 0:16] = " + " ".join(str(i) for i in range(16)))
    assert out[2].endswith("s[0, 16:20] = 16 17 18 19")
    assert len(out) == 3


def test_print_global_region_and_fragment(capsys):
    A = arange(3, 4, dtype=torch.int32)
    print_region_and_fragment(A)
    line = line_of(print_region_and_fragment, "T.print(A[0:1")
    assert capsys.readouterr().out.splitlines() == [
        f"[line {line}, block (0)] A[0:1, 0:4] int32",
        f"[line {line}, block (0)] A[0, :] = 0 1 2 3",
        f"[line {line + 1}, block (0)] frag: f_print[0:2, 0:2] int32",  # staged through shared memory
        f"[line {line + 1}, block (0)] f_print[0, :] = 5 6",
        f"[line {line + 1}, block (0)] f_print[1, :] = 9 10",
    ]


def test_print_half_and_bool_values_as_c_printf(capsys):
    print_half(torch.tensor([0.25, 1.5], dtype=torch.float16))
    out = capsys.readouterr().out.splitlines()
    assert out[0].endswith("twice = 3") and out[1].endswith("big = 0")


def test_print_inside_parallel_is_refused_at_the_line():
    with (
        pytest.warns(Warning, match="T.print inside a T.Parallel loop"),
        pytest.raises(TileNBError, match="T.print inside a T.Parallel loop") as err,
    ):  # the GPU refuses it too
        print_in_parallel(arange(4))
    assert err.value.lineno == line_of(print_in_parallel, "T.print(A[i])")


def test_print_filter_errors_name_the_value():
    with pytest.raises(DSLError, match="thread 40, but the kernel has 32 threads"):
        print_scalars(arange(8), thread=40)
    with pytest.raises(DSLError, match=r"block=\.\.\.\) must be None"):
        print_scalars(arange(8), block=(0, -1))


def test_tilelang_warp_keywords_select_the_thread(capsys):
    @tile_nb.jit
    def warp_print(A):
        N = T.const('N')
        A: T.Tensor[[N], T.float32]
        with T.Kernel(1, threads=256) as bx:
            T.print(A[0], msg="a0", warp_group_id=1, warp_id=1)

    warp_print(arange(2))
    assert capsys.readouterr().out.endswith(", block (0), thread 160] a0 = 0\n")


def test_tilelang_positional_msg_and_no_stack_info(capsys):
    @tile_nb.jit
    def tl_style(A):
        N = T.const('N')
        A: T.Tensor[[N], T.float32]
        with T.Kernel(1, threads=32) as bx:
            T.print(A[0], "first")
            T.device_assert(A[0] >= 0.0, "non-negative", no_stack_info=True)

    tl_style(arange(2))
    assert capsys.readouterr().out.endswith("] first = 0\n")
    with pytest.raises(DeviceAssertError, match="non-negative"):
        tl_style(-torch.ones(2))


# ---- T.device_assert on the interpreter --------------------------------------------------------------------

def test_assert_that_holds_is_silent(capsys):
    A = torch.rand(10) + 0.5
    B = torch.zeros(10)
    check_positive(A, B)
    assert torch.allclose(B, A.sqrt())
    assert capsys.readouterr().out == ""


def test_assert_failure_names_line_block_index_and_value():
    A = torch.ones(10)
    A[6] = -2.0
    with pytest.raises(DeviceAssertError) as err:
        check_positive(A, torch.zeros(10))
    text = str(err.value)
    assert err.value.lineno == line_of(check_positive, "T.device_assert")
    assert "A must be positive" in text and "block (1)" in text and "i = 2" in text
    assert "A[bx * 4 + i] = -2" in text


def test_assert_skips_iterations_masked_off():
    # N = 6: block 1 runs i = 0, 1 only; A's elements past N do not exist, so nothing can fail there
    A = torch.ones(6)
    check_positive(A, torch.zeros(6))
    A[5] = 0.0
    with pytest.raises(DeviceAssertError, match=r"block \(1\); i = 1;"):
        check_positive(A, torch.zeros(6))


def test_assert_at_block_level_and_nan_fails():
    check_count(torch.tensor([3, 20], dtype=torch.int32))
    with pytest.raises(DeviceAssertError, match=r"count over the limit \(block \(0\); A\[0\] = 9\)"):
        check_count(torch.tensor([9, 0], dtype=torch.int32))
    with pytest.raises(DeviceAssertError, match="A must be positive"):
        A = torch.ones(4)
        A[0] = float("nan")
        check_positive(A, torch.zeros(4))


def test_compile_time_assert_fails_at_elaboration():
    @tile_nb.jit
    def static_check(A, n: int = 3):
        N = T.const('N')
        A: T.Tensor[[N], T.float32]
        with T.Kernel(1, threads=32) as bx:
            T.device_assert(n % 2 == 0, "n must be even")

    with pytest.raises(DeviceAssertError, match="n must be even"):
        static_check(arange(2))
    static_check(arange(2), n=4)


# ---- the CUDA they lower to (compile only) -----------------------------------------------------------------

def test_cuda_source_prints_from_one_thread_of_the_filtered_block():
    src = print_scalars.compile(arange(8), block=1, thread=5, target="sm_90a").cuda_source
    line = line_of(print_scalars, "bx * 10 + 1")
    assert f'printf("[line {line}, block (%d), thread 5] bx*10+1 = %d\\n"' in src
    assert f'printf("[line {line + 1}, block (%d), thread 5] s[3] = %g\\n"' in src
    assert "== 5" in src and "== 1" in src


def test_cuda_source_prints_a_tile_row_by_row():
    src = print_tile.compile(arange(3, 10), target="sm_90a").cuda_source
    line = line_of(print_tile, "T.print(s")
    assert f'printf("[line {line}, block (%d, %d)] tile: s[%d:%d, %d:%d] float32\\n"' in src
    assert f'printf("[line {line}, block (%d, %d)] s[%d, :] = %g %g %g %g %g\\n"' in src


def test_cuda_source_asserts_with_the_line():
    src = check_positive.compile(torch.ones(8), torch.zeros(8), target="sm_90a").cuda_source
    line = line_of(check_positive, "T.device_assert")
    assert f'tnb_device_assert_fail("T.device_assert at line {line}: A must be positive"' in src
    assert "__assert_fail" in src and "__assertfail" in src  # nvcc's and NVRTC's spellings
    assert "} else {" in src  # `if (cond) {} else {fail}`: a NaN fails, as on the interpreter
    assert debug_ops_of(src) == (True, [line])  # its failure message is a printf too


def test_kernels_without_debug_ops_have_no_debug_code():
    @tile_nb.jit
    def plain(A, B):
        N = T.const('N')
        A: T.Tensor[[N], T.float32]
        B: T.Tensor[[N], T.float32]
        with T.Kernel(T.ceildiv(N, 32), threads=32) as bx:
            for i in T.Parallel(32):
                B[bx * 32 + i] = A[bx * 32 + i]

    src = plain.compile(torch.ones(64), torch.ones(64), target="sm_90a").cuda_source
    assert debug_ops_of(src) == (False, []) and "printf" not in src


def test_fragment_tile_prints_through_shared_memory_and_its_element_is_refused():
    from tile_nb.lower import LoweringError

    A = arange(3, 4, dtype=torch.int32)
    src = print_region_and_fragment.compile(A, target="sm_90a").cuda_source
    line = line_of(print_region_and_fragment, "T.print(f, ")
    assert f'printf("[line {line}, block (%d)] f_print[%d, :] = %d %d\\n"' in src
    with pytest.raises(LoweringError, match=r"element of the fragment 'f' on the GPU.*T.print\(f\)"):
        print_region_and_fragment.compile(A, element=True, target="sm_90a")
    with pytest.warns(Warning, match="fragment 'f' on the GPU"):  # the interpreter prints it; the GPU refuses
        print_region_and_fragment(A, element=True)


# ---- capture of C-level output around a launch (no GPU needed) ---------------------------------------------

def test_c_level_output_is_captured_and_written_to_sys_stdout(capsys):
    import ctypes

    libc = ctypes.CDLL(None)

    def fake_launch():
        libc.printf(b"from C: %d\n", 42)
        os.write(2, b"to fd 2\n")
        return "done"

    with captured_fds() as captured:
        assert fake_launch() == "done"
    assert captured[1] == "from C: 42\n" and captured[2] == "to fd 2\n"


def test_debug_launch_copies_c_output_into_sys_stdout_after_synchronizing(monkeypatch, capsys):
    import ctypes

    libc = ctypes.CDLL(None)
    order = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: order.append("sync"))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)

    def launch(x):
        order.append("launch")
        libc.printf(b"[line 3, block (0)] x = %d\n", x)
        return x + 1

    assert DebugLaunch(launch, "k", [])(41) == 42
    assert order == ["launch", "sync"]
    assert capsys.readouterr().out == "[line 3, block (0)] x = 41\n"


def test_debug_launch_turns_an_assert_error_into_device_assert_error(monkeypatch, capsys):
    import ctypes

    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    libc = ctypes.CDLL(None)

    def failing(*args):
        libc.printf(b"[line 7, block (0), thread 3] T.device_assert failed: x (A[i] = -1)\n")
        raise RuntimeError("CUDA error: device-side assert triggered")

    with pytest.raises(DeviceAssertError) as err:
        DebugLaunch(failing, "k", [7, 9])()
    text = str(err.value)
    assert "kernel 'k' at one of lines 7, 9" in text and "A[i] = -1" in text and "restart" in text
    assert "T.device_assert failed" in capsys.readouterr().out  # the device's own line reaches the cell too
    other = DebugLaunch(lambda: (_ for _ in ()).throw(ValueError("bad shape")), "k", [7])
    with pytest.raises(ValueError, match="bad shape"):  # not an assert: the launch's own error
        other()


# ---- on the GPU (not run where no device is present) -------------------------------------------------------

@pytest.mark.gpu
def test_gpu_print_reaches_python_stdout(capfd):
    A = arange(8)
    print_scalars(A.cuda(), block=1)
    out = capfd.readouterr().out
    print_scalars(A, block=1)
    assert out == capfd.readouterr().out  # the interpreter's text, line for line (one block: same order)


@pytest.mark.gpu
def test_gpu_tile_print_matches_the_interpreter(capfd):
    A = arange(3, 10)
    print_tile(A.cuda(), block=(0, 1))
    gpu = capfd.readouterr().out
    print_tile(A, block=(0, 1))
    assert gpu == capfd.readouterr().out


@pytest.mark.gpu
def test_gpu_assert_that_holds_runs():
    A = (torch.rand(10) + 0.5).cuda()
    B = torch.zeros(10, device="cuda")
    check_positive(A, B)
    assert torch.allclose(B, A.sqrt())


@pytest.mark.gpu
def test_gpu_failing_assert_raises_in_a_fresh_process():
    # A device-side assert leaves the CUDA context unusable: run it in a child process.
    import subprocess
    import sys

    code = (
        "import sys; sys.path.insert(0, 'tests')\n"
        "import torch, test_debug_ops as t\n"
        "A = torch.ones(10); A[6] = -2\n"
        "try:\n"
        "    t.check_positive(A.cuda(), torch.zeros(10, device='cuda'))\n"
        "except t.DeviceAssertError as e:\n"
        "    print('RAISED', e)\n"
    )
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    done = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=300)
    line = line_of(check_positive, "T.device_assert")
    assert "RAISED" in done.stdout, done.stdout + done.stderr
    assert f"kernel 'check_positive' at line {line}" in done.stdout and "restart" in done.stdout
