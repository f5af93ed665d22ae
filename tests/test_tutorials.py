"""The tutorials' structure (nbval runs their cells; this checks what it cannot see): GPU cells are
tagged, the FlashAttention tutorial ends with the reference kernel, and the puzzles are stored
unsolved with hidden solutions."""
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
    assert any(source.strip() in _text(c) for c in cells), (
        "05's step 4 is not tests/kernels/reference.py's kernel"
    )


def test_puzzles_are_stored_unsolved_with_hidden_checked_solutions():
    cells = _cells(next(p for p in NOTEBOOKS if p.name.startswith("07_")))
    checks = [c for c in cells if re.search(r"^check\(", _text(c), re.M)]
    stubs = [c for c in checks if not c["metadata"].get("jupyter", {}).get("source_hidden")]
    solutions = [c for c in checks if c["metadata"].get("jupyter", {}).get("source_hidden")]
    assert len(stubs) == len(solutions) == 10
    for stub, solution in zip(stubs, solutions, strict=True):
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


# ----------------------------------------------------------------------------------------------
# Colab / Kaggle (issue 35)

def _notebook(prefix: str) -> Path:
    return next(p for p in NOTEBOOKS if p.name.startswith(prefix))


def _install_cell(prefix: str) -> str:
    return _text(_cells(_notebook(prefix))[0])


def _run_install_cell(source: str, monkeypatch, tmp_path, hosted_env: str | None) -> tuple[dict, list]:
    """Run the install cell's code here with subprocess.run recorded, not run; `hosted_env` names the variable
    that marks Colab or Kaggle (None: neither)."""
    import subprocess
    import sys

    for name in ("COLAB_RELEASE_TAG", "KAGGLE_KERNEL_RUN_TYPE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    if hosted_env:
        monkeypatch.setenv(hosted_env, "1")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    commands = []
    monkeypatch.setattr(subprocess, "run", lambda command, **kw: commands.append((list(command), kw)))
    namespace = {"__name__": "__main__"}
    exec(compile(source, "install cell", "exec"), namespace)
    return namespace, commands


@pytest.mark.parametrize("prefix", ["01_", "05_"])
def test_the_colab_install_cell_comes_first_and_does_nothing_off_colab_and_kaggle(
    prefix, monkeypatch, tmp_path, capsys
):
    source = _install_cell(prefix)
    assert 'TILE_NB_FROM = ""' in source, (
        f"{prefix}: the first code cell is not the Colab / Kaggle install cell"
    )
    assert source == _install_cell("01_"), "the install cells of 01 and 05 differ"
    _, commands = _run_install_cell(source, monkeypatch, tmp_path, None)
    said = capsys.readouterr().out
    assert commands == [] and said == "not on Colab or Kaggle: nothing to install\n"
    assert _text(_cells(_notebook(prefix))[0], "outputs") == said  # what nbval compares the cell with


def test_the_colab_install_cell_asks_for_the_source_and_installs_the_pinned_tvm(
    monkeypatch, tmp_path, capsys
):
    """On Colab (or Kaggle) with TILE_NB_FROM unset: an error naming it; with a wheel or a repository: TVM at
    pyproject.toml's pins, then tile_nb without dependencies (the runtime's CUDA torch stays)."""
    source = _install_cell("01_")
    with pytest.raises(ValueError, match="TILE_NB_FROM is empty"):
        _run_install_cell(source, monkeypatch, tmp_path, "COLAB_RELEASE_TAG")
    pyproject = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text()  # no tomllib on 3.10
    pins = re.findall(r'^\s*"(apache-tvm[-a-z]*==[^"]+)",', pyproject, re.M)
    assert len(pins) == 2 and all("==" in p for p in pins), pins

    wheel = source.replace('TILE_NB_FROM = ""', 'TILE_NB_FROM = "/content/tile_nb-0.1.0-py3-none-any.whl"', 1)
    _, commands = _run_install_cell(wheel, monkeypatch, tmp_path, "KAGGLE_KERNEL_RUN_TYPE")
    (tvm, _), (tile_nb_wheel, _) = commands
    assert tvm[-2:] == pins and tvm[1:4] == ["-m", "pip", "install"]
    assert tile_nb_wheel[-2:] == ["--no-deps", "/content/tile_nb-0.1.0-py3-none-any.whl"]
    assert not any("torch" in " ".join(c) for c, _ in commands)
    assert "tile_nb 0.1.0 installed beside torch" in capsys.readouterr().out

    repo = source.replace('TILE_NB_FROM = ""', 'TILE_NB_FROM = "https://example.invalid/tile_nb.git"', 1)
    namespace, commands = _run_install_cell(repo, monkeypatch, tmp_path, "COLAB_RELEASE_TAG")
    clone, editable = commands[1][0], commands[2][0]
    assert clone[:2] == ["git", "clone"] and clone[-2:] == ["https://example.invalid/tile_nb.git",
                                                            str(tmp_path / "tile_nb_src")]
    assert editable[-3:] == ["--no-deps", "-e", str(tmp_path / "tile_nb_src")]
    assert namespace["sys"].path[0] == str(tmp_path / "tile_nb_src")


def _flash_attention_tiles(arch: str, monkeypatch) -> dict:
    """The tiles 05's step 5 picks when kernels are built for `arch` (its cell run with TILE_NB_ARCH=arch)."""
    cell = next(c for c in _cells(_notebook("05_")) if "two_warpgroups = " in _text(c))
    monkeypatch.setenv("TILE_NB_ARCH", arch)
    namespace = {"__name__": "__main__"}
    exec(compile(_text(cell), "05 tiles cell", "exec"), namespace)
    return namespace["two_warpgroups"]


@pytest.mark.parametrize("arch", ["sm_75", "sm_80", "sm_86", "sm_89", "sm_90a", "sm_100a", "sm_120"])
def test_flash_attention_tutorial_picks_tiles_that_fit_each_gpu(arch, monkeypatch, capsys):
    """05's step-5 tiles, at every head dim and shape its cells run (CPU checks and GPU cells), fit the shared
    memory of `arch` by the lowering's own count; the H200 keeps its 128x128 tiles, a T4 gets 128x64."""
    from kernels import reference

    from tile_nb.backend import resolve_target, target_caps
    from tile_nb.lower.lowering import lower_with_plan

    tiles = _flash_attention_tiles(arch, monkeypatch)
    caps = target_caps()
    assert caps.arch == arch and f"{arch}: {caps.max_shared_bytes // 1024} KiB" in capsys.readouterr().out
    assert tiles["block_N"] == {"sm_75": 64, "sm_86": 64, "sm_89": 64, "sm_120": 64}.get(arch, 128), tiles
    for B, H, S, D in [(1, 2, 64, 32), (1, 1, 200, 64), (4, 16, 2048, 64)]:
        func = reference.flash_attention.specialize(B=B, H=H, S=S, D=D, **tiles)
        _, plan = lower_with_plan(func, resolve_target(arch))  # a LoweringError if it does not fit
        assert 0 < plan.pool_bytes <= caps.max_shared_bytes
    gpu_cell = next(_text(c) for c in _cells(_notebook("05_")) if "gpu_steps = " in _text(c))
    assert "pipelined_attention(False, **two_warpgroups)" in gpu_cell and "block_N=128" not in gpu_cell


def test_flash_attention_t4_tiles_build_for_sm75_within_64_kib(monkeypatch):
    """The T4's tiles through nvcc / ptxas for sm_75: a cubin whose shared memory
    (static + dynamic) fits 64 KiB."""
    from tile_nb.backend import toolchain

    if toolchain.find_tool("nvcc") is None:
        pytest.skip("needs nvcc/ptxas to build cubins")
    from kernels import reference

    from tile_nb.runtime import compile as rt_compile

    tiles = _flash_attention_tiles("sm_75", monkeypatch)
    func = reference.flash_attention.specialize(B=4, H=16, S=2048, D=64, **tiles)
    kernel = rt_compile(func, "sm_75", options={"cache": False})
    (resources,) = kernel.resources_by_kernel.values()
    assert kernel.cubin and 0 < resources.total_shared_bytes <= 64 * 1024, resources
    assert resources.registers * tiles["threads"] <= 65536 and resources.spill_stores == 0, resources
