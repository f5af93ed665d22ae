"""A generated case as text: the kernel's source, its inputs, its torch model, and the module that holds them.

`Case.module_text()` is both what the harness executes (registered in `linecache`, so the kernel's in-body
annotations are found) and the standalone reproducer a failure writes out: the same text plus the comparison
code (check.py) and the model helpers it uses (model_lib.py), runnable with plain `python`.
"""
from __future__ import annotations

import contextlib
import hashlib
import inspect
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from . import check, model_lib

__all__ = ["Case", "Source", "TensorArg", "exact", "close"]


def exact() -> dict:
    return {"kind": "exact"}


def close(rtol: float, atol: float) -> dict:
    return {"kind": "close", "rtol": rtol, "atol": atol}


class Source:
    """Lines of Python with an indentation level: `src("x = 1")`, `with src.block("for i in ..."):`."""

    def __init__(self, level: int = 0):
        self.lines: list[str] = []
        self.level = level

    def __call__(self, line: str = "") -> None:
        self.lines.append(("    " * self.level + line) if line else "")

    @contextlib.contextmanager
    def block(self, header: str):
        self(header)
        self.level += 1
        try:
            yield
        finally:
            self.level -= 1

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


POISON = {"float16": "float('nan')", "bfloat16": "float('nan')", "float32": "float('nan')",
          "float64": "float('nan')", "int8": "-128", "int16": "-32768", "int32": "-2**31", "uint8": "255"}


@dataclass(frozen=True)
class TensorArg:
    """How one tensor argument is built.

    values: "normal" (randn * scale), "nan" (normal with NaN in about one element of eight: max / min must
    propagate them), "int" (non-zero integers in [-hi, hi], any dtype: exact in every float
    dtype used here), "natural" (integers in [0, hi]), "index" (integers in [0, hi]), "poison" (an output:
    NaN, or the dtype's most negative value / 255, which no input takes).
    view: "contiguous", "guarded" (a contiguous window into a larger poisoned buffer, so stray writes show),
    "transposed" (the last two dims of a contiguous tensor swapped: strides (1, M)), "every_other" (every
    second element of the last dim), "padded" (rows of a wider tensor: a row stride larger than the width).
    """

    name: str
    shape: tuple
    dtype: str
    values: str = "normal"
    view: str = "contiguous"
    hi: int = 4
    scale: float = 1.0

    def base_shape(self) -> tuple:
        s = tuple(self.shape)
        if self.view == "transposed":
            return s[:-2] + (s[-1], s[-2])
        if self.view == "every_other":
            return s[:-1] + (2 * s[-1],)
        if self.view == "padded":
            return s[:-1] + (s[-1] + 3,)
        if self.view == "guarded":
            n = 1
            for d in s:
                n *= d
            return (n + 2 * GUARD,)
        return s

    def render(self, src: Source) -> None:
        shape = self.base_shape()
        dt = f"torch.{self.dtype}"
        if self.values == "poison":
            value = f"torch.full({shape}, {POISON[self.dtype]}, dtype={dt})"
        elif self.values == "normal":
            value = f"(torch.randn({shape}, generator=g) * {self.scale}).to({dt})"
        elif self.values == "nan":  # normal, with NaN in about one element of eight
            value = (f"torch.where(torch.rand({shape}, generator=g) < 0.125, float('nan'), "
                     f"torch.randn({shape}, generator=g) * {self.scale}).to({dt})")
        elif self.values == "int":
            value = (f"(torch.randint(1, {self.hi + 1}, {shape}, generator=g) * "
                     f"(torch.randint(0, 2, {shape}, generator=g) * 2 - 1)).to({dt})")
        elif self.values in ("natural", "index"):
            low = 1 if self.values == "natural" else 0
            value = f"torch.randint({low}, {self.hi + 1}, {shape}, generator=g).to({dt})"
        else:
            raise ValueError(f"unknown values kind {self.values!r}")
        src(f"{self.name} = {value}.to(device)")
        if self.view == "transposed":
            src(f"{self.name} = {self.name}.transpose(-1, -2)")
        elif self.view == "every_other":
            src(f"{self.name} = {self.name}[..., ::2]")
        elif self.view == "padded":
            src(f"{self.name} = {self.name}[..., :{self.shape[-1]}]")
        elif self.view == "guarded":
            n = shape[0] - 2 * GUARD
            src(f"{self.name} = {self.name}[{GUARD}:{GUARD + n}].view{tuple(self.shape)}")


GUARD = 64  # poisoned elements before and after a guarded output


@dataclass
class Case:
    """One generated kernel with everything needed to run and check it."""

    family: str
    spec: object                      # the family's frozen spec; its repr regenerates the case
    kernel_name: str
    kernel_source: str                # the `@tile_nb.jit` function
    args: list                        # TensorArg, in call order
    model_source: str                 # `def model(<args>):` returning {output name: expected tensor}
    outputs: dict                     # output name -> argument index, or "return" / "return:<k>"
    rules: dict                       # output name -> {"model": rule, "gpu": rule}
    helpers: list = field(default_factory=list)   # model_lib functions the model calls
    seed: int = 0
    # what is special about this case (for the reproducer header)
    notes: list = field(default_factory=list)

    @property
    def case_id(self) -> str:
        return hashlib.sha1(self.core_text().encode()).hexdigest()[:10]

    def inputs_source(self) -> str:
        src = Source()
        with src.block('def make_inputs(device="cpu"):'):
            src(
                '"""The call\'s arguments, the same values on every device (built on the CPU from seed '
                f'{self.seed})."""'
            )
            src(f"g = torch.Generator().manual_seed({self.seed})")
            for arg in self.args:
                arg.render(src)
            src(f"return [{', '.join(a.name for a in self.args)}]")
        return src.text()

    def core_text(self) -> str:
        """Kernel, model and inputs: what the harness executes."""
        parts = [
            "import torch",
            "import tile_nb",
            "import tile_nb.language as T",
            "",
            "",
            self.kernel_source.rstrip(),
            "",
            "",
            f"KERNEL = {self.kernel_name}",
            f"OUTPUTS = {self.outputs!r}",
            f"RULES = {self.rules!r}",
            f"SPEC = {repr(self.spec)!r}",
            "",
            "",
            "# ---- the model: what the kernel must compute, in torch, from the grammar ----",
            *[inspect.getsource(getattr(model_lib, h)).rstrip() + "\n\n" for h in self.helpers],
            self.model_source.rstrip(),
            "",
            "",
            self.inputs_source().rstrip(),
        ]
        return "\n".join(parts) + "\n"

    def module_text(self) -> str:
        """The standalone reproducer: the core text, then the comparison code and a main."""
        header = [f'"""difftest reproducer: family {self.family}, case {self.case_id}.', "",
                  f"spec: {self.spec!r}"]
        header += [f"note: {n}" for n in self.notes]
        header += [
            "",
            "Run with plain python from anywhere tile_nb is installed: it compares the interpreter with "
            "the torch model,",
            "compiles for sm_90a and sm_80, and on a CUDA machine compares the GPU with the interpreter.",
            '"""',
        ]
        check_text = inspect.getsource(check).split("\nimport torch\n", 1)[1]
        return ("\n".join(header) + "\n" + self.core_text() + "\n\n"
                "# ---- comparison (tests/difftest/check.py) ----\n" + "import traceback\n" + check_text +
                "\n\nif __name__ == '__main__':\n    raise SystemExit(main(globals()))\n")

    def load(self) -> dict:
        """Execute the core text as a module whose source `linecache` knows; returns its namespace."""
        import tile_nb

        text = self.core_text()
        filename = f"<difftest-{self.family}-{self.case_id}>"
        return tile_nb.run_source(text, {"__name__": f"difftest_{self.case_id}"}, filename=filename)

    def write_reproducer(self, directory: str | None = None) -> Path:
        """Write `module_text()` to `$DIFFTEST_OUT` (or a temp folder); returns the path."""
        folder = Path(
            directory or os.environ.get("DIFFTEST_OUT") or Path(tempfile.gettempdir()) / "tile_nb_difftest"
        )
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"repro_{self.family}_{self.case_id}.py"
        path.write_text(self.module_text())
        return path
