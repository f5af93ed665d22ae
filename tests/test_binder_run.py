"""scripts/binder_run.py (the binder check's notebook runner): it measures something, and it fails a notebook
that raises or goes over the memory limit."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
pytest.importorskip("nbclient")
pytest.importorskip("psutil")

pytestmark = pytest.mark.slow  # two kernel start-ups

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "binder_run.py"


def _runner():
    spec = importlib.util.spec_from_file_location("binder_run", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _notebook(path: Path, *sources: str, tags: list[str] | None = None) -> Path:
    cells = [nbformat.v4.new_code_cell(s) for s in sources]
    if tags:
        cells[-1].metadata["tags"] = tags
    nb = nbformat.v4.new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)
    return path


def test_peaks_are_measured_and_limits_enforced(tmp_path, capsys):
    binder_run = _runner()
    # 300 MB held by the kernel for a second (the sampler looks every 50 ms, later on a loaded machine): the
    # peak must show it.
    big = _notebook(
        tmp_path / "big.ipynb",
        "import time\nx = bytearray(300_000_000)\nx[::4096] = b'1' * len(x[::4096])\ntime.sleep(1.0)",
    )
    wrong = _notebook(tmp_path / "wrong.ipynb", "raise ValueError('on purpose')", "print('not reached')")
    shown = _notebook(tmp_path / "shown.ipynb", "raise ValueError('shown')", tags=["raises-exception"])
    # The limit applies to the kernel's own peak, 150 MB above an idle kernel's: the total would also count
    # this pytest process, whose proportional set size (~1 GB with torch and TVM loaded) moves by more than
    # that when other processes that share its libraries start or end on a loaded machine.
    idle = binder_run.run_notebook(_notebook(tmp_path / "idle.ipynb", "pass"), timeout=60)["kernel_mb"]
    capsys.readouterr()
    limit = idle + 150
    assert (
        binder_run.main([str(big), str(wrong), str(shown), "--limit-mb", str(limit), "--limit-on", "kernel"])
        == 1
    )
    out = capsys.readouterr()
    rows = {
        line.split()[0]: line
        for line in out.out.splitlines()
        if line.endswith(("ok", "FAILED", "OVER LIMIT"))
    }
    assert rows["big.ipynb"].endswith("OVER LIMIT") and float(rows["big.ipynb"].split()[3]) > idle + 280
    assert rows["wrong.ipynb"].endswith("FAILED") and "ValueError: on purpose" in out.out
    assert rows["shown.ipynb"].endswith("ok")
    assert "binder check FAILED: big.ipynb, wrong.ipynb" in out.err
