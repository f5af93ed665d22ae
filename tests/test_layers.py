"""The layers of DESIGN.md section 3 import only layers below them, function-local imports included; the faces
that the bench and notebook layers give a kernel (`gemm.bench`, `.sweep`, `.tune`, `.show`) work without
jit.py importing those layers, and without the user importing them."""
import ast
import os
import pathlib
import subprocess
import sys

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "tile_nb"

# module or folder -> the tile_nb modules it must never import (anywhere in the file)
ABOVE = {
    "language": (
        "frontend",
        "lower",
        "backend",
        "runtime",
        "interp",
        "jit",
        "bench",
        "notebook",
        "autotune",
        "torch",
    ),
    "frontend": ("lower", "backend", "runtime", "interp", "jit", "bench", "notebook", "autotune", "torch"),
    "runtime": ("interp", "jit", "bench", "notebook", "autotune", "torch"),
    "jit.py": ("bench", "notebook", "autotune", "torch"),
    "bench": ("notebook", "jit", "autotune", "torch"),
    "notebook": ("autotune", "torch"),
}

# Inside lower/ (its __init__.py draws the map): the shared leaves, then analysis/ (what decides), then emit/
# (what the decisions become), then the driver lowering.py. Folder or file -> what
# below tile_nb it must not import.
LOWER_LEAVES = ("diagnostics", "errors", "exprs", "irwalk", "narrow", "options", "sourcemap", "written_order")
LOWER = {
    **{f"lower/{leaf}.py": ("lower.analysis", "lower.emit", "lower.lowering") for leaf in LOWER_LEAVES},
    "lower/analysis": ("lower.emit", "lower.lowering"),
    "lower/emit": ("lower.lowering",),
}


def _imports(path: pathlib.Path) -> set[str]:
    """The tile_nb modules `path` imports, as dotted names below tile_nb ("" for the package itself)."""
    module = path.relative_to(PACKAGE.parent).with_suffix("").parts
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name[len("tile_nb."):] if a.name != "tile_nb" else "" for a in node.names
                    if a.name == "tile_nb" or a.name.startswith("tile_nb.")}
        elif isinstance(node, ast.ImportFrom):
            if node.level:   # relative to the package holding `path` (for __init__.py, that package itself)
                package = list(module[:-1])
                package = package[: len(package) - (node.level - 1)]
                full = ".".join(package + ([node.module] if node.module else []))
            else:
                full = node.module or ""
            if full == "tile_nb":   # `from tile_nb import x`, `from . import runtime`: x may be a module
                out |= {a.name for a in node.names}
            elif full.startswith("tile_nb."):
                out.add(full[len("tile_nb."):])
    return out


def _files(part: str) -> list[pathlib.Path]:
    where = PACKAGE / part
    return [where] if where.suffix == ".py" else sorted(where.rglob("*.py"))


@pytest.mark.parametrize("part", sorted(ABOVE))
def test_a_layer_imports_nothing_above_it(part):
    bad = []
    for path in _files(part):
        for name in _imports(path):
            top = name.split(".")[0]
            if top in ABOVE[part] or name == "":
                bad.append(f"{path.relative_to(PACKAGE.parent)} imports tile_nb{'.' + name if name else ''}")
    assert not bad, bad


def test_the_faces_work_without_importing_their_layers_first(tmp_path):
    script = tmp_path / "faces.py"
    script.write_text(
        "import sys\n"
        "import tile_nb\n"
        "import tile_nb.language as T\n"
        "assert 'tile_nb.bench' not in sys.modules and 'tile_nb.notebook' not in sys.modules\n"
        "@tile_nb.jit\n"
        "def k(A):\n"
        "    N = T.const('N')\n"
        "    A: T.Tensor[[N], T.float32]\n"
        "    with T.Kernel(1) as bx:\n"
        "        A[0] = 1.0\n"
        "assert 'tile_nb.bench' not in sys.modules\n"
        "tune = k.tune\n"   # the first use imports the bench layer's faces
        "from tile_nb.bench import faces as b\n"
        "from tile_nb.notebook import faces as n\n"
        "assert tune.__func__ is b.tune and k.bench.__func__ is b.bench and k.sweep.__func__ is b.sweep\n"
        "assert k.show.__func__ is n.show and tile_nb.JITFunction.tune is b.tune\n"
        "assert 'IPython' not in sys.modules\n"
        "print(k.show(N=4).name)\n")
    env = {**os.environ, "PYTHONPATH": str(PACKAGE.parent) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "k"


@pytest.mark.parametrize("part", sorted(LOWER))
def test_analysis_never_imports_the_emitters(part):
    bad = [f"{path.relative_to(PACKAGE.parent)} imports tile_nb.{name}" for path in _files(part)
           for name in _imports(path) if any(name == b or name.startswith(b + ".") for b in LOWER[part])]
    assert not bad, bad


def test_every_module_at_the_top_of_lower_has_a_place():
    top = {p.stem for p in (PACKAGE / "lower").glob("*.py")} - {"__init__", "lowering"}
    assert top == set(LOWER_LEAVES), (
        "a module at the top of lower/ is a shared leaf (add it to LOWER_LEAVES) or belongs in "
        "analysis/ or emit/"
    )
