"""scripts/gpu_cells.py (runs tutorials' cells where Jupyter is absent): passes only
what ran and did what it says."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "gpu_cells.py"

KERNEL = """\
import torch
import tile_nb.language as T

@tile_nb.jit
def double(X, Y):
    N = T.const('N')
    X: T.Tensor[[N], T.float32]
    Y: T.Tensor[[N], T.float32]
    with T.Kernel(T.ceildiv(N, 32), threads=32) as bx:
        for i in T.Parallel(32):
            if bx * 32 + i < N:
                Y[bx * 32 + i] = X[bx * 32 + i] * 2.0
"""


def cell(source: str, *tags: str) -> dict:
    return {"cell_type": "code", "metadata": {"tags": list(tags)}, "source": source.splitlines(keepends=True),
            "outputs": [], "execution_count": None}


def run(tmp_path, cells) -> tuple[int, str]:
    path = tmp_path / "nb.ipynb"
    path.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(path)], capture_output=True, text=True, timeout=300
    )
    return done.returncode, done.stdout + done.stderr


def test_cells_share_a_namespace_and_kernels_find_their_source(tmp_path):
    rc, out = run(
        tmp_path,
        [
            cell("import tile_nb\n%load_ext tile_nb\n"),
            cell("%%tilekernel --shapes N=40\n" + KERNEL),
            cell(
                "x = torch.randn(40)\ny = torch.empty(40)\ndouble(x, "
                "y)\ntorch.testing.assert_close(y, 2 * x)\n",
                "gpu",
            ),
            cell("double(torch.randn(4, 4), torch.empty(4, 4))\n", "raises-exception"),
            cell("%timeit double(x, y)\n"),
        ],
    )
    assert rc == 0, out
    assert "passed 4, failed 0, not run 1, gpu passed 1" in out
    assert "raised RankMismatchError as its tag says" in out


def test_a_failing_cell_or_a_silent_raises_cell_fails_the_run(tmp_path):
    rc, out = run(tmp_path, [cell("import torch\nassert torch.ones(3).sum() == 4, 'wrong sum'\n"),
                             cell("x = 1\n", "raises-exception")])
    assert rc == 1
    assert "AssertionError: wrong sum" in out and "tagged raises-exception but raised nothing" in out
    assert "passed 0, failed 2" in out
