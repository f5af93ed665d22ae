"""What a kernel's elaboration reads from its environment, found statically.

The body runs as plain Python when it is elaborated, so every global, closure cell, attribute and helper
function it reads can change the IR. A read is a root name (a global or a closure cell), the attribute chains
taken from it (`cfg.block`, `mod.CONST`, `Cls.attr`) and whether the root is also used as a whole (called,
indexed, passed on). The kernel's reads come from its AST at decoration (in-body annotations, which
elaboration runs, are not in the bytecode); a helper's from its bytecode, when a call first meets it.
`environment.py` keys what they read.
"""
from __future__ import annotations

import ast
import builtins
import dis
import types
from dataclasses import dataclass

__all__ = ["Read", "Reads", "kernel_reads", "code_reads"]


@dataclass(frozen=True)
class Read:
    """A root name and what is read through it."""

    name: str
    whole: bool  # the root itself is used (called, indexed, passed on), not only through attributes
    chains: tuple[tuple[str, ...], ...]  # attribute chains read from it: ('block',) for `cfg.block`
    site: tuple  # (filename, lineno, col, end_col) of its first read, for errors


@dataclass(frozen=True)
class Reads:
    """The reads of one function body: of its globals, and of its closure cells (with the cell's index)."""

    globals: tuple[Read, ...]
    closure: tuple[tuple[int, Read], ...]


class _ReadSet:
    """Collects reads, merging those of one root."""

    def __init__(self):
        self.found: dict[tuple[str, str], list] = {}  # (scope, name) -> [whole, chains, site]

    def add(self, scope: str, name: str, chain: tuple[str, ...], site: tuple) -> None:
        entry = self.found.setdefault((scope, name), [False, [], site])
        if not chain:
            entry[0] = True
        elif chain not in entry[1]:
            entry[1].append(chain)

    def reads(self, freevars: tuple[str, ...]) -> Reads:
        made = {
            key: Read(key[1], whole, tuple(chains), site) for key, (whole, chains, site) in self.found.items()
        }
        return Reads(
            tuple(r for (scope, _), r in made.items() if scope == "global"),
            tuple((freevars.index(r.name), r) for (scope, _), r in made.items() if scope == "closure"),
        )


# -- finding the reads ---------------------------------------------------------------------------------------

def kernel_reads(body: list[ast.stmt], params: set[str], freevars: tuple[str, ...], globals_: dict,
                 filename: str, first_line: int, indent: int) -> Reads:
    """The reads of a kernel body (its AST: in-body annotations, which the elaboration runs,
    are not bytecode). Names the body assigns and its parameters are its own; names only
    found in builtins are not read."""
    local = set(params)
    for stmt in body:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
                local.add(node.id)
            elif isinstance(node, ast.arg):
                local.add(node.arg)
    found = _ReadSet()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.Attribute):
            chain, base = [], node
            while isinstance(base, ast.Attribute):
                chain.append(base.attr)
                base = base.value
            if isinstance(base, ast.Name):
                note(base, tuple(reversed(chain)))
            else:
                visit(base)
            return
        if isinstance(node, ast.Name):
            note(node, ())
            return
        for child in ast.iter_child_nodes(node):
            visit(child)

    def note(node: ast.Name, chain: tuple[str, ...]) -> None:
        name = node.id
        if name in local or (name not in freevars and name not in globals_ and hasattr(builtins, name)):
            return
        site = (filename, first_line + node.lineno - 1, indent + node.col_offset,
                indent + (node.end_col_offset or node.col_offset))
        found.add("closure" if name in freevars else "global", name, chain, site)

    for stmt in body:
        visit(stmt)
    for name in freevars:  # a cell the AST does not show (a compiler-made `__class__`) is keyed whole
        if ("closure", name) not in found.found:
            found.add("closure", name, (), (filename, first_line, None, None))
    return found.reads(freevars)


def code_reads(code: types.CodeType) -> Reads:
    """The reads of a helper's bytecode, nested lambdas and comprehensions included (bytecode, because a
    helper defined by exec or in a notebook may have no findable source)."""
    found = _ReadSet()
    _scan_code(code, code.co_freevars, found)
    return found.reads(code.co_freevars)


_ATTRIBUTE_OPS = {"LOAD_ATTR", "LOAD_METHOD"}
_GLOBAL_OPS = {"LOAD_GLOBAL", "LOAD_NAME"}
_CELL_OPS = {"LOAD_DEREF", "LOAD_CLASSDEREF"}


def _scan_code(code: types.CodeType, freevars: tuple[str, ...], found: _ReadSet) -> None:
    """A load of a global or of one of the helper's closure cells, followed by
    attribute loads, is one chain."""
    chain = None  # [scope, name, attrs, site]
    # Python 3.10's instructions have no positions: the line they start is kept
    line_now = code.co_firstlineno
    for ins in dis.get_instructions(code):
        if type(ins.starts_line) is int:  # an int before 3.13 (a bool from 3.13 on, with positions beside it)
            line_now = ins.starts_line
        if ins.opname in _ATTRIBUTE_OPS and chain is not None:
            chain[2].append(ins.argval)
            continue
        if chain is not None:
            found.add(chain[0], chain[1], tuple(chain[2]), chain[3])
            chain = None
        scope = "global" if ins.opname in _GLOBAL_OPS else \
            "closure" if ins.opname in _CELL_OPS and ins.argval in freevars else None
        if scope is not None:
            pos = getattr(ins, "positions", None)
            line = (pos.lineno if pos is not None else None) or line_now
            site = (
                code.co_filename,
                line,
                getattr(pos, "col_offset", None),
                getattr(pos, "end_col_offset", None),
            )
            chain = [scope, ins.argval, [], site]
    if chain is not None:
        found.add(chain[0], chain[1], tuple(chain[2]), chain[3])
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            _scan_code(const, freevars, found)  # its cells named like the helper's are the helper's


