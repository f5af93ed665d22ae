"""Run tutorial notebooks' code cells in one Python process, without Jupyter (the GPU machine has none).

    python3 scripts/gpu_cells.py notebooks/05_flash_attention.ipynb [...]

nbval is the real notebook test (CI, every cell, outputs compared); this is
for the machine where it cannot run:
every code cell runs in order in one namespace, so the `gpu`-tagged cells (skipped by nbval without a CUDA
device) run on real tensors and their own checks (`torch.testing.assert_close`) decide. `%load_ext` lines are
dropped and a `%%tilekernel` cell runs its body (the kernel definition); cells with other IPython magics, and
cells that need a package this machine lacks (ipywidgets, IPython), are reported as not run, never as passed.
Exits 1 if any cell that ran failed (a cell tagged `raises-exception` fails when it does not raise).
"""
from __future__ import annotations

import json
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tile_nb import run_source  # noqa: E402

NOTEBOOK_ONLY = ("ipywidgets", "IPython", "nbformat", "ipykernel")


def run_notebook(path: str) -> dict:
    cells = [c for c in json.load(open(path))["cells"] if c["cell_type"] == "code"]
    namespace = {"__name__": "__main__", "display": print}
    counts = {"passed": 0, "failed": 0, "not run": 0, "gpu passed": 0}
    for number, cell in enumerate(cells, 1):
        # `%load_ext tile_nb` only registers the cell magic; a `%%tilekernel` cell defines its kernel as plain
        # Python does (the views it shows are nbval's to check, on the CPU)
        lines = [line for line in cell["source"] if not line.startswith("%load_ext")]
        magic = bool(lines) and lines[0].startswith("%%tilekernel")
        source = "".join(lines[1:] if magic else lines)
        tags = cell.get("metadata", {}).get("tags", [])
        gpu, raises = "gpu" in tags, "raises-exception" in tags  # the latter shows an error on purpose
        label = f"{path} cell {number}{' [gpu]' if gpu else ''}{' (%%tilekernel body)' if magic else ''}"
        if any(line.lstrip().startswith("%") for line in source.splitlines()) or (magic and raises):
            counts["not run"] += 1
            print(
                f"  NOT RUN {label}: {'its error comes from the magic' if magic else 'IPython magic'}",
                flush=True,
            )
            continue
        start = time.perf_counter()
        try:
            run_source(source, namespace, filename=label)  # registers the text: kernels read their source
        except ModuleNotFoundError as err:
            if err.name and err.name.split(".")[0] in NOTEBOOK_ONLY:
                counts["not run"] += 1
                print(f"  NOT RUN {label}: needs {err.name}, absent here", flush=True)
                continue
            counts["failed"] += 1
            print(f"  FAILED  {label}\n{traceback.format_exc()}", flush=True)
        except NameError as err:
            if counts["not run"]:  # most likely defined by a cell that could not run here
                counts["not run"] += 1
                print(f"  NOT RUN {label}: {err} (an earlier cell did not run)", flush=True)
                continue
            counts["failed"] += 1
            print(f"  FAILED  {label}\n{traceback.format_exc()}", flush=True)
        except Exception as err:  # noqa: BLE001 - report every failing cell, then go on
            if raises:
                counts["passed"] += 1
                print(f"  passed  {label}: raised {type(err).__name__} as its tag says", flush=True)
                continue
            counts["failed"] += 1
            print(f"  FAILED  {label}\n{traceback.format_exc()}", flush=True)
        else:
            if raises:
                counts["failed"] += 1
                print(f"  FAILED  {label}: tagged raises-exception but raised nothing", flush=True)
                continue
            counts["passed"] += 1
            counts["gpu passed"] += gpu
            print(f"  passed  {label} ({time.perf_counter() - start:.1f} s)", flush=True)
    return counts


def main(paths: list[str]) -> int:
    failed = 0
    for path in paths:
        counts = run_notebook(path)
        failed += counts["failed"]
        print(f"{path}: " + ", ".join(f"{k} {v}" for k, v in counts.items()), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
