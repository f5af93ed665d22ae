"""AST rewrite of a kernel body, so that running it builds IR.

Python runs the rewritten body (that is how compile-time parameters stay plain Python); the
rewrite routes the few constructs whose meaning differs in a kernel through the helper object
`__tnb__` (`frontend.elaborate.Hooks`):

    A: T.Tensor[[M, K], T.float16]   ->  A = __tnb__.annotate('A', T.Tensor[[M, K], T.float16], <A>)
    x = expr                         ->  x = __tnb__.bind('x', expr)   (names IR buffers after the user; a
                                         value read from memory in a kernel is bound where it is assigned,
                                         as in tilelang: a later store does not change x)
    a, b = u, v                      ->  a, b = __tnb__.bind('a', u), __tnb__.bind('b', v)
    x += v                           ->  x = __tnb__.bind('x', x + v)
    buf[i, j] = v  /  buf[i] += v    ->  __tnb__.store(buf, (i, j), v)
    for i in it: body                ->  with __tnb__.loop(it, ('i',)) as _it: for i in _it: body
    if c: a else: b                  ->  IR If/Then/Else when c is an IR expression, else plain Python
    while c: body                    ->  IR While when c is an IR expression (re-evaluated before every
                                         iteration, on the GPU too), else Python's own loop
    a and b / a or b / not a         ->  __tnb__.logic('and', lambda: a, lambda: b) / ... / __tnb__.negate(a)
    a if c else b                    ->  __tnb__.choose(c, lambda: a, lambda: b)
    a < b < c                        ->  __tnb__.logic('and', lambda: a < b, lambda: b < c)
  (IR expressions get IR And/Or/Not/Select; Python values keep Python's short-circuit semantics. Without
  this, `i == 0 and j < 2` on IR values silently dropped `j < 2`: `i == 0` is a structural comparison, falsy
  in Python.)
    with K as (bx, by)               ->  with __tnb__.enter(K, ('bx', 'by')) as (bx, by)
    return v                         ->  return __tnb__.ret(v)   (in a T.macro: __tnb__.macro_return(v))
    assert c, msg                    ->  __tnb__.check(c, msg, 'c')   (checked once consts are known)
    x = v  (x: T.Ref in a T.macro)   ->  __tnb__.store_ref(x, v)          (stores where the caller's x points)
    x = T.alloc_var(dt); x = v; y = x  ->  x = __tnb__.assign_var('x', v, <x>); y = __tnb__.read_var(x)
                                         (a kernel variable by name, as in tilelang: `x = v` stores,
                                          `x` loads)

Each statement is preceded by `__tnb__.at(line, col, end_col)` so IR and errors point at the user's line. Line
numbers of the rewritten code are those of the user's file, so Python tracebacks show the user's lines too.
"""
from __future__ import annotations

import ast
import copy
import itertools

from ..errors import UnsupportedSyntaxError
from .source import KernelSource

__all__ = ["rewrite_kernel", "HOOKS_NAME", "FACTORY_NAME"]

HOOKS_NAME = "__tnb__"
FACTORY_NAME = "__tnb_factory__"

_UNSUPPORTED = {
    ast.Try: "`try` blocks are not supported in kernels",
    ast.AsyncFor: "`async for` is not supported in kernels",
    ast.AsyncWith: "`async with` is not supported in kernels",
    ast.Global: "`global` is not supported in kernels; read module globals directly",
    ast.Nonlocal: "`nonlocal` is not supported in kernels",
    ast.Delete: "`del` is not supported in kernels",
    ast.FunctionDef: "functions defined inside a kernel are not supported; define helpers outside the kernel",
    ast.AsyncFunctionDef: "functions defined inside a kernel are not supported",
    ast.ClassDef: "classes defined inside a kernel are not supported",
}
if hasattr(ast, "TryStar"):
    _UNSUPPORTED[ast.TryStar] = "`try` blocks are not supported in kernels"


def _hook(method: str, *args: ast.expr) -> ast.Call:
    return ast.Call(ast.Attribute(ast.Name(HOOKS_NAME, ast.Load()), method, ast.Load()), list(args), [])


def _const(value) -> ast.Constant:
    return ast.Constant(value)


def _current(name: str) -> ast.Call:
    """`locals().get(name, __tnb__.UNSET)`: what a name is bound to now, if anything."""
    return ast.Call(ast.Attribute(ast.Call(ast.Name("locals", ast.Load()), [], []), "get", ast.Load()),
                    [_const(name), ast.Attribute(ast.Name(HOOKS_NAME, ast.Load()), "UNSET", ast.Load())], [])


def _lazy(expr: ast.expr) -> ast.Lambda:
    """`lambda: expr`: evaluated only if needed (Python's short-circuit semantics)."""
    args = ast.arguments(
        posonlyargs=[], args=[], vararg=None, kwonlyargs=[], kw_defaults=[], kwarg=None, defaults=[]
    )
    return ast.Lambda(args, expr)


def _stored_names(node: ast.AST, branches_only: bool = False) -> set[str]:
    """Names a statement assigns (for an `if` with `branches_only`, the names its branches assign)."""
    roots = node.body + node.orelse if branches_only else [node]
    return {n.id for root in roots for n in ast.walk(root)
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store) and not n.id.startswith("__tnb")}


def _is_ref(annotation: ast.expr | None) -> bool:
    """`T.Ref` (or `Ref`) as a parameter annotation."""
    return getattr(annotation, "attr", getattr(annotation, "id", None)) == "Ref"


def _carried_names(body: list[ast.stmt], bound_before: set[str]) -> list[str]:
    """Names bound before a loop that its body reads before it rebinds them (`acc = acc + x`, `acc += x`): a
    value meant to carry from one iteration to the next. In a kernel loop the body runs once while the kernel
    is built, so such a name would hold one iteration's expression, silently."""
    stored: set[str] = set()
    carried: list[str] = []

    def loads(node: ast.AST) -> None:
        for n in ast.walk(node):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id in bound_before \
                    and n.id not in stored and n.id not in carried and n.id in body_stores:
                carried.append(n.id)

    def stores(node: ast.AST) -> None:
        stored.update(
            n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
        )

    body_stores = {n.id for stmt in body for n in ast.walk(stmt) if isinstance(n, ast.Name)
                   and isinstance(n.ctx, ast.Store)}
    def visit(stmts: list[ast.stmt]) -> None:  # in execution order: an assignment's value before its target
        for stmt in stmts:
            if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
                if stmt.value is not None:
                    loads(stmt.value)
                for target in (stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]):
                    stores(target)
            elif isinstance(stmt, ast.AugAssign):
                if isinstance(stmt.target, ast.Name):
                    loads(ast.Name(stmt.target.id, ast.Load()))
                loads(stmt.value)
                stores(stmt.target)
            elif isinstance(stmt, ast.For):
                loads(stmt.iter)
                stores(stmt.target)
                visit(stmt.body)
            elif isinstance(stmt, ast.With):
                for item in stmt.items:
                    loads(item.context_expr)
                    if item.optional_vars is not None:
                        stores(item.optional_vars)
                visit(stmt.body)
            elif isinstance(stmt, ast.If):
                loads(stmt.test)
                visit(stmt.body)
                visit(stmt.orelse)
            else:
                loads(stmt)
                stores(stmt)

    visit(body)
    return carried


def _assigned_in_branches(node: ast.If) -> set[str]:
    """Names an `if`'s branches assign, not counting loop targets: `for i in T.Parallel(n)` in a
    branch makes a new loop variable (the name's old value is not what the loop reads), so
    rebinding `i` there is no leak."""
    names: set[str] = set()

    def visit(n: ast.AST) -> None:
        if isinstance(n, (ast.For, ast.comprehension)):
            for child in ast.iter_child_nodes(n):
                if child is not n.target:
                    visit(child)
            return
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store) and not n.id.startswith("__tnb"):
            names.add(n.id)
        for child in ast.iter_child_nodes(n):
            visit(child)

    for stmt in node.body + node.orelse:
        visit(stmt)
    return names


def _names_of(target: ast.expr) -> tuple[str, ...]:
    if isinstance(target, ast.Name):
        return (target.id,)
    if isinstance(target, (ast.Tuple, ast.List)):
        return tuple(e.id if isinstance(e, ast.Name) else "" for e in target.elts)
    return ()


class _LogicRewriter(ast.NodeTransformer):
    """Boolean logic and conditional expressions go through hooks: Python's `and`, `or`, `not` and `x if c
    else y` call bool() on their operands, which on an IR `==` is a structural comparison (silently False) and
    on `<` an error. Runs over the whole body before the statement rewrite."""

    def visit_BoolOp(self, node: ast.BoolOp):
        self.generic_visit(node)
        op = _const("and" if isinstance(node.op, ast.And) else "or")
        out = node.values[0]
        for value in node.values[1:]:
            out = _hook("logic", op, _lazy(out), _lazy(value))
        return ast.copy_location(out, node)

    def visit_UnaryOp(self, node: ast.UnaryOp):
        self.generic_visit(node)
        if isinstance(node.op, ast.Not):
            return ast.copy_location(_hook("negate", node.operand), node)
        return node

    def visit_IfExp(self, node: ast.IfExp):
        self.generic_visit(node)
        return ast.copy_location(_hook("choose", node.test, _lazy(node.body), _lazy(node.orelse)), node)

    def visit_Compare(self, node: ast.Compare):
        self.generic_visit(node)
        if len(node.ops) == 1:
            return node
        operands = [node.left] + node.comparators
        pairs = [ast.Compare(copy.deepcopy(operands[k]), [op], [copy.deepcopy(operands[k + 1])])
                 for k, op in enumerate(node.ops)]
        out = pairs[0]
        for pair in pairs[1:]:
            out = _hook("logic", _const("and"), _lazy(out), _lazy(pair))
        return ast.copy_location(out, node)


def _alloc_var_names(body: list[ast.stmt]) -> set[str]:
    """Names the body assigns a `T.alloc_var(...)` to: variables of the kernel, read and assigned by name as
    in tilelang (`x = T.alloc_var(T.int32)`, `x = 0`, `x += 1`, `A[i] = x`), besides `x[0]`."""
    return {
        stmt.targets[0].id
        for node in body
        for stmt in ast.walk(node)
        if isinstance(stmt, ast.Assign)
        and len(stmt.targets) == 1
        and isinstance(stmt.targets[0], ast.Name)
        and isinstance(stmt.value, ast.Call)
        and getattr(stmt.value.func, "attr", getattr(stmt.value.func, "id", None)) == "alloc_var"
    }


class _VarReads(ast.NodeTransformer):
    """A read of a kernel variable by name reads its value: `x` -> `__tnb__.read_var(x)`
    (`x[0]` of a T.alloc_var; anything else bound to the name is returned as it is). `x[0]`
    and `x.dtype` keep the buffer."""

    def __init__(self, names: set[str]):
        self.names = names

    def visit_Name(self, node: ast.Name):
        if isinstance(node.ctx, ast.Load) and node.id in self.names:
            return ast.copy_location(_hook("read_var", node), node)
        return node

    def visit_Subscript(self, node: ast.Subscript):
        if isinstance(node.value, ast.Name) and node.value.id in self.names:
            node.slice = self.visit(node.slice)
            return node
        return self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute):
        if isinstance(node.value, ast.Name) and node.value.id in self.names:
            return node
        return self.generic_visit(node)


class _BodyRewriter(ast.NodeTransformer):
    def __init__(self, source: KernelSource, macro: bool = False, var_names: frozenset = frozenset()):
        self.source = source
        self.var_names = var_names  # names bound to a T.alloc_var: `x = v` stores
        self.macro = macro  # a T.macro's body: its `return` gives a value back to the calling kernel code
        self.ids = itertools.count()
        args = source.tree.args
        self.bound = {a.arg for a in args.args + args.kwonlyargs}  # Python names bound so far
        # a macro's `x: T.Ref` parameters: `x = v` stores into the location the caller passed
        self.refs = {a.arg for a in args.args + args.kwonlyargs if macro and _is_ref(a.annotation)}

    def fail(self, node: ast.AST, message: str) -> UnsupportedSyntaxError:
        indent, lines = self.source.indent, self.source.first_line - 1
        end_col = (
            getattr(node, "end_col_offset", None)
            if getattr(node, "end_lineno", None) == node.lineno
            else None
        )
        return UnsupportedSyntaxError(
            message,
            filename=self.source.filename,
            lineno=node.lineno + lines,
            col=node.col_offset + indent,
            end_col=end_col + indent if end_col else None,
        )

    def fresh(self, stem: str) -> str:
        return f"__tnb_{stem}{next(self.ids)}"

    # Statement lists: every statement gets a location marker before it.
    def rewrite_block(self, stmts: list[ast.stmt]) -> list[ast.stmt]:
        out: list[ast.stmt] = []
        for stmt in stmts:
            self._rewrite_one(stmt, out)
            self.bound |= _stored_names(stmt)
        return out

    def _rewrite_one(self, stmt: ast.stmt, out: list[ast.stmt]) -> None:
        for kind, message in _UNSUPPORTED.items():
            if isinstance(stmt, kind):
                raise self.fail(stmt, message)
        # Markers carry positions in the user's file (the tree is relative to the dedented function text).
        indent, lines = self.source.indent, self.source.first_line - 1
        end_col = stmt.end_col_offset + indent if stmt.end_lineno == stmt.lineno else None
        marker = ast.Expr(_hook("at", _const(stmt.lineno + lines), _const(stmt.col_offset + indent),
                                _const(end_col)))
        out.append(ast.copy_location(marker, stmt))
        new = self.visit(stmt)
        out.extend(new if isinstance(new, list) else [new])

    def generic_visit(self, node):
        for field in ("body", "orelse", "finalbody"):
            value = getattr(node, field, None)
            if isinstance(value, list) and value and isinstance(value[0], ast.stmt):
                setattr(node, field, self.rewrite_block(value))
        return node

    def visit_AnnAssign(self, node: ast.AnnAssign):
        if not isinstance(node.target, ast.Name):
            raise self.fail(
                node, "annotations in a kernel must name a parameter, as in `A: T.Tensor[[M], T.float32]`"
            )
        name = node.target.id
        if node.value is not None:
            return ast.copy_location(ast.Assign([ast.Name(name, ast.Store())],
                                                _hook("bind", _const(name), node.value)), node)
        call = _hook("annotate", _const(name), node.annotation, _current(name))
        return ast.copy_location(ast.Assign([ast.Name(name, ast.Store())], call), node)

    def visit_Assign(self, node: ast.Assign):
        if (
            len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and node.targets[0].id in self.refs
        ):
            ref = ast.Name(node.targets[0].id, ast.Load())
            return ast.copy_location(ast.Expr(_hook("store_ref", ref, node.value)), node)
        if len(node.targets) == 1 and isinstance(node.targets[0], ast.Subscript):
            target = node.targets[0]
            return ast.copy_location(ast.Expr(_hook("store", target.value, target.slice, node.value)), node)
        if len(node.targets) == 1 and isinstance(node.targets[0], (ast.Tuple, ast.List)) \
                and any(isinstance(t, ast.Subscript) for t in node.targets[0].elts) \
                and isinstance(node.value, (ast.Tuple, ast.List)) \
                and len(node.value.elts) == len(node.targets[0].elts):
            return self._tuple_store(node)
        if len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            if name in self.var_names:
                node.value = _hook("assign_var", _const(name), node.value, _current(name))
            else:
                node.value = _hook("bind", _const(name), node.value)
        elif len(node.targets) == 1 and isinstance(node.targets[0], ast.Tuple) \
                and isinstance(node.value, ast.Tuple) and len(node.value.elts) == len(node.targets[0].elts) \
                and all(isinstance(t, ast.Name) and t.id not in self.var_names for t in node.targets[0].elts):
            # `a, b = X[i], X[j]`: each value bound as `a = X[i]` alone would be (all read before any is
            # assigned, as Python evaluates the whole right side first)
            node.value.elts = [_hook("bind", _const(t.id), v)
                               for t, v in zip(node.targets[0].elts, node.value.elts, strict=True)]
        return node

    def _tuple_store(self, node: ast.Assign) -> list:
        """`a[0], a[1] = a[1], a[0]`: Python reads every value before it assigns any; stores into memory are
        IR statements, so the values are bound first (`snapshot`), then each target is assigned in turn."""
        temp = f"__tnb_tuple_{node.lineno}_{node.col_offset}"
        values = ast.Assign([ast.Name(temp, ast.Store())], _hook("snapshot", *node.value.elts))
        out = [ast.copy_location(values, node)]
        for k, target in enumerate(node.targets[0].elts):
            item = ast.Subscript(ast.Name(temp, ast.Load()), ast.Constant(k), ast.Load())
            out.append(self.visit_Assign(ast.copy_location(ast.Assign([target], item), node)))
        return [ast.fix_missing_locations(x) for x in out]

    def visit_AugAssign(self, node: ast.AugAssign):
        if isinstance(node.target, ast.Name) and node.target.id in self.var_names:
            name = node.target.id
            value = ast.BinOp(_hook("read_var", ast.Name(name, ast.Load())), node.op, node.value)
            assign = ast.Assign(
                [ast.Name(name, ast.Store())], _hook("assign_var", _const(name), value, _current(name))
            )
            return ast.copy_location(assign, node)
        if isinstance(node.target, ast.Name) and node.target.id in self.refs:
            ref = ast.Name(node.target.id, ast.Load())
            value = ast.BinOp(ast.Name(node.target.id, ast.Load()), node.op, node.value)
            return ast.copy_location(ast.Expr(_hook("store_ref", ref, value)), node)
        if isinstance(node.target, ast.Name):  # `x += A[i]` binds as `x = x + A[i]` does
            name = node.target.id
            value = ast.BinOp(ast.Name(name, ast.Load()), node.op, node.value)
            assign = ast.Assign([ast.Name(name, ast.Store())], _hook("bind", _const(name), value))
            return ast.copy_location(assign, node)
        if isinstance(node.target, ast.Subscript):
            load = ast.Subscript(
                copy.deepcopy(node.target.value), copy.deepcopy(node.target.slice), ast.Load()
            )
            value = ast.BinOp(load, node.op, node.value)
            return ast.copy_location(
                ast.Expr(_hook("store", node.target.value, node.target.slice, value)), node
            )
        return node

    def visit_For(self, node: ast.For):
        if node.orelse:
            raise self.fail(node, "`for ... else` is not supported in kernels")
        iterable = node.iter
        if (
            isinstance(iterable, ast.Call)
            and isinstance(iterable.func, ast.Name)
            and iterable.func.id == "range"
        ):
            iterable = ast.Call(ast.Attribute(ast.Name(HOOKS_NAME, ast.Load()), "range", ast.Load()),
                                iterable.args, iterable.keywords)
        it_name = self.fresh("it")
        names = ast.Tuple([_const(n) for n in _names_of(node.target)], ast.Load())
        carried = _carried_names(node.body, self.bound - set(_names_of(node.target)) - self.var_names)
        body = self.rewrite_block(node.body)
        if carried:  # refused when the loop turns out to be a kernel loop (a Python loop carries them fine)
            guard = _hook("carried_in_loop", ast.Tuple([_const(n) for n in carried], ast.Load()),
                          _const(node.lineno + self.source.first_line - 1))
            body.insert(0, ast.copy_location(ast.Expr(guard), node))
        inner = ast.For(node.target, ast.Name(it_name, ast.Load()), body, [])
        with_item = ast.withitem(_hook("loop", iterable, names), ast.Name(it_name, ast.Store()))
        return ast.copy_location(ast.With([with_item], [ast.copy_location(inner, node)]), node)

    def visit_If(self, node: ast.If):
        bound_before = set(self.bound)
        cond_name = self.fresh("cond")
        body = self.rewrite_block(node.body)
        orelse = self.rewrite_block(node.orelse) if node.orelse else []
        assign = ast.Assign([ast.Name(cond_name, ast.Store())], _hook("condition", node.test))
        ir_body = [ast.With([ast.withitem(_hook("ir_then"))], copy.deepcopy(body))]
        if orelse:
            ir_body.append(ast.With([ast.withitem(_hook("ir_else"))], copy.deepcopy(orelse)))
        # A Python name bound before this `if` and rebound in it would keep the new value whatever the
        # run-time condition says: refused when the condition turns out to be an IR expression.
        leaks = sorted(
            n for n in _assigned_in_branches(node) if n in bound_before and n not in self.var_names
        )
        if leaks:
            guard = _hook("rebound_under_if", ast.Tuple([_const(n) for n in leaks], ast.Load()),
                          _const(node.lineno + self.source.first_line - 1))
            ir_body.insert(0, ast.Expr(guard))
        ir_branch = ast.With([ast.withitem(_hook("ir_if", ast.Name(cond_name, ast.Load())))], ir_body)
        py_branch = ast.If(ast.Name(cond_name, ast.Load()), body, orelse)
        dispatch = ast.If(_hook("is_ir", ast.Name(cond_name, ast.Load())), [ir_branch], [py_branch])
        return [ast.copy_location(assign, node), ast.copy_location(dispatch, node)]

    def visit_While(self, node: ast.While):
        if node.orelse:
            raise self.fail(node, "`while ... else` is not supported in kernels")
        if isinstance(node.test, ast.Constant) and node.test.value and \
                not any(isinstance(n, ast.Break) for stmt in node.body for n in ast.walk(stmt)):
            # a Python-level loop that never ends would hang the elaboration (a
            # notebook cell that never returns)
            raise self.fail(
                node,
                f"`while {node.test.value!r}:` with no `break` never ends: it would run forever "
                "while the kernel is built; loop over a range (`for i in T.serial(n)`) or test "
                "a value the body changes",
            )
        lineno = _const(node.lineno + self.source.first_line - 1)
        cond_name = self.fresh("cond")
        # Python names the IR loop would read each iteration (in its body, or in its condition) and its body
        # rebinds: the body is traced once, so the new binding would never reach the next test.
        body_stores = {n for stmt in node.body for n in _stored_names(stmt)}
        in_test = {
            n.id for n in ast.walk(node.test) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
        }
        candidates = self.bound - self.var_names
        carried = _carried_names(node.body, candidates)
        carried += sorted((in_test & body_stores & candidates) - set(carried))
        test = copy.deepcopy(node.test)
        body = self.rewrite_block(node.body)
        ir_body = copy.deepcopy(body)
        if carried:
            guard = _hook("carried_in_loop", ast.Tuple([_const(n) for n in carried], ast.Load()), lineno)
            ir_body.insert(0, ast.copy_location(ast.Expr(guard), node))
        assign = ast.Assign([ast.Name(cond_name, ast.Store())], _hook("condition", node.test))
        # `for _ in <one pass>` around the traced body, so that a `break` in it is still Python inside a loop
        # (the `jump` hook refuses it in a kernel loop before Python would run it)
        it_name = self.fresh("it")
        traced = ast.For(
            ast.Name(self.fresh("pass"), ast.Store()), ast.Name(it_name, ast.Load()), ir_body, []
        )
        ir_branch = ast.With([ast.withitem(_hook("ir_while", ast.Name(cond_name, ast.Load())),
                                           ast.Name(it_name, ast.Store()))], [traced])
        py_loop = ast.While(_hook("condition", test), body, [])
        py_branch = ast.With([ast.withitem(_hook("python_while"))], [py_loop])
        dispatch = ast.If(_hook("is_ir", ast.Name(cond_name, ast.Load()), _const("while")), [ir_branch],
                          [py_branch])
        return [ast.copy_location(assign, node), ast.copy_location(dispatch, node)]

    def visit_With(self, node: ast.With):
        for item in node.items:
            names = ast.Tuple(
                [_const(n) for n in _names_of(item.optional_vars)] if item.optional_vars else [], ast.Load()
            )
            item.context_expr = _hook("enter", item.context_expr, names)
        node.body = self.rewrite_block(node.body)
        return node

    def visit_Return(self, node: ast.Return):
        if self.macro:
            node.value = _hook("macro_return", node.value if node.value is not None else _const(None))
            return node
        node.value = _hook("ret", node.value if node.value is not None else _const(None))
        return node

    def visit_Assert(self, node: ast.Assert):
        text = ast.unparse(node.test)
        call = _hook("check", node.test, node.msg if node.msg is not None else _const(None), _const(text))
        return ast.copy_location(ast.Expr(call), node)

    def visit_Expr(self, node: ast.Expr):
        # a call written as a statement: `T.call_extern(...)` is evaluated for its effect (Hooks.expr_stmt)
        if isinstance(node.value, ast.Call):
            return ast.copy_location(ast.Expr(_hook("expr_stmt", node.value)), node)
        return node

    def visit_Break(self, node):
        return [ast.copy_location(ast.Expr(_hook("jump", _const("break"))), node), node]

    def visit_Continue(self, node):
        return [ast.copy_location(ast.Expr(_hook("jump", _const("continue"))), node), node]


def rewrite_kernel(source: KernelSource, free_vars: tuple[str, ...], macro: bool = False):
    """Compile the rewritten kernel into a factory `__tnb_factory__(__tnb__, *free_vars) -> function`.

    The factory takes the closure's values as parameters, so each elaboration sees their current values.
    `macro`: the body of a T.macro (its `return` stays Python's). Returns the code object of a module defining
    the factory.
    """
    tree = copy.deepcopy(source.tree)
    tree.decorator_list = []
    # Arguments are always passed explicitly, so defaults (already evaluated at
    # `def` time) are not re-evaluated.
    tree.args.defaults = []
    tree.args.kw_defaults = [None] * len(tree.args.kwonlyargs)
    for arg in tree.args.args + tree.args.kwonlyargs:
        arg.annotation = None
    tree.returns = None
    tree.body = [_LogicRewriter().visit(stmt) for stmt in tree.body]
    var_names = frozenset(_alloc_var_names(tree.body))
    if var_names:
        tree.body = [_VarReads(var_names).visit(stmt) for stmt in tree.body]
    tree.body = _BodyRewriter(source, macro, var_names).rewrite_block(tree.body)
    factory = ast.FunctionDef(
        name=FACTORY_NAME,
        args=ast.arguments(posonlyargs=[], args=[ast.arg(HOOKS_NAME)] + [ast.arg(v) for v in free_vars],
                           vararg=None, kwonlyargs=[], kw_defaults=[], kwarg=None, defaults=[]),
        body=[tree, ast.Return(ast.Name(tree.name, ast.Load()))],
        decorator_list=[], returns=None,
    )
    if hasattr(factory, "type_params"):  # Python >= 3.12
        factory.type_params = []
    module = ast.Module([factory], type_ignores=[])
    ast.fix_missing_locations(module)
    _shift(module, source.first_line - 1, source.indent)
    return compile(module, source.filename, "exec")


def _shift(tree: ast.AST, lines: int, cols: int) -> None:
    for node in ast.walk(tree):
        if hasattr(node, "lineno"):
            node.lineno += lines
            node.end_lineno = (node.end_lineno or node.lineno - lines) + lines
            node.col_offset += cols
            if getattr(node, "end_col_offset", None) is not None:
                node.end_col_offset += cols
