"""A headless notebook run (nbclient + ipykernel): the magic and the Python API produce the expected MIME
bundles, and the text/plain of a view is the same in two fresh kernels."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

from tile_nb.notebook.views import MIME_TYPE

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow  # two kernel start-ups (about 15 s)

KERNEL = '''\
def add_one(X, Y, block: int = 32):
    N = T.const('N')
    X: T.Tensor[[N], T.float32]
    Y: T.Tensor[[N], T.float32]
    with T.Kernel(T.ceildiv(N, block)) as bx:
        for i in T.Parallel(block):
            Y[bx * block + i] = X[bx * block + i] + 1.0
'''

CELLS = [
    "%load_ext tile_nb\nimport torch\nimport tile_nb\nimport tile_nb.language as T",
    "%%tilekernel --shapes N=64\n" + KERNEL,
    ("X = torch.arange(64, dtype=torch.float32); Y = torch.zeros(64)\n"
    "tile_nb.notebook.show(add_one, X, Y)"),
    '%%tilekernel --call "add_one(X, Y)" --expect "X + 1"\n# (the kernel defined above)',
    "%%tilekernel\ndef broken(X):\n    N = T.const('N')\n    X: T.Tensor[[N], T.float32]\n"
    "    with T.Kernel(1) as bx:\n        while True:\n            pass",
]


def _client(tmp_path: Path):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(src) for src in CELLS])
    return nbclient.NotebookClient(nb, timeout=180, kernel_name="python3", allow_errors=True,
                                   resources={"metadata": {"path": str(tmp_path)}})


def _run_notebooks(paths: list[Path]):
    """Execute the notebook once per path, in fresh kernels running side by side."""
    import asyncio

    clients = [_client(p) for p in paths]

    async def run_all():
        await asyncio.gather(*(c.async_execute() for c in clients))

    env_path = os.environ.get("PYTHONPATH", "")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env_path) if p)  # kernels inherit it
    try:
        asyncio.run(run_all())
    finally:
        os.environ["PYTHONPATH"] = env_path
    return [c.nb for c in clients]


def _results(cell):
    return [o for o in cell.outputs if o.output_type in ("execute_result", "display_data")]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return _run_notebooks([tmp_path_factory.mktemp(f"run{i}") for i in range(2)])


def test_magic_cell_produces_the_three_mime_types(runs):
    nb = runs[0]
    (out,) = _results(nb.cells[1])
    assert set(out.data) == {"text/plain", "text/html", MIME_TYPE}
    data = out.data[MIME_TYPE]
    assert data["version"] == 2 and data["name"] == "add_one"
    assert data["consts"] == {"N": 64}
    assert [s["id"] for s in data["sections"]] == ["template", "specialized"]
    assert data["sections"][1]["changed_lines"]
    # Line mapping: the cell's lines, numbered as the editor numbers them (line 1 is the %%tilekernel line).
    source_lines = nb.cells[1].source.split("\n")
    first = data["source"]["first_line"]
    assert data["source"]["lines"] == source_lines[first - 1: first - 1 + len(data["source"]["lines"])]
    assert all(s["line_map"] for s in data["sections"])
    assert {p["name"]: p["kind"] for p in data["params"]} == {"X": "tensor", "Y": "tensor", "N": "const",
                                                             "block": "compile_time"}
    assert "<script" not in out.data["text/html"]
    assert out.data["text/plain"].startswith("KernelView add_one")


def test_python_api_and_cpu_run(runs):
    nb = runs[0]
    (show_out,) = _results(nb.cells[2])
    assert show_out.data[MIME_TYPE]["consts"] == {"N": 64}
    (run_out,) = _results(nb.cells[3])
    data = run_out.data[MIME_TYPE]
    assert data["backend"] == "cpu-interpreter"
    assert data["run"] == {"device": "cpu", "max_abs_err": 0.0}
    assert "ran on the CPU interpreter" in run_out.data["text/plain"]


def test_error_cell_is_short(runs):
    (err,) = [o for o in runs[0].cells[4].outputs if o.output_type == "error"]
    assert err.ename == "UnsupportedSyntaxError"
    text = "\n".join(err.traceback)
    assert "while True:" in text and "^" in text and "%tb" in text
    assert "tile_nb/frontend" not in text
    assert f"In[{runs[0].cells[4].execution_count}], line 6" in text  # the cell as ipykernel numbers it


def test_text_plain_is_stable_across_runs(runs):
    first, second = ([_results(c)[0].data["text/plain"] for c in nb.cells[1:4]] for nb in runs)
    assert first == second
    html_first, html_second = (_results(nb.cells[1])[0].data["text/html"] for nb in runs)
    assert html_first == html_second
