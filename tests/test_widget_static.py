"""Widget outputs carry static forms (issue 34 item 2): the progress bar of sweeps and tuning and the
`explore` sliders are displayed as one bundle with the widget view and `text/plain` / `text/html` fallbacks,
so a stored notebook read without a kernel shows the final state, not `VBox(children=(HBox(...`; the result
that ends the cell carries its table as HTML and its plot as PNG."""
from __future__ import annotations

import base64

import pytest

pytest.importorskip("ipywidgets")
torch = pytest.importorskip("torch")

import tile_nb
import tile_nb.language as T

WIDGET = "application/vnd.jupyter.widget-view+json"


@tile_nb.jit
def scale_add(X, Y, alpha: float = 2.0, block: int = 64):
    N = T.const('N')
    X: T.Tensor[[N], T.float32]
    Y: T.Tensor[[N], T.float32]
    with T.Kernel(T.ceildiv(N, block), threads=64) as bx:
        for i in T.Parallel(block):
            if bx * block + i < N:
                Y[bx * block + i] = X[bx * block + i] * alpha + 1.0


@pytest.fixture(scope="module")
def ip():
    from IPython import get_ipython
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.testing import globalipapp

    # a plain InteractiveShell exists once an earlier test formatted display data (ipywidgets' Output does);
    # globalipapp cannot start its terminal shell beside it, and that one serves as well
    started = not InteractiveShell.initialized()
    shell = (globalipapp.start_ipython() or get_ipython()) if started else InteractiveShell.instance()
    shell.run_line_magic("load_ext", "tile_nb.notebook")
    yield shell
    shell.run_line_magic("unload_ext", "tile_nb.notebook")
    if started and hasattr(globalipapp.start_ipython, "already_called"):
        del globalipapp.start_ipython.already_called


@pytest.fixture
def published(ip, monkeypatch):
    """Every display message of the test: dicts with data, transient (display id) and update."""
    sent = []

    def publish(data, metadata=None, source=None, *, transient=None, update=False, **_):
        sent.append({"data": data, "transient": transient or {}, "update": update})

    monkeypatch.setattr(ip.display_pub, "publish", publish)
    return sent


def _is_static(text: str) -> bool:
    return not any(
        repr_start in text for repr_start in ("VBox(", "HBox(", "IntProgress(", "SelectionSlider(")
    )


def test_progress_bar_is_shown_with_a_static_form_and_ends_with_the_final_line(ip, published):
    from tile_nb.bench.progress import make_reporter
    from tile_nb.bench.results import SweepPoint, TuneResult

    reporter = make_reporter("notebook", 3, "gemm")
    (shown,) = published
    assert WIDGET in shown["data"] and not shown["update"]
    assert shown["data"]["text/plain"] == "gemm: 3 configurations to run (not finished)"
    assert "3 configurations" in shown["data"]["text/html"]
    display_id = shown["transient"]["display_id"]

    result = TuneResult("gemm", {"block_M": [64, 128, 256]}, [], gpu=False, mode="compile-only")
    reporter.begin("compile", 3)
    outcomes = [dict(resources={"registers": 90}), dict(pruned="shared memory 300 KiB > 227 KiB"),
                dict(error="boom", stage="compile")]
    for bm, outcome in zip((64, 128, 256), outcomes, strict=True):
        point = SweepPoint({"block_M": bm}, **outcome)
        result.points.append(point)
        reporter.update(result, point, "compile")
    assert len(published) == 1        # updates go to the widget only, not to the stored output
    reporter.close(result)
    (final,) = published[1:]
    assert final["update"] and final["transient"]["display_id"] == display_id
    assert final["data"][WIDGET] == shown["data"][WIDGET]   # the same widget, now with its final static form
    text = final["data"]["text/plain"]
    assert text.startswith("gemm: tuned 3 of 3 configurations in ") and text.endswith(
        " s, 1 pruned, 1 failed"
    )
    assert text in final["data"]["text/html"].replace("&#x27;", "'")
    assert (
        reporter.final_text(result, elapsed_s=3.44)
        == "gemm: tuned 3 of 3 configurations in 3.4 s, 1 pruned, 1 failed"
    )


def test_finished_sweep_shows_its_final_line_and_its_result_has_table_and_png(ip, published):
    X, Y = torch.randn(256), torch.empty(256)
    result = scale_add.sweep(
        {"block": [32, 64, 0]}, args=(X, Y), progress="notebook", warmup_ms=1.0, rep_ms=3.0
    )
    first, *rest = published
    assert WIDGET in first["data"] and first["data"]["text/plain"].startswith("scale_add: 3 configurations")
    final = rest[-1]
    assert final["update"] and final["transient"] == first["transient"]
    assert final["data"]["text/plain"].startswith("scale_add: swept 3 of 3 configurations in ")
    assert final["data"]["text/plain"].endswith(" s, 1 failed")
    assert all(_is_static(m["data"]["text/plain"]) for m in published)
    # the cell's value: the final table as HTML and the plot as PNG
    formatters = ip.display_formatter.formatters  # disabled in a terminal shell: look the printers up
    html = formatters["text/html"].lookup(result)(result)
    assert "<table" in html and "failed" in html
    png = formatters["image/png"].lookup(result)(result)
    png = png if isinstance(png, bytes) else base64.b64decode(png)
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) < 60_000


def test_explore_bundle_has_the_choice_and_the_view_and_follows_the_sliders(ip, published):
    from kernels.notebook_fakes import FakeGemm

    from tile_nb.notebook.widgets import explore

    ex = explore(FakeGemm(), M=[64, 128], N=[64], K=32, block_M=[32, 64])
    bundle = ex._repr_mimebundle_()
    assert WIDGET in bundle and _is_static(bundle["text/plain"])
    choice, view = bundle["text/plain"].split("\n", 1)
    assert choice == "explore(gemm): M=64 of [64, 128]; N=64 of [64]; block_M=32 of [32, 64]"
    assert view == ex.view.to_text()
    assert ex.view.to_html() in bundle["text/html"] and "M=64 of [64, 128]" in bundle["text/html"]

    ip.display_formatter.ipython_display_formatter(ex)   # what a cell ending in `ex` does
    (shown,) = published
    assert shown["data"]["text/plain"] == bundle["text/plain"]
    ex.controls["M"].value = 128
    (moved,) = published[1:]
    assert moved["update"] and moved["transient"] == shown["transient"]
    assert moved["data"]["text/plain"].startswith("explore(gemm): M=128 of [64, 128];")
    assert moved["data"]["text/plain"].split("\n", 1)[1] == ex.view.to_text() and ex.view.consts["M"] == 128


def test_explore_static_form_shows_the_error_of_a_bad_choice(ip):
    from kernels.notebook_fakes import FakeGemm

    from tile_nb.notebook.widgets import explore

    ex = explore(FakeGemm(), M=[64], N=[64])  # no K: the fake cannot specialize
    bundle = ex._repr_mimebundle_()
    assert bundle["text/plain"] == "explore(gemm): M=64 of [64]; N=64 of [64]\nKeyError: 'K'"
    assert "KeyError" in bundle["text/html"]


def test_nbval_sanitizer_makes_the_first_and_the_final_progress_line_equal(ip, published):
    """nbval sees the first static form (it ignores display updates); the stored
    notebook holds the final one."""
    import re

    from tile_nb.bench.progress import make_reporter
    from tile_nb.bench.results import SweepPoint, SweepResult
    from tile_nb.testing import sanitize_patterns

    def sanitized(text: str) -> str:
        for regex, replace in sanitize_patterns():
            text = re.sub(regex, replace, text)
        return text

    reporter = make_reporter("notebook", 2, "scale_add")
    result = SweepResult(
        "scale_add",
        {"block": [32, 0]},
        [SweepPoint({"block": 32}, resources={}), SweepPoint({"block": 0}, error="boom", stage="compile")],
    )
    reporter.close(result)
    first, final = published
    assert first["data"]["text/plain"] != final["data"]["text/plain"]
    for mime in ("text/plain", "text/html"):
        assert sanitized(first["data"][mime]) == sanitized(final["data"][mime])
    assert sanitized(final["data"]["text/plain"]) == "scale_add: <progress>"
    # narrow: other lines that mention configurations are left alone
    assert sanitized("gemm: 3 configurations over block") == "gemm: 3 configurations over block"
