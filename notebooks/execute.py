"""Re-execute notebooks in place and keep their outputs (the reference outputs nbval compares against).

    python notebooks/execute.py notebooks/01_quickstart.ipynb [...]

Run it after a change that alters what a notebook shows (IR printing, the views), review the diff of the stored
outputs, and commit it. Each notebook runs in a fresh kernel from its own folder, with the repository on
PYTHONPATH; cells marked `# NBVAL_SKIP` (GPU cells, long compile listings) keep no output, as they are not
compared and their output depends on the machine.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def execute(path: Path, timeout: int = 600) -> None:
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", allow_errors=True,
                            resources={"metadata": {"path": str(path.parent)}})
    client.execute()
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
