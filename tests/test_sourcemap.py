"""Source regions: the lowered TIRx and CUDA lines each statement of a kernel
became (tile_nb.lower.sourcemap).

The marks must not change the code (the CUDA without them is compared with a build that never had them), must
not survive into any text a user sees or nvcc compiles, and must map each line of the kernel to code that does
what that line says (cp.async for a global->shared copy, wgmma for a T.gemm, exp2f for a T.exp2 body).
"""
from __future__ import annotations

import linecache
import re
import textwrap

import pytest
import tvm
from kernels import reference as R
from kernels.seed import gemm, gemm_variant

import tile_nb
from tile_nb.backend.build import _source_of
from tile_nb.backend.target import resolve_target
from tile_nb.lower.lowering import lower_with_plan
from tile_nb.lower.sourcemap import MARK_BEGIN, source_regions, split_marks
from tile_nb.notebook.api import kernel_view

TARGET = "sm_90a"


def _cuda(func, *, marks: bool) -> str:
    target = resolve_target(TARGET)
    lowered, _ = lower_with_plan(func, target, source_marks=marks)
    mod = tvm.IRModule({"main": lowered.with_attr("global_symbol", "main")})
    with target:
        return _source_of(tvm.compile(mod, target=target, tir_pipeline="tirx"))


# ------------------------------------------------------------------------------------------ split_marks
def test_split_marks_nested_and_repeated_regions():
    text = "\n".join([
        "a",
        "tile_nb_src_begin(0);",
        "b",
        'T.call_extern("void", "tile_nb_src_begin", 1)',
        "c",
        "",
        'T.call_extern("void", "tile_nb_src_end", 1)',
        "d",
        "tile_nb_src_end(0);",
        "tile_nb_src_begin(1);",
        "e",
        "tile_nb_src_end(1);",
        "f",
    ])
    kept, regions = split_marks(text)
    assert kept.split("\n") == ["a", "b", "c", "", "d", "e", "f"]
    # a line belongs to the innermost open region; blank lines to none; a
    # region emitted twice holds both copies
    assert regions == {0: [2, 5], 1: [3, 6]}


@pytest.mark.parametrize("text", ["tile_nb_src_begin(0);\nx", "tile_nb_src_begin(0);\ntile_nb_src_end(1);"])
def test_split_marks_refuses_unbalanced_marks(text):
    with pytest.raises(ValueError, match="region"):
        split_marks(text)


def test_regions_stop_at_parallel_loops():
    func = R.softmax.specialize(M=8, N=64)
    kinds = [type(s).__name__ for s in source_regions(func)]
    assert "TilePrimitiveCall" in kinds and "For" in kinds
    # Nothing inside a T.Parallel loop is a region: its stores are per-thread code.
    parallel = [
        s for s in source_regions(func) if isinstance(s, tvm.tirx.For) and s.kind == tvm.tirx.ForKind.PARALLEL
    ]
    assert parallel and not any(isinstance(s, tvm.tirx.BufferStore) for s in source_regions(func))


# ------------------------------------------------------------------------------------------
# the code is unchanged
CASES = {
    "gemm cp.async": lambda: gemm_variant.specialize(M=1000, N=1000, K=1000),
    "gemm TMA 2 warpgroups": lambda: gemm_variant.specialize(M=1024, N=1024, K=1024, block_M=128, block_N=256,
                                                             block_K=64, threads=256),
    "softmax": lambda: R.softmax.specialize(M=100, N=1000),
    "flash_attention": lambda: R.flash_attention.specialize(B=1, H=2, S=200, D=64),
    "dequant_gemm": lambda: R.dequant_gemm.specialize(M=128, N=128, K=64),
}


@pytest.mark.parametrize("case", list(CASES))
def test_marks_do_not_change_the_cuda(case):
    func = CASES[case]()
    plain = _cuda(func, marks=False)
    marked = _cuda(func, marks=True)
    assert MARK_BEGIN in marked and MARK_BEGIN not in plain
    stripped, regions = split_marks(marked)
    assert stripped == plain
    # every region of a statement that emits code shows up (the pipeline's own copies included)
    assert len(regions) >= len([s for s in source_regions(func) if isinstance(s, tvm.tirx.TilePrimitiveCall)])


def test_compiled_kernel_texts_hold_no_marks():
    kernel = gemm.compile(M=256, N=256, K=128, target=TARGET)
    assert "tile_nb_src" not in kernel.lowered_ir and "tile_nb_src" not in kernel.cuda_source
    assert set(kernel.source_regions) == {"lowered", "cuda"}
    assert kernel.source_regions["cuda"] and kernel.source_regions["lowered"]
    # the plain `lower()` is for users compiling themselves: no marks that nvcc would not know
    from tile_nb.lower import lower

    assert "tile_nb_src" not in lower(gemm.specialize(M=256, N=256, K=128), resolve_target(TARGET)).script()


# ------------------------------------------------------------------------------------------
# what the views map
def _mapped(view, section_id: str, source_text: str) -> list[str]:
    """The lines of section `section_id` that the view maps to the kernel line whose text is `source_text`."""
    source = view.source
    numbers = [
        source["first_line"] + i for i, line in enumerate(source["lines"]) if line.strip() == source_text
    ]
    assert len(numbers) == 1, f"{source_text!r} is not one line of the kernel"
    section = next(s for s in view.sections if s.id == section_id)
    lines = section.text.split("\n")
    return [lines[n - 1] for n in (section.line_map or {}).get(numbers[0], ())]


def test_gemm_lines_map_to_the_code_they_became():
    view = kernel_view(gemm, (), {"M": 256, "N": 256, "K": 128}, lowered=True, cuda=True)
    copy_a = "T.copy(A[bx * block_M, k * block_K], A_shared)"
    # the producer warp's TMA load
    assert any("tnb_tma_load_2d(" in line for line in _mapped(view, "cuda", copy_a))
    assert any("tnb_tma_load_2d" in line for line in _mapped(view, "lowered", copy_a))
    gemm_line = "T.gemm(A_shared, B_shared, C_local)"
    assert any("wgmma" in line for line in _mapped(view, "cuda", gemm_line))
    assert not any("wgmma" in line for line in _mapped(view, "cuda", copy_a))
    assert any(
        "C_ptr" in line or "C[" in line
        for line in _mapped(view, "cuda", "T.copy(C_local, C[bx * block_M, by * block_N])")
    )


def test_parallel_body_lines_map_to_the_loop_code():
    view = kernel_view(R.softmax, (), {"M": 100, "N": 1000}, lowered=True, cuda=True)
    exp_lines = _mapped(view, "cuda", "x[i, j] = T.exp2((x[i, j] - row_max[i]) * LOG2E)")
    assert exp_lines and any("exp2f" in line for line in exp_lines)
    assert not any("exp2f" in line for line in _mapped(view, "cuda", "T.reduce_sum(x, row_sum, dim=1)"))


def test_regions_follow_a_kernel_moved_down_its_cell():
    """The compile cache keys no lines: a kernel moved down is the same compiled
    kernel, mapped to its new lines."""
    body = textwrap.dedent("""\
        @tile_nb.jit
        def scale(X, Y):
            N = T.const('N')
            X: T.Tensor[[N], T.float32]
            Y: T.Tensor[[N], T.float32]
            with T.Kernel(T.ceildiv(N, 128)) as bx:
                for i in T.Parallel(128):
                    if bx * 128 + i < N:
                        Y[bx * 128 + i] = X[bx * 128 + i] * 2.0
        """)
    maps, kernels = [], []
    for pad in (0, 5):
        text = "\n" * pad + body
        filename = f"<tile_nb-sourcemap-test-{pad}>"
        linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)
        ns = {"tile_nb": tile_nb, "T": tile_nb.language}
        exec(compile(text, filename, "exec"), ns)
        view = kernel_view(ns["scale"], (), {"N": 1000}, cuda=True)
        kernels.append(ns["scale"].compile(N=1000, target=TARGET))
        maps.append(next(s for s in view.sections if s.id == "cuda").line_map)
    assert kernels[0] is kernels[1]  # one compiled kernel (the memory cache), no rebuild
    store = 9  # the store's line in the first copy
    assert maps[0][store] and maps[1][store + 5] == maps[0][store]
    assert store + 5 not in maps[0]
    cuda = next(s for s in view.sections if s.id == "cuda").text.split("\n")
    assert any(re.search(r"Y\w*\[.*\] = ", cuda[n - 1]) for n in maps[1][store + 5])


def test_regions_survive_the_disk_cache(tmp_path, monkeypatch):
    import tile_nb.runtime as rt

    monkeypatch.setenv("TILE_NB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("TILE_NB_DISABLE_CACHE", raising=False)
    rt.clear_memory_cache()
    func = gemm.specialize(M=128, N=128, K=64)
    try:
        built = rt.compile(func, TARGET)
        rt.clear_memory_cache()
        loaded = rt.compile(func, TARGET)
    finally:
        rt.clear_memory_cache()
    assert not built.from_cache and loaded.from_cache
    assert loaded.source_regions == built.source_regions and loaded.source_regions["cuda"]
