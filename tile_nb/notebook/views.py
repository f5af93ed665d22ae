"""`KernelView`: the display object of a kernel (template IR, specialized IR, CUDA, resources, timings, run).

A `KernelView` only holds plain data (strings, ints, floats), so it renders the same everywhere
and pickles. It is built by `tile_nb.notebook.build` from a jit function, or directly from
parts in tests. Three renderings:

- `text/plain`: a short, deterministic summary (what nbval compares): kernel name, params, const values, line
  counts. No addresses, timings, paths, register counts or errors that vary between machines.
- `text/html`: a static page fragment (no JavaScript, inline styles) for GitHub,
  nbconvert and Sphinx; see `render.py`.
- `application/vnd.tile-nb.kernel+json`: the structured data the JupyterLab extension renders (`to_json`).

Line mapping: `KernelView.source` holds the kernel's source lines (from its file or notebook cell, with
the line number of the first in that file or cell), and each section's `line_map` says which of its
lines each source line became (`{source line: (section lines...)}`, 1-based; see `linemap.py`). The
extension highlights them on hover.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from tile_nb.notebook.bundle import select

__all__ = ["MIME_TYPE", "PARAM_KINDS", "SECTION_IDS", "KernelView", "Param", "Section"]

MIME_TYPE = "application/vnd.tile-nb.kernel+json"
JSON_VERSION = 2  # 2: `source` and the sections' `line_map` (version 1 is 2 without them)
PARAM_KINDS = ("tensor", "scalar", "const", "dynamic", "compile_time")
SECTION_IDS = ("template", "specialized", "plan", "lowered", "cuda", "ptx", "sass")
RESOURCE_KEYS = ("registers", "shared_bytes", "spill_stores", "spill_loads")


@dataclass(frozen=True)
class Param:
    """A kernel parameter as the view shows it.

    `kind` is one of `PARAM_KINDS`: "tensor" (a buffer argument), "scalar" (a runtime scalar),
    "const" (a `T.const` dim), "dynamic" (a `T.dynamic` dim) or "compile_time" (a plain Python
    parameter); `annotation` is its type as the user wrote it (e.g. `T.Tensor[[M, K], float16]`, or
    `int = 128` for a compile-time value).
    """

    name: str
    kind: str
    annotation: str = ""

    def __post_init__(self):
        if self.kind not in PARAM_KINDS:
            raise ValueError(f"param kind must be one of {PARAM_KINDS}, got {self.kind!r}")


@dataclass(frozen=True)
class Section:
    """One text of the kernel: `id` in `SECTION_IDS`; `language` "python"
    (TVMScript), "cuda", "ptx" or "text".

    `changed_lines` (1-based, in this section's text) is only set for the "specialized" section; `note` is a
    short remark shown with the section (e.g. where the template stopped early); `line_map` maps a line of the
    kernel's source to the lines of this section it became.
    """

    id: str
    title: str
    language: str
    text: str
    changed_lines: tuple[int, ...] | None = None
    note: str | None = None
    line_map: dict[int, tuple[int, ...]] | None = None

    @property
    def line_count(self) -> int:
        return len(self.text.splitlines())


@dataclass
class KernelView:
    """Everything the notebook shows about one kernel; display it (or return it from a cell) to render it.

    Example (normally built by `tile_nb.notebook.show(gemm, M=256, N=256, K=128)`):

    >>> v = KernelView("gemm", [Param("A", "tensor", "T.Tensor[[M, K], float16]")], {"M": 256})
    >>> print(repr(v))
    KernelView gemm
      params: A: tensor T.Tensor[[M, K], float16]
      consts: M=256
    """

    name: str
    params: list[Param] = field(default_factory=list)
    consts: dict[str, int] = field(default_factory=dict)
    backend: str | None = None  # "cuda", "cpu-interpreter" or None
    sections: list[Section] = field(default_factory=list)
    resources: dict[str, int] | None = None
    timings_ms: dict[str, float] = field(default_factory=dict)
    run: dict | None = None  # {"device": str, "max_abs_err": float | None}
    # messages shown in the HTML and plain text (stable wording)
    notes: list[str] = field(default_factory=list)
    source: dict | None = None  # {"first_line": int, "lines": [str]}: the kernel's source lines

    # -----------------------------------------------------------------------------------------------
    # accessors
    def section(self, section_id: str) -> Section | None:
        """The section with this id, or None."""
        return next((s for s in self.sections if s.id == section_id), None)

    # -----------------------------------------------------------------------------------------------
    # renderings
    def to_text(self) -> str:
        """The deterministic plain-text summary (the `text/plain` of the bundle)."""
        lines = [f"KernelView {self.name}"]
        if self.params:
            parts = [
                f"{p.name}: {p.kind}" + (f" {p.annotation}" if p.annotation else "") for p in self.params
            ]
            lines.append("  params: " + "; ".join(parts))
        if self.consts:
            lines.append("  consts: " + ", ".join(f"{k}={v}" for k, v in self.consts.items()))
        for s in self.sections:
            text = f"  {s.id}: {s.line_count} lines"
            if s.changed_lines is not None:
                text += f", {len(s.changed_lines)} changed by specialization"
            if s.id == "template" and s.note:
                text += " (stopped early)"
            lines.append(text)
        if self.backend == "cpu-interpreter" or (self.run and self.run.get("device") == "cpu"):
            lines.append("  ran on the CPU interpreter")
        elif self.run:
            lines.append("  ran on the GPU")
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)

    def to_json(self) -> dict:
        """The `application/vnd.tile-nb.kernel+json` payload (version 1; the
        JupyterLab extension's contract)."""
        sections = []
        for s in self.sections:
            sections.append({
                "id": s.id,
                "title": s.title,
                "language": s.language,
                "text": s.text,
                "changed_lines": list(s.changed_lines or ()),  # [] when there is no template to compare with
                "note": s.note,
                "line_map": {str(k): [int(n) for n in v] for k, v in sorted((s.line_map or {}).items())},
            })
            if s.id != "specialized":
                del sections[-1]["changed_lines"]
        return {
            "version": JSON_VERSION,
            "name": self.name,
            "params": [{"name": p.name, "kind": p.kind, "annotation": p.annotation} for p in self.params],
            "consts": {k: int(v) for k, v in self.consts.items()},
            "backend": self.backend,
            "sections": sections,
            "resources": ({k: int(self.resources.get(k, 0)) for k in RESOURCE_KEYS}
                          if self.resources is not None else None),
            "timings_ms": {k: float(v) for k, v in self.timings_ms.items()},
            "run": dict(self.run) if self.run is not None else None,
            # the same notes the HTML and text show (e.g. a T.dynamic dim)
            "notes": [str(n) for n in self.notes],
            # No file name: a notebook cell's (ipykernel_<pid>/<hash>.py) changes from run to run.
            "source": ({"first_line": int(self.source["first_line"]),
                        "lines": [str(line) for line in self.source["lines"]]} if self.source else None),
        }

    def to_html(self) -> str:
        """The static HTML fragment (inline styles, no JavaScript)."""
        from tile_nb.notebook.render import render_kernel_view

        return render_kernel_view(self)

    def _repr_mimebundle_(self, include=None, exclude=None):
        bundle = {"text/plain": self.to_text(), "text/html": self.to_html(), MIME_TYPE: self.to_json()}
        return select(bundle, include, exclude)

    def __repr__(self) -> str:
        return self.to_text()

    def _repr_pretty_(self, printer, cycle):
        printer.text(self.to_text())

