"""Line mapping: which displayed IR lines come from which line of the kernel's
source, and hiding internal attrs."""
from __future__ import annotations

import linecache
import re
from types import SimpleNamespace

import pytest
from kernels import reference as R
from kernels.seed import gemm

from tile_nb.notebook.build import view_from_parts
from tile_nb.notebook.linemap import clean_lines, script_lines, shift_line_map

SHAPES = {
    "gemm": {"M": 256, "N": 256, "K": 128},
    "gelu_tanh": {"N": 1000},
    "softmax": {"M": 8, "N": 64},
    "rms_norm": {"M": 8, "N": 64},
    "flash_attention": {"B": 1, "H": 2, "S": 128, "D": 64},
    "dequant_gemm": {"M": 128, "N": 128, "K": 64},
    "column_sums": {"M": 64, "N": 32},
}
KERNELS = [gemm, R.gelu_tanh, R.softmax, R.rms_norm, R.flash_attention, R.dequant_gemm, R.column_sums]
# The user's tile op -> the printed T.tile op it builds.
TILE_OPS = {"copy": "copy", "clear": "fill", "fill": "fill", "gemm": "gemm", "reduce_max": "max",
            "reduce_sum": "sum"}


def _source_line(kernel, n: int) -> str:
    return linecache.getline(kernel.definition.source.filename, n).strip()


def _inverse(line_map: dict[int, list[int]]) -> dict[int, list[int]]:
    inverse: dict[int, list[int]] = {}
    for user_line, lines in line_map.items():
        for n in lines:
            inverse.setdefault(n, []).append(user_line)
    return inverse


def _plausible(printed: str, source: str) -> bool:
    """Whether a printed IR line can come from a source line (by what it is: names, tile op, loop, store)."""
    text = printed.strip()
    if m := re.match(r"T\.tile\.(\w+)\(", text):
        op = re.match(r"T\.(\w+)\(", source)
        return op is not None and TILE_OPS.get(op.group(1)) == m.group(1)
    if m := re.match(r"for (\w+) in ", text):
        return re.match(rf"for .*\b{m.group(1)}\b.* in ", source) is not None
    if m := re.match(r"(\w+) = T\.alloc_buffer\(", text):
        return source.startswith(f"{m.group(1)} = T.alloc_")
    if m := re.match(r"(\w+) = T\.launch_thread\(", text):
        return source.startswith("with T.Kernel(")
    if m := re.match(r"([\w, ]+) = T\.int32\(\)", text):
        return "T.const(" in source or "T.dynamic(" in source
    if m := re.match(r"(\w+): T\.let\[", text):  # a name bound to a value read from memory
        return re.match(rf"(\w+, )*{m.group(1)}(, \w+)* = ", source) is not None
    if m := re.match(r"(\w+)\[.*\] = ", text):
        return f"{m.group(1)}[" in source
    if text.startswith("if "):
        return source.startswith("if ")
    if text.startswith("@T.prim_func"):
        return source.startswith("@")
    if text.startswith("def "):
        return source.startswith("def ") or re.match(r"\w+: T\.Tensor\[", source) is not None
    if text.startswith("T.call_extern("):
        return "T.atomic_add(" in source
    return False


def test_gemm_template_lines():
    source = gemm.definition.source
    first = source.first_line  # the decorator
    text, line_map = script_lines(gemm.template().func, source)
    lines = text.split("\n")

    def shown(user_offset: int) -> list[str]:
        return [lines[n - 1].strip() for n in line_map.get(first + user_offset, [])]

    assert shown(0) == ["@T.prim_func"]
    assert shown(2) == ["M, K = T.int32(), T.int32()", "N = T.int32()"]  # M, N, K = T.const('M, N, K')
    assert [s.split(" = ")[0] for s in shown(8)] == ["bx", "by", "tx"]  # with T.Kernel(...) as (bx, by)
    assert shown(9)[0].startswith("A_shared = T.alloc_buffer((128, 32)")
    assert shown(12) == ["T.tile.fill(C_local[0:128, 0:128], T.float32(0.0))"]  # T.clear(C_local)
    assert shown(13)[0].startswith("for k in T.serial((K + 31) // 32")  # T.Pipelined
    assert [s.split("(")[0] for s in shown(14) + shown(15) + shown(16) + shown(17)] == \
        ["T.tile.copy", "T.tile.copy", "T.tile.gemm", "T.tile.copy"]
    # A: T.Tensor[...] -> the def
    assert all(lines[n - 1].startswith("def gemm(") for n in line_map[first + 4])
    assert "tile_nb." not in text  # internal attributes hidden


@pytest.mark.parametrize("kernel", KERNELS, ids=lambda k: k.definition.source.tree.name)
@pytest.mark.parametrize("phase", ["template", "specialized"])
def test_every_line_of_the_reference_kernels_maps_to_a_plausible_source_line(kernel, phase):
    name = kernel.definition.source.tree.name
    func = kernel.template().func if phase == "template" else kernel.specialize(**SHAPES[name])
    text, line_map = script_lines(func, kernel.definition.source)
    lines = text.split("\n")
    inverse = _inverse(line_map)
    assert sorted(inverse) == list(range(1, len(lines) + 1)), "every displayed line is mapped"
    for n, user_lines in inverse.items():
        sources = [_source_line(kernel, u) for u in user_lines]
        assert all(_plausible(lines[n - 1], s) for s in sources), (lines[n - 1], sources)
    assert "tile_nb." not in text


def test_template_that_stopped_early_still_maps_what_it_has():
    from tile_nb.frontend.source import run_source

    ns = run_source(
        "import tile_nb\nimport tile_nb.language as T\n\n"
        "@tile_nb.jit\n"
        "def steps(X):\n"
        "    N = T.const('N')\n"
        "    X: T.Tensor[[N], T.float32]\n"
        "    with T.Kernel(1) as bx:\n"
        "        for i in T.Parallel(N):\n"
        "            X[i] = X[i] * 2.0\n"
        "        if N > 1024:\n"
        "            X[0] = 0.0\n")
    template = ns["steps"].template()
    assert template.stopped is not None
    text, line_map = script_lines(template.func, ns["steps"].definition.source)
    lines = text.split("\n")
    assert [lines[n - 1].strip() for n in line_map[9]] == ["for i in T.parallel(N):"]
    assert [lines[n - 1].strip() for n in line_map[10]] == ["X[i] = X[i] * T.float32(2.0)"]


def test_without_a_source_there_is_no_map_and_the_same_text():
    func = gemm.template().func
    text, line_map = script_lines(func, None)
    assert line_map == {} and text == script_lines(func, gemm.definition.source)[0]


def test_clean_lines_hides_internal_attrs_and_keeps_others():
    text = ('# from tvm.script import tirx as T\n\n@T.prim_func\ndef f():\n'
            '    T.func_attr({"tile_nb.outputs": [], "target": "cuda", "tile_nb.tile_op_lines": [1, 2]})\n'
            '    T.func_attr({"tile_nb.threads": 128})\n    x = 1\n\n')
    shown, where = clean_lines(text)
    assert shown == ["@T.prim_func", "def f():", '    T.func_attr({"target": "cuda"})', "    x = 1"]
    assert where == [None, None, 1, 2, 3, None, 4, None, None]
    assert shift_line_map({7: [3, 4, 7], 8: [6]}, where) == {7: [1, 2, 4]}


def _compiled(source_regions=None):
    lowered = (
        "# from tvm.script import ir as I\n# from tvm.script import tirx as "
        "T\n\n@I.ir_module\nclass Module:\n"
        "    @T.prim_func\n    def gemm():\n"
        '        T.func_attr({"tile_nb.tile_op_lines": [3]})\n        a = 1\n        b = 2\n'
    )
    cuda = 'extern "C" __global__ void gemm() {\n  int a = 1;\n  int b = 2;\n}\n\n'
    return SimpleNamespace(
        lowered_ir=lowered,
        cuda_source=cuda,
        ptx=None,
        sass=None,
        resources=None,
        timings={},
        source_regions=source_regions,
    )


def test_compiled_line_map_is_shifted_to_the_displayed_lines():
    """User line -> 1-based lines of lowered_ir / cuda_source
    (region_line_map's result) in displayed lines."""
    from tile_nb.notebook.build import _compiled_sections

    line_maps = {"lowered": {20: [9], 21: [8, 10]}, "cuda": {20: [2], 21: [3, 4, 99]}}
    sections = {
        s.id: s for s in _compiled_sections(_compiled(), lowered=True, cuda=True, line_maps=line_maps)
    }
    lowered, cuda = sections["lowered"], sections["cuda"]
    # no header, attrs
    assert lowered.text.split("\n")[3:] == ["    def gemm():", "        a = 1", "        b = 2"]
    assert lowered.line_map == {20: (5,), 21: (6,)}  # line 8 (internal attrs) is not shown
    assert cuda.line_map == {20: (2,), 21: (3, 4)}  # line 99 does not exist


@pytest.mark.parametrize("regions", [None, {}, {"lowered": {}}, {"lowered": {0: [9]}}])
def test_compiled_without_a_line_map_shows_no_mapping(regions):
    # without the phase-2 function (or without regions) nothing says which user line a region is
    view = view_from_parts("gemm", compiled=_compiled(regions), lowered=True, cuda=True)
    assert view.section("lowered").line_map is None and view.section("cuda").line_map is None
    assert all(s["line_map"] == {} for s in view.to_json()["sections"])


def test_view_carries_the_source_lines_and_both_maps():
    from tile_nb.notebook.api import kernel_view

    view = kernel_view(gemm, (), {"M": 256, "N": 256, "K": 128})
    source = view.to_json()["source"]
    first = gemm.definition.source.first_line
    assert source["first_line"] == first
    assert source["lines"][0] == "@tile_nb.lazy_jit" and source["lines"][1].startswith("def gemm(")
    assert source["lines"][-1].strip() == "T.copy(C_local, C[bx * block_M, by * block_N])"
    for section_id in ("template", "specialized"):
        line_map = view.section(section_id).line_map
        copy_out = first + len(source["lines"]) - 1
        text = view.section(section_id).text.split("\n")
        assert [text[n - 1].strip().split("(")[0] for n in line_map[copy_out]] == ["T.tile.copy"]
