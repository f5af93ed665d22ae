"""Re-execute notebooks in place and keep their outputs (the reference outputs nbval compares against).

    python notebooks/execute.py notebooks/01_quickstart.ipynb [...]

Run it after a change that alters what a notebook shows (IR printing, the views), review the diff of the stored
outputs, and commit it. Each notebook runs in a fresh kernel from its own folder, with the repository on
PYTHONPATH. Cells marked `# NBVAL_SKIP` (long compile listings) keep no output, as they are not compared and their
output depends on the machine. Widget state (sliders, progress bars, as they were when the notebook finished) is
stored in the notebook's metadata where JupyterLab keeps it (`metadata.widgets`), so the widgets render without a
kernel; their outputs also carry static text/HTML forms (tile_nb.notebook.progress, .widgets). Cells that need a
GPU (tag `gpu`, see tile_nb.testing) run only where torch sees a CUDA device; elsewhere they are not run and keep what they stored, exactly as `pytest --nbval` skips them.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tile_nb.testing import cuda_device, needs_gpu  # noqa: E402

_NO_GPU_TAG = "tile-nb-not-run-without-gpu"  # added for the run only: nbclient skips cells with this tag


def execute(path: Path, timeout: int = 600) -> None:
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    gpu_cells = [c for c in nb.cells if c.cell_type == "code" and needs_gpu(c)]
    skipped = gpu_cells if cuda_device() is None else []
    for cell in skipped:
        cell.metadata.setdefault("tags", []).append(_NO_GPU_TAG)
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", allow_errors=True,
                            store_widget_state=True, skip_cells_with_tag=_NO_GPU_TAG,
                            resources={"metadata": {"path": str(path.parent)}})
    client.execute()
    for cell in skipped:
        cell.metadata["tags"].remove(_NO_GPU_TAG)
        if not cell.metadata["tags"]:
            del cell.metadata["tags"]
    if skipped:
        print(f"{path}: {len(skipped)} cell(s) need a GPU and were not run (no CUDA device); they keep their "
              "stored outputs", file=sys.stderr)
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        cell.metadata.pop("execution", None)  # timestamps: noise in diffs
        if any(line.strip() == "# NBVAL_SKIP" for line in cell.source.splitlines()):
            cell.outputs, cell.execution_count = [], None
        expected_error = "raises-exception" in cell.metadata.get("tags", [])
        errors = [o for o in cell.outputs if o.output_type == "error"]
        if errors and not expected_error:
            raise SystemExit(f"{path}: a cell failed ({errors[0].ename}: {errors[0].evalue}):\n{cell.source}")
    nbformat.write(nb, path)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="+", type=Path)
    parser.add_argument("--timeout", type=int, default=600, help="seconds per cell")
    args = parser.parse_args(argv)
    for path in args.notebooks:
        execute(path, args.timeout)
        print(f"executed {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
