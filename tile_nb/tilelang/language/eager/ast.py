"""tilelang's eager builder protocol (`tilelang.language.eager.ast`), as tile_nb's own code.

`mutate(fn)` rewrites `fn`'s body so that what Python does by itself goes through the hooks of a builder, and
`mutate(fn).gen(builder)` is the rewritten function bound to `builder`:

    arguments         a = builder.arg("a", a)              (every parameter, *args and **kwargs included)
    name reads        builder.rval("x", x)
    x = v             x = builder.bind("x", v)             (x: ann = v: builder.bind("x", v, ann))
    a[i] = v          builder.assign_slice(a, i, v)
    p, q = v          temporaries = builder.unwrap_value(v), then each target as above
    x += v            x = builder.aug_assign("Add", x, v, name="x");  a[i] += v: builder.aug_assign_slice(...)
    if c: ... else    for k in builder.ctx_if(c): for _ in builder.ctx_then(k): ...; for _ in ctx_else(k): ...
    for i in it       for t in builder.ctx_for(it): i = builder.bind("i", t); ...
    while c           for _ in builder.ctx_while(lambda: c): ...
    break / continue  if builder.ctx_break(): break  (ctx_continue likewise)
    with m            with builder.ctx_with(m)
    a and b, not a    builder.boolop("And", a, lambda: b), builder.boolop("Not", a)
    a < b < c         a < b and b < c (where reading b twice is harmless: a name or a constant)
    a if c else b     builder.ifexp(c, lambda: a, lambda: b)
    return v          return builder.ret(v)
    expression stmt   builder.eval(e)
    assert c, m       builder.assert_expr(c, m)
    each statement    builder.set_fileline(file, line, function name) before it
    range             builder.override("range")

`BaseBuilder`'s hooks do what Python does, so with it the rewritten function behaves as `fn` (break and
continue under an `if`, whose branches become loops of the builder's, still leave the user's loop: the rewrite
carries them out through flags). A builder subclasses it and overrides what it builds. Nested functions,
lambdas, comprehensions and class bodies are left as written. Closure variables are read when `mutate` runs.
"""
from __future__ import annotations

import ast
import builtins
import operator
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ....frontend.source import get_source

__all__ = ["BaseBuilder", "IRGenerator", "mutate"]

OPERATORS: dict[str, Callable[[Any, Any], Any]] = {
    "Add": operator.add, "Sub": operator.sub, "Mult": operator.mul, "MatMult": operator.matmul,
    "Div": operator.truediv, "Mod": operator.mod, "Pow": operator.pow, "LShift": operator.lshift,
    "RShift": operator.rshift, "BitOr": operator.or_, "BitXor": operator.xor, "BitAnd": operator.and_,
    "FloorDiv": operator.floordiv,
}
IN_PLACE: dict[str, Callable[[Any, Any], Any]] = {
    "Add": operator.iadd, "Sub": operator.isub, "Mult": operator.imul, "MatMult": operator.imatmul,
    "Div": operator.itruediv, "Mod": operator.imod, "Pow": operator.ipow, "LShift": operator.ilshift,
    "RShift": operator.irshift, "BitOr": operator.ior, "BitXor": operator.ixor, "BitAnd": operator.iand,
    "FloorDiv": operator.ifloordiv,
}


class _Empty:
    """What `bind` receives for an annotated name with no value (`x: T.int32`)."""


class BaseBuilder:
    """The builder whose hooks do what Python does; subclass it and override the hooks you build with."""

    empty = _Empty

    def override(self, name: str) -> Any:
        return getattr(builtins, name)

    def set_fileline(self, filename: str, lineno: int, name: str) -> None:
        pass

    def arg(self, name: str, value: Any) -> Any:
        return value

    def rval(self, name: str, value: Any) -> Any:
        return value

    def bind(self, name: str, value: Any, annot: Any = empty) -> Any:
        return value

    def unwrap_value(self, value: Any) -> Any:
        return value

    def assign_slice(self, target: Any, index: Any, value: Any, annot: Any = empty) -> None:
        target[index] = value

    def aug_assign(self, op: str, target: Any, value: Any, name: str | None = None) -> Any:
        return IN_PLACE[op](target, value)

    def aug_assign_slice(self, op: str, target: Any, index: Any, value: Any) -> None:
        target[index] = IN_PLACE[op](target[index], value)

    def boolop(self, op: str, left: Any, right: Callable[[], Any] | None = None) -> Any:
        if op == "And":
            return left and right()
        if op == "Or":
            return left or right()
        if op == "Not":
            return not left
        raise ValueError(f"boolop: op must be 'And', 'Or' or 'Not', got {op!r}")

    def ifexp(self, cond: Any, then: Callable[[], Any], otherwise: Callable[[], Any]) -> Any:
        return then() if cond else otherwise()

    def ctx_if(self, cond: Any) -> Iterable[Any]:
        yield cond

    def ctx_then(self, cond: Any) -> Iterable[None]:
        if cond:
            yield

    def ctx_else(self, cond: Any) -> Iterable[None]:
        if not cond:
            yield

    def ctx_for(self, iterable: Iterable[Any]) -> Iterable[Any]:
        return iterable

    def ctx_while(self, cond: Callable[[], Any]) -> Iterable[None]:
        while cond():
            yield

    def ctx_break(self) -> bool:
        return True

    def ctx_continue(self) -> bool:
        return True

    def ctx_with(self, manager: Any) -> Any:
        return manager

    def eval(self, value: Any) -> None:
        pass

    def ret(self, value: Any) -> Any:
        return value

    def assert_expr(self, cond: Any, msg: Any = None) -> None:
        if not cond:
            raise AssertionError(msg) if msg is not None else AssertionError


@dataclass
class IRGenerator:
    """`gen(builder)` is the rewritten function bound to `builder`; `source` is its text; `extra_type_hints`
    the in-body annotations of parameters (`A: T.Tensor[...]` with no value) that evaluate."""

    gen: Callable[[BaseBuilder], Callable[..., Any]]
    source: str
    extra_type_hints: dict[str, Any] = field(default_factory=dict)


def mutate(func: Callable[..., Any]) -> IRGenerator:
    """Rewrite `func` for a builder (module docstring). Raises SourceNotFoundError where its source is not
    available (as for a kernel), TypeError for an `async def`."""
    source = get_source(func)
    tree = source.tree
    if isinstance(tree, ast.AsyncFunctionDef):
        raise TypeError(f"mutate: {func.__qualname__} is an async function; the builder protocol rewrites "
                        "plain functions")
    closure = _closure_values(func)
    hints = _parameter_hints(tree, func.__globals__, closure)
    _add_filelines(tree, source.first_line - 1)
    tree = _Rewriter().visit(tree)
    tree.decorator_list = []
    module = _module(tree, list(closure), source.filename)
    ast.increment_lineno(module, source.first_line - 1)
    _shift_columns(module, source.indent)
    namespace: dict[str, Any] = {}
    exec(compile(module, source.filename, "exec"), func.__globals__, namespace)  # noqa: S102 - the rewrite
    gen = namespace["__tb_make"](**closure)
    return IRGenerator(gen=gen, source=ast.unparse(module), extra_type_hints=hints)


def _shift_columns(tree: ast.AST, indent: int) -> None:
    """Columns of the dedented source back to the file's (a node can sit at two places of the rewrite)."""
    seen = set()
    for node in ast.walk(tree):
        if id(node) in seen or getattr(node, "col_offset", None) is None:
            continue
        seen.add(id(node))
        node.col_offset += indent
        if getattr(node, "end_col_offset", None) is not None:
            node.end_col_offset += indent


def _closure_values(func) -> dict[str, Any]:
    values = {}
    for name, cell in zip(func.__code__.co_freevars, func.__closure__ or (), strict=True):
        try:
            values[name] = cell.cell_contents
        except ValueError:  # a cell not assigned yet: the name stays unbound, as it would be in `func`
            pass
    return values


def _parameter_hints(tree: ast.FunctionDef, globals_: dict, closure: dict) -> dict[str, Any]:
    params = {a.arg for a in _parameters(tree.args)}
    hints = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.AnnAssign) and stmt.value is None and isinstance(stmt.target, ast.Name) \
                and stmt.target.id in params:
            try:
                hints[stmt.target.id] = eval(compile(ast.Expression(stmt.annotation), "<annotation>", "eval"),  # noqa: S307
                                             globals_, dict(closure))
            except Exception:  # noqa: BLE001 - a hint that does not evaluate here is left to the builder
                continue
    return hints


def _parameters(args: ast.arguments) -> list[ast.arg]:
    return [*args.posonlyargs, *args.args, *([args.vararg] if args.vararg else []), *args.kwonlyargs,
            *([args.kwarg] if args.kwarg else [])]


def _module(func: ast.FunctionDef, freevars: list[str], filename: str) -> ast.Module:
    """def __tb_make(<closure>): def __tb_gen(__tb): <file, name, range>; <func>; return <func>"""
    outer = ast.parse(
        f"def __tb_make({', '.join(freevars)}):\n"
        "    def __tb_gen(__tb):\n"
        f"        __tb_file = {filename!r}\n"
        f"        __tb_func = {func.name!r}\n"
        "        range = __tb.override('range')\n"
        "        FUNC\n"
        f"        return {func.name}\n"
        "    return __tb_gen\n")
    for node in ast.walk(outer):  # the wrapper's lines are the def's
        ast.copy_location(node, func)
    outer.body[0].body[0].body[3] = func
    return outer


_NOT_REWRITTEN = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda, ast.ListComp, ast.SetComp,
                  ast.DictComp, ast.GeneratorExp)


def _add_filelines(func: ast.FunctionDef, line_offset: int) -> None:
    """`__tb.set_fileline(__tb_file, line, __tb_func)` before every statement of the body (not of nested
    functions), marked so that the rewrite leaves them alone."""

    def mark(stmts: list[ast.stmt]) -> list[ast.stmt]:
        out = []
        for stmt in stmts:
            call = _expr(f"__tb.set_fileline(__tb_file, {stmt.lineno + line_offset}, __tb_func)", stmt)
            call.tb_generated = True
            out += [call, stmt]
            if not isinstance(stmt, _NOT_REWRITTEN):
                for name, value in ast.iter_fields(stmt):
                    if isinstance(value, list) and value and isinstance(value[0], ast.stmt):
                        setattr(stmt, name, mark(value))
                    elif name == "handlers":
                        for handler in value:
                            handler.body = mark(handler.body)
                    elif name == "cases":
                        for case in value:
                            case.body = mark(case.body)
        return out

    func.body = mark(func.body)


def _expr(code: str, where: ast.AST) -> ast.stmt:
    """One statement of generated code, placed at `where`."""
    return _template(code, where)[0]


def _template(code: str, where: ast.AST, **subs: ast.AST | list[ast.stmt] | None) -> list[ast.stmt]:
    """`code` parsed and placed at `where`, each Name in `subs` replaced by its expression, and each statement
    that is only such a Name by its statements."""
    stmts = ast.parse(code).body
    for stmt in stmts:
        for node in ast.walk(stmt):
            ast.copy_location(node, where)

    class Fill(ast.NodeTransformer):
        def visit_Expr(self, node):
            if isinstance(node.value, ast.Name) and isinstance(subs.get(node.value.id), list):
                return subs[node.value.id]
            return self.generic_visit(node)

        def visit_Name(self, node):
            sub = subs.get(node.id)
            return sub if isinstance(sub, ast.AST) else node

    filled = []
    for stmt in stmts:
        result = Fill().visit(stmt)
        filled += result if isinstance(result, list) else [result]
    return filled


def _template_expr(code: str, where: ast.AST, **subs: ast.AST) -> ast.expr:
    return _template(code, where, **subs)[0].value


@dataclass
class _Loop:
    """A loop of the user's: how many `if` wrappers deep the rewrite is inside it, and the flags that carry a
    break or continue out of those wrappers."""

    wrappers: int = 0
    break_flag: str | None = None
    continue_flag: str | None = None


class _Rewriter(ast.NodeTransformer):
    def __init__(self):
        self.count = 0
        self.loops: list[_Loop] = []
        self.outer: ast.FunctionDef | None = None

    def temp(self, kind: str = "t") -> str:
        self.count += 1
        return f"__tb_{kind}{self.count}"

    # -- the function ---------------------------------------------------------------------------------
    def visit_FunctionDef(self, node: ast.FunctionDef):
        if self.outer is not None:  # nested: left as written
            return node
        self.outer = node
        node.body = self.body(node.body)
        binds = [_expr(f"{a.arg} = __tb.arg({a.arg!r}, {a.arg})", a) for a in _parameters(node.args)]
        node.body = binds + node.body
        return node

    def visit_Lambda(self, node):
        return node

    visit_ClassDef = visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = visit_Lambda
    visit_AsyncFunctionDef = visit_Lambda

    def body(self, stmts: list[ast.stmt]) -> list[ast.stmt]:
        out = []
        for stmt in stmts:
            result = self.visit(stmt)
            out += result if isinstance(result, list) else [result]
        return out

    # -- expressions ----------------------------------------------------------------------------------
    def visit_Name(self, node: ast.Name):
        if isinstance(node.ctx, ast.Load) and not node.id.startswith("__tb"):
            return _template_expr(f"__tb.rval({node.id!r}, NODE)", node, NODE=node)
        return node

    def visit_BoolOp(self, node: ast.BoolOp):
        for value in node.values[1:]:
            _no_walrus(value, "the right operand of and / or")
        self.generic_visit(node)
        op = type(node.op).__name__
        result = node.values[-1]
        for left in reversed(node.values[:-1]):
            result = _template_expr(f"__tb.boolop({op!r}, LEFT, lambda: RIGHT)", node,
                                    LEFT=left, RIGHT=result)
        return result

    def visit_UnaryOp(self, node: ast.UnaryOp):
        self.generic_visit(node)
        if isinstance(node.op, ast.Not):
            return _template_expr("__tb.boolop('Not', OPERAND)", node, OPERAND=node.operand)
        return node

    def visit_Compare(self, node: ast.Compare):
        self.generic_visit(node)
        middle = node.comparators[:-1]
        # a < b < c reads b once; split only where reading a middle operand twice is harmless
        if not middle or not all(isinstance(m, (ast.Name, ast.Constant)) or _is_rval(m) for m in middle):
            return node
        parts, left = [], node.left
        for op, right in zip(node.ops, node.comparators, strict=True):
            parts.append(ast.copy_location(ast.Compare(left=left, ops=[op], comparators=[right]), node))
            left = right
        result = parts[-1]
        for part in reversed(parts[:-1]):
            result = _template_expr("__tb.boolop('And', LEFT, lambda: RIGHT)", node, LEFT=part, RIGHT=result)
        return result

    def visit_IfExp(self, node: ast.IfExp):
        _no_walrus(node.body, "a branch of x if c else y")
        _no_walrus(node.orelse, "a branch of x if c else y")
        self.generic_visit(node)
        return _template_expr("__tb.ifexp(COND, lambda: THEN, lambda: ELSE)", node,
                              COND=node.test, THEN=node.body, ELSE=node.orelse)

    # -- statements -----------------------------------------------------------------------------------
    def visit_Expr(self, node: ast.Expr):
        if getattr(node, "tb_generated", False):
            return node
        self.generic_visit(node)
        return _template("__tb.eval(VALUE)", node, VALUE=node.value)

    def visit_Return(self, node: ast.Return):
        self.generic_visit(node)
        value = node.value or ast.copy_location(ast.Constant(None), node)
        return _template("return __tb.ret(VALUE)", node, VALUE=value)

    def visit_Assert(self, node: ast.Assert):
        self.generic_visit(node)
        msg = node.msg or ast.copy_location(ast.Constant(None), node)
        return _template("__tb.assert_expr(COND, MSG)", node, COND=node.test, MSG=msg)

    def visit_With(self, node: ast.With):
        self.generic_visit(node)
        for item in node.items:
            item.context_expr = _template_expr("__tb.ctx_with(MANAGER)", item.context_expr,
                                               MANAGER=item.context_expr)
        return node

    def visit_Assign(self, node: ast.Assign):
        self.generic_visit(node)
        if len(node.targets) == 1:
            return self.assign(node.targets[0], node.value, node)
        first = self.temp()
        stmts = [_expr(f"{first} = 0", node)]
        stmts[0].value = node.value
        for target in node.targets:
            stmts += self.assign(target, _load(first, node), node)
        return stmts

    def visit_AnnAssign(self, node: ast.AnnAssign):
        self.generic_visit(node)
        target = node.target
        if node.value is not None:
            return self.assign(target, node.value, node, node.annotation)
        if not isinstance(target, ast.Name):
            return node
        bound = self.temp()
        return _template(f"{bound} = __tb.bind({target.id!r}, __tb.empty, ANNOT)\n"
                         f"if {bound} is not __tb.empty:\n    {target.id} = {bound}",
                         node, ANNOT=node.annotation)

    def visit_AugAssign(self, node: ast.AugAssign):
        self.generic_visit(node)
        op = type(node.op).__name__
        target = node.target
        if isinstance(target, ast.Name):
            return _template(f"{target.id} = __tb.aug_assign({op!r}, {target.id}, VALUE, name={target.id!r})",
                             node, VALUE=node.value)
        if isinstance(target, ast.Subscript):
            return _template(f"__tb.aug_assign_slice({op!r}, OBJ, INDEX, VALUE)", node,
                             OBJ=target.value, INDEX=target.slice, VALUE=node.value)
        return node

    def assign(self, target: ast.expr, value: ast.expr, where: ast.AST, annot: ast.expr | None = None):
        annot_arg = ", ANNOT" if annot is not None else ""
        if isinstance(target, ast.Name):
            return _template(f"{target.id} = __tb.bind({target.id!r}, VALUE{annot_arg})", where,
                             VALUE=value, ANNOT=annot)
        if isinstance(target, ast.Subscript):
            return _template(f"__tb.assign_slice(OBJ, INDEX, VALUE{annot_arg})", where,
                             OBJ=target.value, INDEX=target.slice, VALUE=value, ANNOT=annot)
        if isinstance(target, ast.Attribute):
            return [ast.copy_location(ast.Assign(targets=[target], value=value), where)]
        # a tuple or list of targets: unpack into temporaries as Python would, then assign each one
        pairs: list[tuple[str, ast.expr]] = []
        shape = self.temporaries(target, pairs)
        unpack = ast.copy_location(ast.Assign(targets=[shape], value=_template_expr(
            "__tb.unwrap_value(VALUE)", where, VALUE=value)), where)
        stmts = [unpack]
        for name, each in pairs:
            stmts += self.assign(each, _load(name, each), each)
        return stmts

    def temporaries(self, target: ast.expr, pairs: list) -> ast.expr:
        if isinstance(target, (ast.Tuple, ast.List)):
            elts = [self.temporaries(e, pairs) for e in target.elts]
            return ast.copy_location(ast.Tuple(elts=elts, ctx=ast.Store()), target)
        if isinstance(target, ast.Starred):
            inner = self.temporaries(target.value, pairs)
            return ast.copy_location(ast.Starred(value=inner, ctx=ast.Store()), target)
        name = self.temp()
        pairs.append((name, target))
        return ast.copy_location(ast.Name(id=name, ctx=ast.Store()), target)

    # -- control flow ---------------------------------------------------------------------------------
    def visit_If(self, node: ast.If):
        node.test = self.visit(node.test)
        loop = self.loops[-1] if self.loops else None
        if loop:
            loop.wrappers += 1
        then, orelse = self.body(node.body), self.body(node.orelse)
        if loop:
            loop.wrappers -= 1
        cond = self.temp("c")
        exits = self.exits(loop, node, inside=True)
        code = (f"for {cond} in __tb.ctx_if(TEST):\n"
                f"    for _ in __tb.ctx_then({cond}):\n        THEN\n    EXITS\n")
        if orelse:
            code += f"    for _ in __tb.ctx_else({cond}):\n        ELSE\n    EXITS\n"
        return _template(code, node, TEST=node.test, THEN=then, ELSE=orelse, EXITS=exits) \
            + self.exits(loop, node, inside=loop is not None and loop.wrappers > 0)

    def exits(self, loop: _Loop | None, where: ast.AST, inside: bool) -> list[ast.stmt]:
        """After a wrapper loop: leave the enclosing wrapper too (`inside`), or, at the user's loop, do the
        break or continue a flag carried out."""
        stmts = []
        if loop is None:
            return stmts
        if loop.break_flag:
            stmts += _template(f"if {loop.break_flag}:\n    break", where)
        if loop.continue_flag:
            stmts += _template(f"if {loop.continue_flag}:\n    {'break' if inside else 'continue'}", where)
        return stmts

    def visit_Break(self, node: ast.Break):
        return self.jump(node, "break")

    def visit_Continue(self, node: ast.Continue):
        return self.jump(node, "continue")

    def jump(self, node: ast.stmt, kind: str):
        loop = self.loops[-1] if self.loops else None
        if loop is None or loop.wrappers == 0:
            return _template(f"if __tb.ctx_{kind}():\n    {kind}", node)
        attr = f"{kind}_flag"
        if getattr(loop, attr) is None:
            setattr(loop, attr, self.temp("brk" if kind == "break" else "cnt"))
        return _template(f"if __tb.ctx_{kind}():\n    {getattr(loop, attr)} = True\n    break", node)

    def visit_For(self, node: ast.For):
        node.iter = self.visit(node.iter)
        node.target = self.visit(node.target)
        item = self.temp()
        bind = self.assign(node.target, _load(item, node.target), node.target)
        body, _ = self.loop_body(node.body, bind)
        orelse = self.body(node.orelse)
        return _template(f"for {item} in __tb.ctx_for(ITER):\n    BODY\nelse:\n    ELSE", node,
                         ITER=node.iter, BODY=body, ELSE=orelse or _template("pass", node))

    def visit_While(self, node: ast.While):
        _no_walrus(node.test, "a while condition")
        test = self.visit(node.test)
        body, _ = self.loop_body(node.body, [])
        orelse = self.body(node.orelse)
        return _template("for _ in __tb.ctx_while(lambda: TEST):\n    BODY\nelse:\n    ELSE", node,
                         TEST=test, BODY=body, ELSE=orelse or _template("pass", node))

    def loop_body(self, stmts: list[ast.stmt], prologue: list[ast.stmt]):
        self.loops.append(_Loop())
        body = self.body(stmts)
        loop = self.loops.pop()
        flags = [f for f in (loop.break_flag, loop.continue_flag) if f]
        resets = [_expr(f"{flag} = False", stmts[0]) for flag in flags]
        return resets + prologue + body, loop


def _load(name: str, where: ast.AST) -> ast.Name:
    return ast.copy_location(ast.Name(id=name, ctx=ast.Load()), where)


def _no_walrus(node: ast.expr, where: str) -> None:
    """Parts the rewrite passes as lambdas (a while condition, the lazy operands) would bind `x := v` in the
    lambda's scope, not the function's: refused rather than changed."""
    for inner in ast.walk(node):
        if isinstance(inner, ast.NamedExpr):
            raise SyntaxError(f"mutate: `{ast.unparse(inner)}` in {where} is not supported: the builder "
                              "protocol evaluates it in a lambda, where it would bind a different variable; "
                              "assign it in a statement before")


def _is_rval(node: ast.expr) -> bool:
    """`__tb.rval('x', x)`: a rewritten name read."""
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "rval" \
        and isinstance(node.func.value, ast.Name) and node.func.value.id == "__tb"
