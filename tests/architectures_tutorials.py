"""The tutorial kernels for each architecture: builds (ptxas resources) or
refused (the LoweringError's reason).

    python tests/architectures_tutorials.py notebooks/0*.ipynb            # all architectures of the matrix
    python tests/architectures_tutorials.py --archs sm_75,sm_120 notebooks/01_quickstart.ipynb

Runs each notebook's code cells that need no GPU in one namespace (as scripts/gpu_cells.py does: `%load_ext`
is dropped, a `%%tilekernel` cell runs its body, cells with other magics or tagged `gpu` are not run),
recording every specialization a kernel's first interpreted call checks against the GPU
(`JITFunction._warn_if_not_lowerable`); then compiles each distinct one for each architecture, as
tests/test_architectures.py does for the reference kernels, and prints a markdown table. A tool for
benchmarks/results/architectures.md, not a test.
"""
from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]


def collect(paths: list[str]) -> list[tuple[str, object]]:
    """(label, phase-2 PrimFunc) of every specialization the notebooks' CPU cells ran, first seen first."""
    import importlib

    from tile_nb import run_source

    jit_mod = importlib.import_module("tile_nb.jit")  # the package's `jit` is the decorator

    seen, found = set(), []
    original = jit_mod.JITFunction._warn_if_not_lowerable

    def record(self, spec):
        text = spec.func.script()
        if text not in seen:
            seen.add(text)
            found.append((f"{current[0]}: {self.definition.name}", spec.func))
        return original(self, spec)

    jit_mod.JITFunction._warn_if_not_lowerable = record
    current = [""]
    try:
        for path in paths:
            current[0] = Path(path).stem
            namespace = {"__name__": "__main__", "display": lambda *a, **k: None}
            for number, cell in enumerate(
                c for c in json.load(open(path))["cells"] if c["cell_type"] == "code"
            ):
                lines = [line for line in cell["source"] if not line.startswith("%load_ext")]
                magic = bool(lines) and lines[0].startswith("%%tilekernel")
                source = "".join(lines[1:] if magic else lines)
                tags = cell.get("metadata", {}).get("tags", [])
                if "gpu" in tags or any(line.lstrip().startswith("%") for line in source.splitlines()):
                    continue
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    try:
                        run_source(source, namespace, filename=f"{path} cell {number + 1}")
                    except BaseException as err:  # noqa: BLE001 - a cell that fails here (on purpose, or for want
                        # of a package) only means fewer kernels recorded
                        print(f"  ({path} cell {number + 1}: {type(err).__name__})", file=sys.stderr)
    finally:
        jit_mod.JITFunction._warn_if_not_lowerable = original
    return found


def main(argv=None) -> int:
    from kernels.corpus import ARCHS

    parser = argparse.ArgumentParser()
    parser.add_argument("notebooks", nargs="+")
    parser.add_argument("--archs", default=",".join(ARCHS))
    args = parser.parse_args(argv)
    archs = args.archs.split(",")
    kernels = collect(args.notebooks)

    from tile_nb.backend.cuda_compile import CudaCompileError
    from tile_nb.lower import LoweringError
    from tile_nb.runtime import compile as rt_compile

    print("| tutorial: kernel | " + " | ".join(archs) + " |")
    print("|---|" + "---|" * len(archs))
    for label, func in kernels:
        cells = []
        for arch in archs:
            try:
                kernel = rt_compile(func, arch, options={"cache": False})
                r = next(iter(kernel.resources_by_kernel.values()))
                cells.append(f"builds ({r.registers} regs, {r.total_shared_bytes // 1024} KiB)")
            except LoweringError as err:
                cells.append("refused: " + str(err).splitlines()[0].replace("|", "/")[:90])
            except CudaCompileError as err:
                cells.append("COMPILER ERROR: " + str(err).splitlines()[1][:80])
            except Exception as err:  # noqa: BLE001 - a cell of the table
                cells.append(f"ERROR {type(err).__name__}: {str(err).splitlines()[0][:80]}")
        print(f"| {label} | " + " | ".join(cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
