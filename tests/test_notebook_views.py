"""KernelView and its parts: highlighter, IR alignment, the three renderings, building from kernel objects."""
from __future__ import annotations

import json
import pickle
import re
import subprocess
import sys
from types import SimpleNamespace

import pytest

from tile_nb.notebook.diff import align, changed_lines
from tile_nb.notebook.highlight import highlight_lines
from tile_nb.notebook.views import MIME_TYPE, KernelView, Param, Section

# --------------------------------------------------------------------------------------------- highlighter


def test_highlight_keeps_one_fragment_per_line():
    text = '@T.prim_func\ndef f(A: T.Buffer((M,), "float16")):\n    # note\n\n    x = 1 < 2'
    lines = highlight_lines(text, "python")
    assert len(lines) == 5
    assert lines[3] == ""
    plain = [re.sub(r"<[^>]+>", "", line) for line in lines]
    assert plain[1] == "def f(A: T.Buffer((M,), &quot;float16&quot;)):"
    assert plain[4] == "    x = 1 &lt; 2"  # escaped
    assert 'style="color:#cf222e"' in lines[1]  # `def` keyword
    assert "font-style:italic" in lines[2]  # comment


@pytest.mark.parametrize("language", ["cuda", "ptx", "text", "no-such-language"])
def test_highlight_other_languages(language):
    text = 'extern "C" __global__ void k(float* a) {\n  a[0] = 1.0f; // x\n}'
    lines = highlight_lines(text, language)
    assert len(lines) == 3
    assert "<script" not in "".join(lines)


# --------------------------------------------------------------------------------------------- alignment


def test_align_pairs_similar_lines_and_keeps_order():
    left = ["@T.prim_func", 'def gemm(A: T.Buffer(("M", "K"))):', "    M, K = T.int32(), T.int32()",
            "    N = T.int32()", '    bx = T.launch_thread("blockIdx.x", (M + 63) // 64)', "    tx = 1"]
    right = [
        "@T.prim_func",
        "def gemm(A: T.Buffer((256, 128))):",
        '    bx = T.launch_thread("blockIdx.x", 4)',
        "    tx = 1",
    ]
    rows = align(left, right)
    assert [(r.left_no, r.right_no, r.tag) for r in rows] == [
        (1, 1, "equal"), (2, 2, "replace"), (3, None, "delete"), (4, None, "delete"), (5, 3, "replace"),
        (6, 4, "equal")]
    assert changed_lines(left, right) == [2, 3]


def test_align_identical_and_empty():
    assert changed_lines(["a", "b"], ["a", "b"]) == []
    assert [r.tag for r in align([], ["x"])] == ["insert"]
    assert [r.tag for r in align(["x"], [])] == ["delete"]


# --------------------------------------------------------------------------------------------- the view


def _view(**overrides) -> KernelView:
    fields = {
        "name": "gemm",
        "params": [
            Param("A", "tensor", "T.Tensor[[M, K], T.float16]"),
            Param("M", "const", "T.const"),
            Param("block_M", "compile_time", "= 64"),
        ],
        "consts": {"M": 256},
        "sections": [
            Section(
                "template",
                "Phase 1: template",
                "python",
                "def gemm(A):\n    x = M\n    y = 1",
                note="at line 9 (`if M > 128:`): needs a concrete M",
            ),
            Section(
                "specialized",
                "Phase 2: specialized",
                "python",
                "def gemm(A):\n    x = 256\n    y = 1",
                changed_lines=(2,),
            ),
            Section("cuda", "CUDA source", "cuda", "__global__ void k() {}\n// <b>not html</b>"),
        ],
        "resources": {"registers": 40, "shared_bytes": 4096, "spill_stores": 0, "spill_loads": 0},
        "timings_ms": {"lower": 12.5, "nvcc": 800.0},
        "run": {"device": "cpu", "max_abs_err": 0.0},
        "backend": "cpu-interpreter",
    }
    fields.update(overrides)
    return KernelView(**fields)


def test_text_plain_is_a_short_stable_summary():
    text = _view()._repr_mimebundle_()["text/plain"]
    assert text == (
        "KernelView gemm\n"
        "  params: A: tensor T.Tensor[[M, K], T.float16]; M: const T.const; block_M: compile_time = 64\n"
        "  consts: M=256\n"
        "  template: 3 lines (stopped early)\n"
        "  specialized: 3 lines, 1 changed by specialization\n"
        "  cuda: 2 lines\n"
        "  ran on the CPU interpreter")
    # Nothing machine- or run-dependent: no timings, no registers, no addresses.
    assert " ms" not in text and "registers" not in text and "0x" not in text


def test_json_has_the_extension_contract():
    data = _view()._repr_mimebundle_()[MIME_TYPE]
    assert json.loads(json.dumps(data)) == data  # plain JSON
    assert set(data) == {
        "version",
        "name",
        "params",
        "consts",
        "backend",
        "sections",
        "resources",
        "timings_ms",
        "run",
        "source",
        "notes",
    }
    assert data["notes"] == _view().notes  # what the HTML shows as notes, for the extension
    assert data["version"] == 2 and data["name"] == "gemm" and data["backend"] == "cpu-interpreter"
    assert data["params"][0] == {"name": "A", "kind": "tensor", "annotation": "T.Tensor[[M, K], T.float16]"}
    assert data["consts"] == {"M": 256}
    ids = [s["id"] for s in data["sections"]]
    assert ids == ["template", "specialized", "cuda"]
    for s in data["sections"]:
        assert set(s) >= {"id", "title", "language", "text", "note", "line_map"}
        assert ("changed_lines" in s) == (s["id"] == "specialized")
    assert data["sections"][1]["changed_lines"] == [2]
    assert data["resources"] == {"registers": 40, "shared_bytes": 4096, "spill_stores": 0, "spill_loads": 0}
    assert data["timings_ms"] == {"lower": 12.5, "nvcc": 800.0}
    assert data["run"] == {"device": "cpu", "max_abs_err": 0.0}


def test_json_of_a_bare_view():
    data = KernelView("k").to_json()
    assert data["resources"] is None and data["run"] is None and data["backend"] is None
    assert data["sections"] == [] and data["timings_ms"] == {}


def test_html_is_static_and_complete():
    page = _view().to_html()
    assert "<script" not in page and "onclick" not in page and "id=" not in page
    assert "Phase 1: template" in page and "Phase 2: specialized" in page
    assert "The template stopped early" in page and "if M &gt; 128:" in page
    assert "CPU interpreter" in page
    assert "<details" in page and "CUDA source" in page and "Resources" in page and "Compile timings" in page
    assert "&lt;b&gt;not html&lt;/b&gt;" in page  # source text is escaped
    assert "background:#fff8c5" in page  # the changed specialized line is tinted
    assert page == _view().to_html()  # deterministic
    assert page.count("<div") == page.count("</div>") and page.count("<table") == page.count("</table>")


def test_mimebundle_include_exclude_and_pickle():
    view = _view()
    assert set(view._repr_mimebundle_(include=["text/plain"])) == {"text/plain"}
    assert MIME_TYPE not in view._repr_mimebundle_(exclude=[MIME_TYPE])
    assert pickle.loads(pickle.dumps(view)).to_json() == view.to_json()


def test_param_kind_is_checked():
    with pytest.raises(ValueError, match="param kind"):
        Param("A", "buffer")


# --------------------------------------------------------------------------------------------- building


def test_show_template_and_specialized_from_a_jit_like_object():
    from kernels.notebook_fakes import FakeGemm

    from tile_nb.notebook import show

    view = show(FakeGemm(), M=256, N=256, K=128)
    assert view.consts == {"M": 256, "K": 128, "N": 256}
    kinds = {p.name: (p.kind, p.annotation) for p in view.params}
    assert kinds["A"] == ("tensor", "T.Tensor[[M, K], float16]")
    assert kinds["M"] == ("const", "T.const")
    assert kinds["block_M"] == ("compile_time", "= 64")
    template, specialized = view.section("template"), view.section("specialized")
    assert not template.text.startswith("#")  # the printer's import header is dropped
    assert "(M + 64 - 1) // 64" in template.text and '"blockIdx.x", 4)' in specialized.text
    lines = specialized.text.split("\n")
    assert all(0 < n <= len(lines) for n in specialized.changed_lines)
    assert any("blockIdx.x" in lines[n - 1] for n in specialized.changed_lines)
    assert view.backend is None and view.run is None
    assert show(FakeGemm(), M=256, N=256, K=128).to_text() == view.to_text()


def test_kernel_view_runs_compiles_and_compares():
    import torch
    from kernels.notebook_fakes import FakeGemm

    from tile_nb.notebook import kernel_view

    A, B, C = torch.ones(8, 4).half(), torch.ones(4, 16).half(), torch.zeros(8, 16)
    stop = SimpleNamespace(lineno=3, reason="`if M > 128` needs a concrete M")
    view = kernel_view(FakeGemm(stopped=stop), (A, B, C), run=True, cuda=True, lowered=True,
                       expected=lambda: A.float() @ B.float() + 1)
    assert view.backend == "cpu-interpreter"
    assert view.run == {"device": "cpu", "max_abs_err": 1.0}
    assert [s.id for s in view.sections] == ["template", "specialized", "lowered", "cuda", "ptx"]
    assert view.section("template").note.startswith("at line 3")
    assert view.resources["registers"] == 40 and view.timings_ms["nvcc"] == pytest.approx(800.0)
    assert torch.equal(C, A.float() @ B.float())


def test_show_plain_primfunc():
    from kernels.notebook_fakes import build_gemm

    from tile_nb.notebook import show

    view = show(build_gemm(128, 128, 64))
    assert view.name == "gemm" and [s.id for s in view.sections] == ["specialized"]


def test_importing_notebook_loads_no_ipython_tvm_or_torch():
    code = (
        "import sys, tile_nb.notebook, tile_nb.notebook.views; "
        "print(sorted(m for m in ('IPython', 'tvm', 'torch', 'ipywidgets', 'matplotlib') if m in "
        "sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=str(__import__("pathlib").Path(__file__).parents[1]))
    assert out.stdout.strip() == "[]"


def test_html_indentation_is_never_a_whitespace_only_text_node():
    # nbconvert's HTML export collapses a text node of only spaces to one space (`    <span>for</span>` lost
    # its indentation), so a line's indentation travels inside its first token.
    template = "def gemm(A):\n    for k in T.serial(4):\n        if k > 0:\n            x = k"
    specialized = template.replace("4", "8")
    lowered = "def main():\n    for k in range(8):\n        T.evaluate(0)"
    page = _view(
        sections=[
            Section("template", "Phase 1: template", "python", template),
            Section("specialized", "Phase 2: specialized", "python", specialized, changed_lines=(2,)),
            Section("lowered", "Lowered IR", "python", lowered),
        ]
    ).to_html()
    assert re.search(r">[ \t]{2,}<", page) is None
    assert '<span style="color:#cf222e">    for</span> k' in page
    assert '<span style="color:#cf222e">        if</span> k' in page
    assert highlight_lines("    x = 1", "python") == ["    x = <span style=\"color:#0550ae\">1</span>"]
