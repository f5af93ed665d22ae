"""The `tile_nb` pytest plugin (tile_nb/testing): a notebook run under `pytest --nbval` in a
subprocess, with the plugin loaded from its entry point as a user's CI loads it, and without it
(`-p no:tile_nb`) to show what it does."""
from __future__ import annotations

import os

import pytest

nbformat = pytest.importorskip("nbformat")
pytest.importorskip("nbval")
pytest.importorskip("ipykernel")

from tile_nb.testing import GPU_MARKER, SANITIZE_FILE, needs_gpu, sanitize_patterns  # noqa: E402

pytest_plugins = ["pytester"]
pytestmark = pytest.mark.slow  # each run starts a kernel (about 4 s)


def _cell(source: str, stdout: str | None = None, tags: list[str] | None = None):
    """A code cell stored as run (execution_count 1) with `stdout` as its output, or stored unrun (None)."""
    cell = nbformat.v4.new_code_cell(source, execution_count=None if stdout is None else 1)
    if stdout:
        cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=stdout)]
    if tags:
        cell.metadata["tags"] = tags
    return cell


CELLS = [
    _cell("print(1 + 1)", "2\n"),                                            # compared
    _cell("raise RuntimeError('a gpu cell ran')", "", tags=["gpu"]),        # needs a GPU: tag
    _cell(f"{GPU_MARKER}\nraise RuntimeError('a marked cell ran')", ""),    # needs a GPU: comment marker
    _cell("print(hex(id(object())))", "0x7f00deadbeef\n"),                  # an address: sanitized
    _cell("# NBVAL_IGNORE_OUTPUT\nimport random\nprint(random.random())", "0.5\n"),  # ignored
    _cell("print('not stored')"),                                           # stored unrun: not compared
    _cell("# NBVAL_SKIP\nraise RuntimeError('skipped cell ran')", ""),
]


@pytest.fixture
def notebook(pytester):
    nb = nbformat.v4.new_notebook(cells=CELLS)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path = pytester.path / "fixture.ipynb"
    nbformat.write(nb, path)
    return path


def _run(pytester, *args):
    # No device, whatever this machine has: the skip path is what is tested
    # here (the run path is the gpu test).
    pytester._monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", "--nbval", "fixture.ipynb", *args)


def test_gpu_cells_skip_with_reason_and_sanitizers_apply(pytester, notebook):
    result = _run(pytester, "-rs")
    result.assert_outcomes(passed=4, skipped=3)
    result.stdout.fnmatch_lines([
        "*tile_nb: notebook cells*",
        "notebook * cells  compared   ignored   skipped    failed",
        "fixture.ipynb * 7 * 2 * 2 * 3 * 0",
        "* ignored: 1 NBVAL_IGNORE_OUTPUT | 1 no stored output",
        "* skipped: 1 NBVAL_SKIP | 2 needs a CUDA device (cell tagged gpu), and torch sees none here",
        "cells tagged gpu: 2, skipped (no CUDA device)",
        "*SKIPPED [[]2[]] fixture.ipynb: needs a CUDA device (cell tagged gpu), and torch sees none here",
        "*SKIPPED [[]1[]] fixture.ipynb: NBVAL_SKIP",
    ])


def test_without_the_plugin_the_same_notebook_fails(pytester, notebook):
    result = _run(pytester, "-p", "no:tile_nb")
    # The gpu cells run (and raise), the address is compared raw: what the plugin prevented.
    result.assert_outcomes(passed=3, failed=3, skipped=1)
    result.stdout.fnmatch_lines(["*a gpu cell ran*", "*a marked cell ran*"])
    assert "tile_nb: notebook cells" not in result.stdout.str()


def test_require_gpu_refuses_to_skip(pytester, notebook):
    result = _run(pytester, "--tile-nb-gpu=require")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*--tile-nb-gpu=require: 2 notebook cell(s) need a GPU*torch sees no CUDA device*"]
    )


@pytest.mark.gpu
def test_gpu_cell_runs_and_is_compared_where_there_is_a_device(pytester):
    nb = nbformat.v4.new_notebook(cells=[
        _cell("import torch\nprint(torch.cuda.is_available())", "True\n", tags=["gpu"]),
        _cell("print(torch.ones(2, device='cuda').sum().item())", "2.0\n", tags=["gpu"]),
    ])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, pytester.path / "gpu.ipynb")
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--nbval", "--tile-nb-gpu=require", "gpu.ipynb"
    )
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["gpu.ipynb * 2 * 2 * 0 * 0 * 0", "cells tagged gpu: 2, run on *"])


# ---- the rules themselves, without a kernel ----------------------------------------------------------------

def test_needs_gpu_reads_tags_and_the_marker_line():
    assert needs_gpu({"source": "x = 1", "metadata": {"tags": ["gpu"]}})
    assert needs_gpu({"source": ["import torch\n", f"  {GPU_MARKER}\n"], "metadata": {}})
    assert not needs_gpu({"source": f"x = 1  {GPU_MARKER}", "metadata": {"tags": ["gpu-ish"]}})


def test_sanitizer_file_is_installed_and_parses():
    assert SANITIZE_FILE.is_file() and os.path.dirname(SANITIZE_FILE).endswith(
        os.path.join("tile_nb", "testing")
    )
    rules = dict(sanitize_patterns())
    assert rules[r"0x[0-9a-fA-F]{6,16}"] == "0x..."
    assert len(rules) == 6  # cell files, cell names, In[N], addresses, progress lines, torch op digests


def test_torch_op_digest_sanitizer_is_narrow():
    import re

    (regex, replace), = [(r, s) for r, s in sanitize_patterns() if "tile_nb" in r]
    clean = lambda text: re.sub(regex, replace, text)  # noqa: E731
    assert clean("['tile_nb.rms_norm_082da73d14b5.default']") == "['tile_nb.rms_norm_<digest>.default']"
    assert clean("through tile_nb::rms_norm_ad_ufc6981f35e79_2 (an input") == \
        "through tile_nb::rms_norm_ad_<digest> (an input"
    for kept in ("tile_nb.rms_norm_0.default", "tile_nb.lower.plan_3", "rms_norm_082da73d14b5"):
        assert clean(kept) == kept
