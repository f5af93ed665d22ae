"""`f.bench` / `f.sweep` (tile_nb.bench: results as data) and their notebook views,
`%%tilekernel --bench/--sweep` on the CPU interpreter (fast: tiny kernels, short runs), and one GPU
test of the same on CUDA tensors."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

import tile_nb
import tile_nb.language as T
from tile_nb.bench import BenchResult, SweepResult, make_inputs

# the notebook views need IPython; the GPU machine has none, and its GPU test below needs only tile_nb.bench
try:
    from tile_nb.notebook.bench import view
    from tile_nb.notebook.magic_bench import parse_sweep
except ImportError:
    view = parse_sweep = None
needs_ipython = pytest.mark.skipif(
    parse_sweep is None, reason="the notebook views need IPython, not installed here"
)

FAST = {"warmup_ms": 1.0, "rep_ms": 5.0}


@tile_nb.jit
def scale_add(X, Y, alpha: float = 2.0, block: int = 64):
    N = T.const('N')
    X: T.Tensor[[N], T.float32]
    Y: T.Tensor[[N], T.float32]
    with T.Kernel(T.ceildiv(N, block), threads=64) as bx:
        for i in T.Parallel(block):
            if bx * block + i < N:
                Y[bx * block + i] = X[bx * block + i] * alpha + 1.0


@pytest.fixture
def xy():
    return torch.randn(256), torch.empty(256)


@needs_ipython
def test_bench_view_is_deterministic_in_text_and_has_numbers_in_html(xy):
    X, Y = xy
    a = scale_add.bench(X, Y, baseline=lambda: X * 2 + 1, flops=2 * 256, **FAST)
    b = scale_add.bench(X, Y, baseline=lambda: X * 2 + 1, flops=2 * 256, **FAST)
    assert isinstance(a, BenchResult) and torch.allclose(Y, X * 2 + 1)
    bundle = view(a)._repr_mimebundle_()
    assert set(bundle) == {"text/plain", "text/html"}
    # no timings in text/plain
    assert bundle["text/plain"] == repr(b) == view(b)._repr_mimebundle_()["text/plain"]
    text = bundle["text/plain"]
    assert "CPU interpreter" in text and "host clock" in text and "not GPU performance" in text
    assert "baseline: X * 2 + 1" in text and "TFLOP/s of 512 FLOPs" in text
    assert "GB/s of 2,048 bytes" in text  # X read, Y written
    assert "ms" not in text.replace("FLOPs", "")
    html = bundle["text/html"]
    assert "median" in html and "p20 / p80" in html and "ratio" in html and "<script" not in html
    t = a.timing
    assert 0 < t.p20 <= t.median_ms <= t.p80 and a.ratio > 0 and a.gbps > 0 and a.tflops > 0
    assert json.dumps(a.to_dict())  # plain data


@needs_ipython
def test_sweep_records_failures_persists_json_and_prints_progress(xy, tmp_path, capsys):
    X, Y = xy
    path = tmp_path / "sweep.json"
    result = scale_add.sweep({"block": [32, 0, 128]}, args=(X, Y), results=path, progress="print",
                             baseline=lambda X, Y: X * 2 + 1, **FAST)
    assert isinstance(result, SweepResult)
    printed = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in printed] == ["[1/3] block=32", "[2/3] block=0", "[3/3] block=128"]
    assert "failed at elaborate: DSLError" in printed[1] and "x the baseline" in printed[0]
    assert [p.ok for p in result.points] == [True, False, True]
    failed = result.points[1]
    assert failed.stage == "elaborate" and "division" in failed.error
    assert result.best().config["block"] in (32, 128)

    text = view(result)._repr_mimebundle_()["text/plain"]
    assert text == repr(result)
    assert (
        text.splitlines()[0]
        == "SweepResult scale_add: 3 configs over block (CPU interpreter, host clock), 1 failed"
    )
    assert "  block=0: failed at elaborate: DSLError: ZeroDivisionError" in text
    assert "  block=32: ok" in text and ".py:" not in text  # no internal file:line in what nbval compares

    saved = json.loads(path.read_text())
    assert saved["kernel"] == "scale_add" and saved["params"] == {"block": [32, 0, 128]}
    assert [p["error"] is None for p in saved["points"]] == [True, False, True]
    assert saved["points"][0]["timing"]["median_ms"] > 0 and saved["points"][0]["ratio"] > 0
    assert SweepResult.load(path).to_text().splitlines()[:4] == text.splitlines()[:4]
    assert "block" in str(result).splitlines()[0] and "median" in str(result)   # print(): the numbers


@needs_ipython
def test_sweep_over_shapes_makes_inputs_and_plots_against_the_baseline():
    result = scale_add.sweep({"N": [64, 128, 256]}, baseline=lambda X, Y: X * 2 + 1, progress=None, **FAST)
    assert all(p.ok and p.baseline_timing is not None and p.gbps for p in result.points)
    bundle = view(result)._repr_mimebundle_()
    assert set(bundle) == {"text/plain", "text/html", "image/png"}
    import base64

    png = base64.b64decode(bundle["image/png"])
    assert png[:4] == b"\x89PNG" and len(png) < 60_000
    assert 'src="data:image/png;base64,' in bundle["text/html"] and "ratio" in bundle["text/html"]
    assert len(bundle["text/html"]) < 100_000


@needs_ipython
def test_make_inputs_and_parse_sweep():
    X, Y = make_inputs(scale_add, N=96, device="cpu")
    assert X.shape == (96,) and X.dtype == torch.float32 and Y.shape == (96,)
    assert parse_sweep("block_M=64,128 block_N=32", {}) == {"block_M": [64, 128], "block_N": [32]}
    assert parse_sweep("n=2**k", {"k": 3}) == {"n": [8]}
    for bad in ("block_M", "=1", "x=1,,"):
        with pytest.raises(ValueError, match="--sweep"):
            parse_sweep(bad, {})


def test_bench_modules_import_no_plotting_or_widgets():
    code = ("import sys, tile_nb.bench, tile_nb.bench.tuning, tile_nb.bench.pool, tile_nb.notebook.bench\n"
            "bad = [m for m in ('matplotlib', 'ipywidgets', 'IPython', 'tqdm', 'ray') if m in sys.modules]\n"
            "assert not bad, bad\n")
    subprocess.run([sys.executable, "-c", code], check=True)


KERNEL_CELL = '''\
def scale_add(X, Y, alpha: float = 2.0, block: int = 64):
    N = T.const('N')
    X: T.Tensor[[N], T.float32]
    Y: T.Tensor[[N], T.float32]
    with T.Kernel(T.ceildiv(N, block), threads=64) as bx:
        for i in T.Parallel(block):
            if bx * block + i < N:
                Y[bx * block + i] = X[bx * block + i] * alpha + 1.0
'''


@pytest.fixture(scope="module")
def ip():
    pytest.importorskip("IPython")
    from IPython import get_ipython
    from IPython.testing import globalipapp

    shell = globalipapp.start_ipython() or get_ipython()
    shell.run_line_magic("load_ext", "tile_nb.notebook")
    shell.run_cell("import torch\nimport tile_nb\nimport tile_nb.language as T\n"
                   "X = torch.randn(128); Y = torch.empty(128)\n").raise_error()
    yield shell
    shell.run_line_magic("unload_ext", "tile_nb.notebook")  # so the next module's load_ext installs it again
    # start_ipython() returns None once it has run; other test modules' fixtures call it and expect the shell
    # (it is a singleton, so running it again hands back this same one).
    if hasattr(globalipapp.start_ipython, "already_called"):
        del globalipapp.start_ipython.already_called


def test_magic_sweep_and_bench(ip, tmp_path, capsys):
    path = tmp_path / "m.json"
    result = ip.run_cell(f'%%tilekernel --call "scale_add(X, Y)" --sweep "block=32,0" --bytes "2*4*N" '
                         f'--baseline "X * 2 + 1" --results {path}\n' + KERNEL_CELL)
    result.raise_error()
    swept = result.result
    assert isinstance(swept, SweepResult) and [p.ok for p in swept.points] == [True, False]
    assert swept.points[0].gbps and swept.points[0].baseline_timing is not None
    assert (
        swept.baseline_name == "X * 2 + 1"
        and json.loads(path.read_text())["points"][1]["stage"] == "elaborate"
    )
    # the magic's result shows as a table: the extension registered HTML and PNG printers (a terminal shell
    # keeps those formats disabled, so look the printers up, as a Jupyter kernel's enabled formatters do)
    formatters = ip.display_formatter.formatters
    html, png = formatters["text/html"].lookup(swept)(swept), formatters["image/png"].lookup(swept)(swept)
    assert "<table" in html and "scale_add" in html and png[:4] == b"\x89PNG"
    assert ip.display_formatter.format(swept)[0]["text/plain"] == repr(swept)
    assert "[2/2] block=0: failed at elaborate" in capsys.readouterr().out

    # --shapes instead of --call: random inputs from the annotations; the baseline sees them as X and Y
    result = ip.run_cell(
        '%%tilekernel --name scale_add --shapes N=64 --bench --flops "2*N" --baseline "X * 2"\n'
        "# the kernel defined above\n"
    )
    result.raise_error()
    bench = result.result
    assert (
        isinstance(bench, BenchResult)
        and bench.flops == 128
        and bench.arguments == "float32[64], float32[64]"
    )
    assert bench.ratio is not None and "not GPU performance" in repr(bench)


@pytest.mark.gpu
def test_gpu_bench_and_sweep_use_cuda_events(tmp_path):
    X = torch.randn(1 << 20, device="cuda")
    Y = torch.empty_like(X)
    view = scale_add.bench(X, Y, baseline=lambda: X * 2 + 1)
    assert view.gpu and "CUDA events" in view.to_text() and view.timing.device == "cuda"
    torch.testing.assert_close(Y, X * 2 + 1)
    assert view.gbps > 1 and view.ratio > 0
    swept = scale_add.sweep(
        {"block": [128, 256, 0]}, args=(X, Y), results=tmp_path / "g.json", progress="print"
    )
    assert [p.ok for p in swept.points] == [True, True, False]
    assert swept.points[2].stage == "compile"
    assert all(p.timing.device == "cuda" for p in swept.points if p.ok)


def _has_cuda_compiler() -> bool:
    from tile_nb.backend.cuda_compile import available_compiler

    return available_compiler() is not None


@pytest.mark.skipif(not _has_cuda_compiler(), reason="needs nvcc or NVRTC to build cubins")
def test_magic_tune_is_compile_only_without_a_gpu_and_shows_a_table(ip, tmp_path, monkeypatch, capsys):
    from tile_nb.bench import TuneResult

    monkeypatch.setenv("TILE_NB_CACHE_DIR", str(tmp_path / "cache"))
    result = ip.run_cell('%%tilekernel --shapes N=1024 --tune "block=64,128,0"\n' + KERNEL_CELL)
    result.raise_error()
    tuned = result.result
    assert isinstance(tuned, TuneResult) and tuned.mode == "compile-only" and tuned.best() is None
    assert [p.status.split(":")[0] for p in tuned.points] == ["compiled", "compiled", "failed at elaborate"]
    printed = capsys.readouterr().out   # progress: elaboration failures first, then compiles as they finish
    assert "[1/3 compile] block=0: failed at elaborate" in printed and "[3/3 compile] block=" in printed
    html = ip.display_formatter.formatters["text/html"].lookup(tuned)(tuned)
    assert "compile-only" in html and "failed at elaborate" in html and "<script" not in html
    # nothing timed: no plot
    assert ip.display_formatter.formatters["image/png"].lookup(tuned)(tuned) is None

    with pytest.raises(Exception, match="--tune needs a grid"):
        ip.run_cell('%%tilekernel --name scale_add --shapes N=64 --tune\n#\n').raise_error()


def test_the_notebook_reporter_fills_a_table_as_points_arrive(ip):
    pytest.importorskip("ipywidgets")
    from tile_nb.bench.progress import make_reporter
    from tile_nb.bench.results import SweepPoint, TuneResult
    from tile_nb.bench.timing import Timing
    from tile_nb.notebook.progress import NotebookReporter

    reporter = make_reporter("notebook", 2, "gemm")   # registered by %load_ext (the ip fixture)
    assert isinstance(reporter, NotebookReporter)
    result = TuneResult("gemm", {"block_M": [64, 128]}, [], gpu=True, mode="gpu")
    reporter.begin("compile", 2)
    assert reporter.bar.description == "compiling" and reporter.bar.max == 2
    for bm in (64, 128):
        point = SweepPoint({"block_M": bm}, resources={"registers": 90})
        result.points.append(point)
        reporter.update(result, point, "compile")
    assert reporter.bar.value == 2 and "block_M=128: compiled" in reporter.label.value
    reporter.begin("time", 2)
    result.points[0].timing = Timing(1.0, 0.9, 1.1, 10)
    reporter.update(result, result.points[0], "time")
    assert "<table" in reporter.table.value and "1 ms" in reporter.table.value
    reporter.close(result)
    assert reporter.bar.bar_style == "success" and reporter.table.value == ""


def test_importing_tile_nb_inside_ipython_connects_the_views_without_loading_them():
    code = ("import sys\n"
            "from IPython.testing.globalipapp import start_ipython\n"
            "shell = start_ipython()\n"
            "before = set(sys.modules)\n"
            "import tile_nb\n"
            "from tile_nb.bench.progress import _registered\n"
            "from tile_nb.bench.results import SweepResult\n"
            "printer = shell.display_formatter.formatters['text/html'].lookup(SweepResult('k', {}))\n"
            "assert printer.__module__ == 'tile_nb.notebook.hooks' and 'notebook' in _registered\n"
            "new = set(sys.modules) - before\n"   # (the test shell itself may have loaded matplotlib)
            "bad = [m for m in ('matplotlib', 'ipywidgets', 'tile_nb.notebook.bench') if m in new]\n"
            "assert not bad, bad\n")
    subprocess.run([sys.executable, "-c", code], check=True)
