"""The tutorials' structure (nbval runs their cells; this checks what it cannot see): GPU cells are tagged, the
FlashAttention tutorial ends with the reference kernel, and the puzzles are stored unsolved with hidden solutions."""
from __future__ import annotations

import inspect
import json
import re
from pathlib import Path

import pytest

from tile_nb.testing import needs_gpu

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))
CUDA_USE = re.compile(r"""device=["']cuda|\.cuda\(\)|torch\.cuda\.(get_device_name|synchronize)""")


def _cells(path: Path) -> list[dict]:
    return [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]


def _text(cell: dict, key: str = "source") -> str:
    if key == "source":
        return "".join(cell["source"])
    return "".join("".join(o.get("text", "")) for o in cell.get("outputs", []))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_cells_that_use_cuda_are_tagged_gpu(path):
    untagged = [i for i, c in enumerate(_cells(path)) if CUDA_USE.search(_text(c)) and not needs_gpu(c)]
    assert not untagged, f"{path.name}: code cells {untagged} use CUDA but are not tagged `gpu`"


def test_flash_attention_tutorial_ends_with_the_reference_kernel():
    from kernels import reference

    source = inspect.getsource(reference.flash_attention.fn)
    cells = _cells(next(p for p in NOTEBOOKS if p.name.startswith("05_")))
    assert any(source.strip() in _text(c) for c in cells), "05's step 4 is not tests/kernels/reference.py's kernel"


def test_puzzles_are_stored_unsolved_with_hidden_checked_solutions():
    cells = _cells(next(p for p in NOTEBOOKS if p.name.startswith("07_")))
    checks = [c for c in cells if re.search(r"^check\(", _text(c), re.M)]
    stubs = [c for c in checks if not c["metadata"].get("jupyter", {}).get("source_hidden")]
    solutions = [c for c in checks if c["metadata"].get("jupyter", {}).get("source_hidden")]
    assert len(stubs) == len(solutions) == 10
    for stub, solution in zip(stubs, solutions):
        assert "# your code" in _text(stub)
        assert _text(stub, "outputs").startswith("not solved yet: "), _text(stub)[:200]
        assert _text(solution, "outputs").startswith("solved: "), _text(solution)[:200]


def test_tutorials_lab_says_it_passes_arguments_to_jupyter_and_opens_notebooks(tmp_path):
    import shutil
    import subprocess

    scripts = tmp_path / "scripts"
    scripts.mkdir()
    shutil.copy(Path(__file__).resolve().parents[1] / "scripts" / "tutorials.sh", scripts / "tutorials.sh")
    (scripts / "install.sh").write_text("exit 0\n")  # no installation: only the script's own behaviour
    fake_python = tmp_path / "python"
    fake_python.write_text('#!/usr/bin/env bash\necho "ARGS: $*"\n')
    fake_python.chmod(0o755)
    (scripts / "python.sh").write_text(f"echo {fake_python}\n")
    done = subprocess.run(["bash", str(scripts / "tutorials.sh"), "--lab", "--port", "8890"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "opens JupyterLab on notebooks/; arguments after --lab go to 'jupyter lab' (given: --port 8890)" \
        in done.stderr
    assert done.stdout.strip().startswith("ARGS: -m jupyterlab ") and done.stdout.strip().endswith(
        "--port 8890 notebooks/")
