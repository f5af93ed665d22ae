"""Static HTML for `KernelView`: inline styles, no JavaScript, no ids, deterministic.

Layout: a title line; notes (template stopped early, where the kernel ran); the phase-1 template and the
phase-2 specialized TVMScript side by side in one table (line numbers, a marker column, changed lines tinted);
then collapsed `<details>` sections for the lowered IR, CUDA, PTX, SASS, resources and compile timings.

Untrusted outputs (a notebook opened as stored, GitHub, nbviewer, VS Code) pass through an HTML sanitizer
that keeps only listed tags, attributes and CSS properties with listed value forms: JupyterLab's drops
`ch` widths, `<style>`, ids and scripts. So every style here uses properties and units it keeps (px, em,
%), and nothing depends on a style being kept: the side-by-side table has one row per aligned line (row
alignment is the table's structure, not equal line heights), long lines wrap inside their cell, and the
marker column (`~` changed, `-` template only, `+` specialized only) keeps the diff readable without
colors. `extension/tests/sanitize.test.ts` runs the stored notebooks' views through JupyterLab's own
sanitizer and checks that nothing is dropped.

JupyterLab and GitHub style `<table>`s (right-aligned cells, zebra rows, padding), so every cell sets its own
alignment, padding and background. Long single texts (lowered IR, CUDA, PTX, SASS) are one row whose columns
are `<pre>`s holding a `<div>` per line, scrolling sideways, which keeps large listings small. A code line
that came from a line of the kernel's source has a tooltip naming it (the extension highlights it).
"""
from __future__ import annotations

from typing import Any

from tile_nb.notebook.diff import align
from tile_nb.notebook.highlight import escape, highlight_lines

# views.py renders through this module, so this one reads its objects by their
# fields and imports nothing of it.
KernelView = Any   # a tile_nb.notebook.views.KernelView
Section = Any      # a tile_nb.notebook.views.Section

__all__ = ["render_kernel_view"]

_MONO = "font-family:SFMono-Regular,Menlo,Consolas,'Liberation Mono',monospace;font-size:12px;line-height:1.4"
_BOX = ("font-family:-apple-system,'Segoe UI',Helvetica,Arial,sans-serif;font-size:13px;line-height:1.45;"
        "color:#1f2328;max-width:100%")
_TABLE = "border-collapse:collapse;border:1px solid #d0d7de;margin:4px 0"
_PRE = f"{_MONO};margin:0;padding:0;border:none;background:none;white-space:pre;overflow:visible"
# The side-by-side table: fixed layout at the full width, column widths on the header cells (and <col>s).
_SIDE_TABLE = f"{_TABLE};{_MONO};table-layout:fixed;width:100%"
_ROW = "background:#ffffff"
_CELL = "vertical-align:top;line-height:1.4;border:none;padding:0 4px"
_SIDE_NUM = f"{_CELL};text-align:right;color:#8c959f;background:#f6f8fa"
# Wrapped continuation lines are indented (hanging indent), so a wrapped line does not read as a new one.
_SIDE_CODE = (
    f"{_CELL};padding-left:2.5em;text-indent:-2em;text-align:left;white-space:pre-wrap;word-wrap:break-word"
)
_SIDE_MARK = f"{_CELL};text-align:center;color:#9a6700;padding:0"
_NUM_WIDTH = "3.5em"
_MARK_WIDTH = "1.5em"
_NUM = "color:#8c959f;text-align:right;padding:0 6px;vertical-align:top;border:none;background:#f6f8fa"
_CODE = "text-align:left;padding:0 8px;vertical-align:top;border:none;background:#ffffff"
_MARK = "color:#9a6700;text-align:center;padding:0 2px;vertical-align:top;border:none;background:#ffffff"
_HIGHLIGHT_MAX_LINES = 400
_HEAD = ("text-align:left;padding:4px 8px;border-bottom:1px solid #d0d7de;background:#f6f8fa;font-weight:600;"
         "vertical-align:bottom")
_SUMMARY = "cursor:pointer;font-weight:600;padding:2px 0"
_NOTE = "margin:4px 0;padding:4px 8px;border-left:3px solid {color};background:{bg}"

# Row tints: (template side, specialized side), by diff tag.
_TINT = {
    "equal": ("", ""),
    "replace": ("background:#fff1e5", "background:#fff8c5"),
    "delete": ("background:#fff1e5", ""),
    "insert": ("", "background:#fff8c5"),
}
_MARKS = {"equal": "", "replace": "~", "delete": "-", "insert": "+"}

_RESOURCE_LABELS = (
    ("registers", "registers per thread"),
    ("shared_bytes", "shared memory per block, static + dynamic (bytes)"),
    ("spill_stores", "spill stores (bytes)"),
    ("spill_loads", "spill loads (bytes)"),
)


def _td(style: str, content: str = "", extra: str = "") -> str:
    return f'<td style="{style}{";" + extra if extra else ""}">{content}</td>'


def _note(text_html: str, kind: str = "info") -> str:
    color, bg = {"info": ("#0969da", "#ddf4ff"), "warn": ("#bf8700", "#fff8c5")}[kind]
    return f'<div style="{_NOTE.format(color=color, bg=bg)}">{text_html}</div>'


def _pre(lines: list[str], tints: list[str] | None = None, style: str = _PRE) -> str:
    """One column of a code table: a `<pre>` with a `<div>` per line (so a line can be tinted)."""
    if tints is None:
        tints = [""] * len(lines)
    body = "".join(f'<div style="{tint}">{line or " "}</div>' if tint else f"<div>{line or ' '}</div>"
                   for line, tint in zip(lines, tints, strict=True))
    return f'<pre style="{style}">{body}</pre>'


def _code_table(section: Section) -> str:
    """A single text with line numbers: one row, a column of numbers and a column of code."""
    lines = _highlighted(section)
    numbers = [str(n) for n in range(1, len(lines) + 1)]
    return (f'<div style="overflow-x:auto"><table style="{_TABLE}"><tbody><tr>'
            f"{_td(_NUM, _pre(numbers))}{_td(_CODE, _pre(lines))}</tr></tbody></table></div>")


def _highlighted(section: Section) -> list[str]:
    if section.line_count > _HIGHLIGHT_MAX_LINES:  # long listings (PTX, SASS) stay plain: output size matters
        return highlight_lines(section.text, "text")
    return highlight_lines(section.text, section.language)


def _origins(section: Section) -> dict[int, list[int]]:
    """Section line -> the source lines it came from (the inverse of `section.line_map`)."""
    origins: dict[int, list[int]] = {}
    for source_line, lines in sorted((section.line_map or {}).items()):
        for n in lines:
            origins.setdefault(n, []).append(source_line)
    return origins


def _source_title(lines: list[int] | None) -> str:
    if not lines:
        return ""
    return f' title="from source line{"s" if len(lines) > 1 else ""} {", ".join(map(str, lines))}"'


def _side_by_side(template: Section, specialized: Section, consts_label: str) -> str:
    """One table row per aligned pair of lines: number, template code, marker, number, specialized code."""
    left_html, right_html = _highlighted(template), _highlighted(specialized)
    left_from, right_from = _origins(template), _origins(specialized)
    rows = []
    for row in align(template.text.split("\n"), specialized.text.split("\n")):
        left_tint, right_tint = _TINT[row.tag]
        cells = []
        for number, html_lines, tint, origins, border in (
                (row.left_no, left_html, left_tint, left_from, ""),
                (row.right_no, right_html, right_tint, right_from, ";border-left:1px solid #d0d7de")):
            cells.append(f'<td style="{_SIDE_NUM}{border}">{number or ""}</td>')
            code = html_lines[number - 1] if number else ""
            style = f"{_SIDE_CODE};{tint}" if tint else _SIDE_CODE
            cells.append(
                f'<td style="{style}"{_source_title(origins.get(number)) if number else ""}>{code}</td>'
            )
        cells.insert(2, f'<td style="{_SIDE_MARK}">{_MARKS[row.tag]}</td>')
        rows.append(f'<tr style="{_ROW}">{"".join(cells)}</tr>')
    num_head = f'<th style="{_HEAD};width:{_NUM_WIDTH}"></th>'
    head = (
        f'<tr>{num_head}<th style="{_HEAD}">Phase 1: template <span style="font-weight:400">'
        f"(consts symbolic)</span></th>"
        f'<th style="{_HEAD};width:{_MARK_WIDTH}"></th>'
        f"{num_head.replace(_HEAD, _HEAD + ';border-left:1px solid #d0d7de', 1)}"
        f'<th style="{_HEAD}">Phase 2: specialized <span '
        f'style="font-weight:400">{escape(consts_label)}</span>'
        "</th></tr>"
    )
    cols = (f'<colgroup><col style="width:{_NUM_WIDTH}"><col><col style="width:{_MARK_WIDTH}">'
            f'<col style="width:{_NUM_WIDTH}"><col></colgroup>')
    return f'<table style="{_SIDE_TABLE}">{cols}<thead>{head}</thead><tbody>{"".join(rows)}</tbody></table>'


def _details(summary: str, body: str) -> str:
    return f'<details style="margin:4px 0"><summary style="{_SUMMARY}">{summary}</summary>{body}</details>'


def _kv_table(rows: list[tuple[str, str]]) -> str:
    cells = "".join(
        f'<tr>{_td("text-align:left;padding:1px 8px;border:none", escape(k))}'
        f'{_td(_MONO + ";text-align:right;padding:1px 8px;border:none", escape(v))}</tr>'
        for k, v in rows)
    return f'<table style="{_TABLE}"><tbody>{cells}</tbody></table>'


def _params_line(view: KernelView) -> str:
    if not view.params:
        return ""
    items = []
    for p in view.params:
        ann = f" {escape(p.annotation)}" if p.annotation else ""
        items.append(f'<code style="{_MONO}">{escape(p.name)}</code>'
                     f'<span style="color:#57606a"> ({escape(p.kind.replace("_", "-"))}{ann})</span>')
    return f'<div style="margin:2px 0">params: {", ".join(items)}</div>'


def _run_note(view: KernelView) -> str:
    if view.run is None and view.backend != "cpu-interpreter":
        return ""
    device = (view.run or {}).get("device", "cpu")
    if view.backend == "cpu-interpreter" or device == "cpu":
        text = "Ran on the <b>CPU interpreter</b> (tile_nb.interp; no GPU launch)."
    else:
        text = f"Ran on <b>{escape(str(device))}</b>."
    err = (view.run or {}).get("max_abs_err")
    if err is not None:
        text += f" Max abs error against the reference: <code style=\"{_MONO}\">{float(err):.3g}</code>."
    return _note(text)


def render_kernel_view(view: KernelView) -> str:
    """Render `view` as a static HTML fragment."""
    parts = [f'<div style="{_BOX}">']
    consts = ", ".join(f"{k}={v}" for k, v in view.consts.items())
    title = f'<span style="font-size:14px;font-weight:600">{escape(view.name)}</span>'
    if consts:
        title += (f' <span style="color:#57606a">specialized at '
                  f'<code style="{_MONO}">{escape(consts)}</code></span>')
    parts.append(f'<div style="margin:2px 0">{title}</div>')
    parts.append(_params_line(view))

    template, specialized = view.section("template"), view.section("specialized")
    if template is not None and template.note:
        parts.append(_note(f"The template stopped early: {escape(template.note)}", "warn"))
    if specialized is not None and specialized.note:
        parts.append(_note(escape(specialized.note)))
    parts.append(_run_note(view))
    parts += [_note(escape(n)) for n in view.notes]

    if template is not None and specialized is not None:
        parts.append(_side_by_side(template, specialized, f"({consts})" if consts else ""))
    elif template is not None or specialized is not None:
        only = template or specialized
        parts.append(f'<div style="font-weight:600;margin-top:4px">{escape(only.title)}</div>')
        parts.append(_code_table(only))

    for section in view.sections:
        if section.id in ("template", "specialized"):
            continue
        summary = (f'{escape(section.title)} <span style="font-weight:400;color:#57606a">'
                   f"({section.line_count} lines)</span>")
        body = (_note(escape(section.note)) if section.note else "") + _code_table(section)
        parts.append(_details(summary, body))

    if view.resources is not None:
        rows = [(label, str(view.resources.get(key, 0))) for key, label in _RESOURCE_LABELS]
        summary = (f'Resources <span style="font-weight:400;color:#57606a">'
                   f"({view.resources.get('registers', 0)} registers, "
                   f"{view.resources.get('shared_bytes', 0)} B shared)</span>")
        parts.append(_details(summary, _kv_table(rows)))
    if view.timings_ms:
        total = sum(view.timings_ms.values())
        rows = [(stage, f"{ms:.1f} ms") for stage, ms in view.timings_ms.items()] + [
            ("total", f"{total:.1f} ms")
        ]
        summary = f'Compile timings <span style="font-weight:400;color:#57606a">({total:.0f} ms)</span>'
        parts.append(_details(summary, _kv_table(rows)))
    parts.append("</div>")
    return "".join(p for p in parts if p)
