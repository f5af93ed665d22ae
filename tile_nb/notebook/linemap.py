"""Which lines of the displayed TVMScript come from which line of the user's kernel source (phases 1 and 2).

The front end attaches the user's line to the IR it builds where TVM keeps one
(docs/IR.md, "Source locations"):
a `span` on `BufferStore` and `Evaluate`, and the lines of the tile ops, in order, in `tile_op_lines`. Loops,
`if`s, thread launches and allocations carry no line, but they bind names (`for k in ...`, `A_shared = ...`,
`with T.Kernel(...) as (bx, by)`) and enclose statements that do carry one, so their line is the innermost
statement of the same kind in the user's source that binds that name and encloses those lines.

The printed text is matched to the IR, not parsed: TVMScript prints a function's statements in pre-order, one
line each (a block's header on its own line), so the printed lines of each
kind (`for`, `T.tile.*`, allocations,
...) are the IR statements of that kind in order. A kind whose printed count differs from the IR's is left
unmapped: a line is mapped right or not at all.

`script_lines(func, source)` returns the text the views show (without the printer's import header and
without the front end's internal `tile_nb.*` function attributes) and the map
`user line -> [displayed lines]` (1-based).

The lowered TIRx and the CUDA source are mapped through the compiled kernel's source regions instead
(tile_nb.lower.sourcemap: the lines each statement of the phase-2 IR became, by the statement's index);
`region_line_map` turns those indices into the user's lines with the same statements' lines as above.
"""
from __future__ import annotations

import ast
import re
from collections import defaultdict
from dataclasses import dataclass, field

__all__ = ["INTERNAL_ATTR_PREFIX", "clean_lines", "region_line_map", "script_lines", "shift_line_map"]

INTERNAL_ATTR_PREFIX = "tile_nb."
_HEADER_LINE = re.compile(r"^# from tvm[.\w]* import ")
_FUNC_ATTR = re.compile(r"^(\s*)T\.func_attr\((\{.*\})\)\s*$")


# --------------------------------------------------------------------------------------------- displayed text
def _visible_attrs(line: str) -> str | None:
    """A `T.func_attr({...})` line without the `tile_nb.*` keys (None: nothing
    left to show); other lines as is."""
    match = _FUNC_ATTR.match(line)
    if match is None or INTERNAL_ATTR_PREFIX not in line:
        return line
    try:
        attrs = ast.literal_eval(match.group(2))
    except (ValueError, SyntaxError):
        # Values the printer writes as calls (T.bool(True)): drop the internal entries by text.
        kept = re.sub(r'"tile_nb\.[\w.]+": (\[[^\]]*\]|[^,}]*)(, )?', "", match.group(2))
        kept = re.sub(r", \}$", "}", kept)
        return None if kept == "{}" else f"{match.group(1)}T.func_attr({kept})"
    visible = {k: v for k, v in attrs.items() if not str(k).startswith(INTERNAL_ATTR_PREFIX)}
    if not visible:
        return None
    body = ", ".join(f'"{k}": {_literal(v)}' for k, v in visible.items())
    return f"{match.group(1)}T.func_attr({{{body}}})"


def _literal(value) -> str:
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, list):
        return "[" + ", ".join(_literal(v) for v in value) + "]"
    return repr(value)


def clean_lines(text: str) -> tuple[list[str], list[int | None]]:
    """The lines the views show, and for each line of `text` its 1-based displayed line (None: not shown).

    Drops the printer's `# from tvm... import` header with the blank lines around it, trailing blank lines,
    and the internal `tile_nb.*` entries of `T.func_attr` (the line goes when nothing else is in it).
    """
    raw = text.split("\n")
    shown: list[str] = []
    where: list[int | None] = []
    header = True
    for line in raw:
        if header and (_HEADER_LINE.match(line) or not line.strip()):
            where.append(None)
            continue
        header = False
        visible = _visible_attrs(line)
        if visible is None:
            where.append(None)
            continue
        shown.append(visible)
        where.append(len(shown))
    while shown and not shown[-1].strip():
        shown.pop()
    where = [w if w is None or w <= len(shown) else None for w in where]
    return shown, where


def shift_line_map(line_map: dict | None, where: list[int | None]) -> dict[int, list[int]]:
    """A `user line -> [lines of the raw text]` map (e.g.
    `CompiledKernel.line_map["lowered"]`) in displayed lines."""
    shifted: dict[int, list[int]] = {}
    for user_line, lines in (line_map or {}).items():
        out = sorted({where[n - 1] for n in lines if isinstance(n, int) and 0 < n <= len(where)
                      and where[n - 1] is not None})
        if out:
            shifted[int(user_line)] = out
    return shifted


# ---------------------------------------------------------------------------------------------
# the user's source
@dataclass
class _Source:
    """The kernel's AST with absolute line numbers: statements by kind, and the names each one binds."""

    filename: str
    def_line: int
    decorator_lines: list[int]
    param_lines: dict[str, int]  # parameter name -> line of its in-body annotation `A: T.Tensor[...]`
    # (kind, first, last, names)
    stmts: list[tuple[str, int, int, set[str], ast.AST]] = field(default_factory=list)

    @classmethod
    def of(cls, source) -> _Source | None:
        tree = getattr(source, "tree", None)
        if tree is None:
            return None
        offset = int(source.first_line) - 1
        params = {a.arg for a in tree.args.args + tree.args.kwonlyargs}
        found = cls(
            str(source.filename), tree.lineno + offset, [d.lineno + offset for d in tree.decorator_list], {}
        )
        for node in ast.walk(tree):
            if node is tree or not isinstance(node, ast.stmt):
                continue
            first, last = node.lineno + offset, (node.end_lineno or node.lineno) + offset
            if (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and node.target.id in params
            ):
                found.param_lines.setdefault(node.target.id, first)
            kind = {ast.For: "for", ast.While: "while", ast.If: "if", ast.With: "launch"}.get(
                type(node), "assign"
            )
            found.stmts.append((kind, first, last, _bound_names(node), node))
        found.stmts.sort(key=lambda s: s[1])
        return found

    def enclosing(self, kind: str, name: str | None, lines: set[int]) -> int | None:
        """The innermost statement of `kind` (binding `name`, if given) whose lines contain one of `lines`."""
        best = None
        for k, first, last, names, node in self.stmts:
            if k != kind or (name is not None and name not in names):
                continue
            if kind == "launch" and name is None and not _is_kernel_with(node):
                continue
            if any(first <= n <= last for n in lines) and (best is None or first >= best[0]):
                best = (first, last)
        return best[0] if best else None

    def binding(self, kind: str, name: str) -> list[int]:
        """Lines of the statements of `kind` that bind `name`, in order."""
        return [first for k, first, _, names, _ in self.stmts if k == kind and name in names]


def _bound_names(node: ast.stmt) -> set[str]:
    targets: list[ast.AST] = []
    if isinstance(node, (ast.Assign,)):
        targets = list(node.targets)
    elif isinstance(node, (ast.AnnAssign, ast.AugAssign, ast.For)):
        targets = [node.target]
    elif isinstance(node, ast.With):
        targets = [item.optional_vars for item in node.items if item.optional_vars is not None]
    names: set[str] = set()
    while targets:
        target = targets.pop()
        if isinstance(target, ast.Name):
            names.add(target.id)
        elif isinstance(target, (ast.Tuple, ast.List)):
            targets.extend(target.elts)
        elif isinstance(target, ast.Starred):
            targets.append(target.value)
    return names  # `x[i] = ...` and `a.b = ...` bind no name


def _is_kernel_with(node: ast.AST) -> bool:
    return isinstance(node, ast.With) and any(
        isinstance(item.context_expr, ast.Call) and getattr(item.context_expr.func, "attr", None) == "Kernel"
        for item in node.items)


# --------------------------------------------------------------------------------------------- the IR
@dataclass
class _Stmt:
    kind: str
    name: str | None
    node: object
    lines: set[int] = field(default_factory=set)  # user lines of this statement's own span/tile op
    below: set[int] = field(default_factory=set)  # user lines of the statements inside it


def _ir_statements(func, filename: str, tile_op_lines: list[int] | None) -> list[_Stmt]:
    """The statements of `func` in printing (pre-)order, with the user lines
    their spans and tile ops carry."""
    from tvm import tirx

    tile_lines = list(tile_op_lines or [])
    out: list[_Stmt] = []

    def kind_of(s):
        name = type(s).__name__
        if isinstance(s, tirx.AttrStmt):
            if s.attr_key == "thread_extent":
                return "launch", str(s.node.var.name)
            return "with", None
        if isinstance(s, tirx.For):
            return "for", str(s.loop_var.name)
        if isinstance(s, tirx.AllocBuffer):
            return "alloc", str(s.buffer.name)
        if isinstance(s, tirx.DeclBuffer):
            return "decl", str(s.buffer.name)
        if isinstance(s, tirx.IfThenElse):
            return "if", None
        if isinstance(s, tirx.While):
            return "while", None
        if name == "TilePrimitiveCall":
            return "tile", None
        return "leaf", None

    def visit(s) -> set[int]:
        if isinstance(s, tirx.SeqStmt):
            lines: set[int] = set()
            for child in s.seq:
                lines |= visit(child)
            return lines
        kind, name = kind_of(s)
        stmt = _Stmt(kind, name, s)
        out.append(stmt)
        if kind == "tile":
            if tile_lines:
                stmt.lines.add(tile_lines.pop(0))
        else:
            span = getattr(s, "span", None)
            line = getattr(span, "line", None) if span is not None else None
            if line and str(getattr(span.source_name, "name", "")) == filename:
                stmt.lines.add(int(line))
        for attr in ("body", "then_case", "else_case"):
            child = getattr(s, attr, None)
            if isinstance(child, tirx.Stmt):
                if attr == "else_case":
                    out.append(_Stmt("else", None, s, below=stmt.below))
                stmt.below |= visit(child)
        return stmt.lines | stmt.below

    visit(func.body)
    return out


# --------------------------------------------------------------------------------------------- printed lines
_PATTERNS = (
    ("attr", re.compile(r"^T\.func_attr\(")),
    ("decorator", re.compile(r"^@T\.prim_func")),
    ("def", re.compile(r"^def \w+\(")),
    ("vars", re.compile(r"^([\w, ]+) = (T\.\w+\(\)(, )?)+$")),
    ("launch", re.compile(r"^(\w+) = T\.launch_thread\(")),
    ("launch", re.compile(r"^with T\.launch_thread\(.*\) as (\w+):$")),
    ("alloc", re.compile(r"^(\w+) = T\.alloc_buffer\(")),
    ("decl", re.compile(r"^(\w+) = T\.decl_buffer\(")),
    ("for", re.compile(r"^for ([\w, ]+) in ")),
    ("if", re.compile(r"^if .*:$")),
    ("else", re.compile(r"^else:$")),
    ("while", re.compile(r"^while .*:$")),
    ("tile", re.compile(r"^T\.tile\.")),
    ("with", re.compile(r"^with .*:$")),
)


def _classify(line: str) -> tuple[str, list[str]]:
    text = line.strip()
    if not text or text.startswith("#"):
        return "blank", []
    for kind, pattern in _PATTERNS:
        match = pattern.match(text)
        if match:
            names = [n.strip() for n in match.group(1).split(",")] if match.groups() else []
            return kind, names
    return "leaf", []


def _same_name(printed: str, ir_name: str | None) -> bool:
    # The printer renames a repeated name `k` to `k_1`, `k_2`, ...
    return ir_name is None or printed == ir_name or re.sub(r"_\d+$", "", printed) == ir_name


def script_lines(
    func, source=None, tile_op_lines: list[int] | None = None
) -> tuple[str, dict[int, list[int]]]:
    """The displayed TVMScript of `func` and `{user line: [displayed lines]}`
    (1-based; empty without `source`).

    `source` is the kernel's `KernelSource` (`.filename`, `.first_line`, `.tree`); `tile_op_lines` the user
    lines of the tile ops in order (default: the function's `tile_nb.tile_op_lines` attribute).
    """
    raw = func.script()
    shown, where = clean_lines(raw)
    user = _Source.of(source) if source is not None else None
    if user is None:
        return "\n".join(shown), {}
    if tile_op_lines is None:
        tile_op_lines = _tile_op_lines(func)
    statements = _ir_statements(func, user.filename, tile_op_lines)
    by_kind: dict[str, list[_Stmt]] = defaultdict(list)
    for s in statements:
        by_kind[s.kind].append(s)

    printed: list[tuple[int, str, list[str]]] = []  # (raw index, kind, names)
    for index, line in enumerate(raw.split("\n")):
        kind, names = _classify(line)
        if where[index] is not None and kind not in ("blank", "attr"):
            printed.append((index, kind, names))

    # A `for i, j in T.grid(...)` line prints several loops: count loops, not lines.
    counts: dict[str, int] = defaultdict(int)
    for _, kind, names in printed:
        counts[kind] += len(names) if kind == "for" else 1
    mapping: dict[int, set[int]] = defaultdict(set)

    def add(user_line: int | None, index: int) -> None:
        if user_line is not None and where[index] is not None:
            mapping[user_line].add(where[index])

    queues = {kind: list(items) for kind, items in by_kind.items() if counts.get(kind, 0) == len(items)}
    for index, kind, names in printed:
        if kind == "decorator":
            for n in user.decorator_lines:
                add(n, index)
        elif kind == "def":
            add(user.def_line, index)
            for name, n in user.param_lines.items():
                if re.search(rf"\b{re.escape(name)}: ", raw.split("\n")[index]):
                    add(n, index)
        elif kind == "vars":
            for name in names:
                lines = user.binding("assign", name)
                add(lines[0] if lines else None, index)
        elif kind in queues:
            for name in (names or [None]):
                if not queues[kind]:
                    break
                stmt = queues[kind].pop(0)
                if name is not None and not _same_name(name, stmt.name):
                    queues.pop(kind)  # out of step: map nothing more of this kind
                    break
                for n in _user_lines(stmt, user):
                    add(n, index)
    return "\n".join(shown), {k: sorted(v) for k, v in sorted(mapping.items())}



def _tile_op_lines(func) -> list[int]:
    """The user lines of the tile ops, in order (the front end's `tile_nb.tile_op_lines` attribute)."""
    attrs = getattr(func, "attrs", None) or {}
    return [int(n) for n in attrs.get("tile_nb.tile_op_lines", [])] if attrs else []


def _user_lines(stmt: _Stmt, user: _Source) -> set[int]:
    """The user lines an IR statement came from."""
    if stmt.kind in ("leaf", "tile"):
        return set(stmt.lines)
    if stmt.kind in ("for", "while", "if", "else"):
        kind = "if" if stmt.kind == "else" else stmt.kind
        line = user.enclosing(kind, stmt.name if kind == "for" else None, stmt.below)
        if line is None and stmt.name is not None:
            candidates = user.binding(kind, stmt.name)
            line = candidates[0] if len(candidates) == 1 else None
        return {line} if line is not None else set()
    if stmt.kind == "launch":
        line = user.enclosing("launch", stmt.name, stmt.below) or user.enclosing("launch", None, stmt.below)
        if line is None:
            candidates = user.binding("launch", stmt.name or "")
            line = candidates[0] if len(candidates) == 1 else None
        return {line} if line is not None else set()
    if stmt.kind in ("alloc", "decl"):
        candidates = user.binding("assign", stmt.name or "")
        return {candidates[0]} if len(candidates) == 1 else set()
    return set()


def region_line_map(
    func, source, regions: dict | None, tile_op_lines: list[int] | None = None
) -> dict[int, list[int]]:
    """`{user line: [lines of a compiled text]}` from a compiled kernel's `source_regions[text]` (region id ->
    lines), for the phase-2 `func` it was compiled from. A `T.Parallel` loop is one region: all the lines of
    its body map to it; other regions map from their own line (a loop from its
    `for`, a tile op from its call).
    """
    from tile_nb.lower.sourcemap import source_regions

    user = _Source.of(source) if source is not None else None
    if user is None or not regions:
        return {}
    if tile_op_lines is None:
        tile_op_lines = _tile_op_lines(func)
    statements: dict = {}
    for stmt in _ir_statements(func, user.filename, tile_op_lines):
        if stmt.kind != "else":
            statements.setdefault(stmt.node, stmt)
    mapping: dict[int, set[int]] = defaultdict(set)
    for region, node in enumerate(source_regions(func)):
        lines = regions.get(region)
        stmt = statements.get(node)
        if not lines or stmt is None:
            continue
        users = _user_lines(stmt, user)
        if _is_parallel_loop(node):
            users |= stmt.below
        for n in users:
            mapping[n].update(int(x) for x in lines)
    return {k: sorted(v) for k, v in sorted(mapping.items())}


def _is_parallel_loop(node) -> bool:
    from tvm import tirx

    return isinstance(node, tirx.For) and node.kind == tirx.ForKind.PARALLEL
