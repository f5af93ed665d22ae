"""tilelang's eager builder protocol (`tilelang.language.eager.ast`: `mutate`, `BaseBuilder`), tile_nb's own.

With `BaseBuilder` the rewritten function must behave as the original (checked on control flow that the
rewrite turns into the builder's loops); a recording builder checks that each construct reaches its hook."""
from __future__ import annotations

import inspect
import traceback

import pytest

from tile_nb.tilelang.language.eager.ast import BaseBuilder, mutate


class RangeBuilder(BaseBuilder):  # the form of tilelang's own test builder
    def override(self, name):
        return range if name == "range" else super().override(name)

    def set_fileline(self, filename, lineno, name):
        pass


def test_varargs_and_kwargs_parameters():
    def first_arg(*args):
        return args[0]

    def get_kwarg(**kwargs):
        return kwargs["key"]

    assert mutate(first_arg).gen(RangeBuilder())("sentinel", "ignored") == "sentinel"
    assert mutate(get_kwarg).gen(RangeBuilder())(key="value") == "value"


def loops(n, stop):
    out, total = [], 0
    for i in range(n):
        if i % 2 == 0:
            if i == stop:
                break
            continue
        elif 5 < i < 9:
            total += i
        out.append(i)
    else:
        out.append("no break")
    k = 0
    while k < 4:
        k += 1
        for j in range(3):
            if j == k:
                break
            if j == 0:
                continue
            out.append((k, j))
        if k == 2:
            continue
        out.append(-k)
    else:
        out.append("while done")
    return out, total


def assignments(seq):
    a, (b, *rest) = seq[0], seq[1:]
    first = second = [0, 0]
    first[0] += a
    box = type("Box", (), {})()
    box.value = b
    box.value *= 2
    x: int = 7
    y: int
    y = x if a < b else -x
    table = {}
    table["k"], table["j"] = rest[:2] if len(rest) >= 2 else (None, None)
    return a, b, rest, first, second, box.value, y, table


def lazy_operators(a, b):
    calls = []

    def note(value):
        calls.append(value)
        return value

    both = note(a) and note(b)
    either = note(a) or note(b)
    chosen = note("then") if a else note("else")
    return both, either, chosen, not a, calls


def early_return(items, target):
    for index, item in enumerate(items):
        while True:
            if item == target:
                return index
            break
    try:
        assert target is not None, f"no target in {items}"
    except AssertionError as err:
        return str(err).splitlines()[0]  # (pytest adds its explanation to the original's message)
    with open(__file__) as handle:
        first = handle.readline()
    return first.startswith('"""')


@pytest.mark.parametrize("func, cases", [
    (loops, [(0, 0), (1, 0), (3, 2), (12, 100), (12, 6), (12, 10)]),
    (assignments, [([1, 2, 3, 4],), ([5, 2],), ([0, 9, 8, 7, 6],)]),
    (lazy_operators, [(0, 1), (1, 0), (2, 3), (0, 0)]),
    (early_return, [([1, 2, 3], 2), ([1, 2, 3], 7), ([], None), ([4], None)]),
])
def test_base_builder_keeps_python_semantics(func, cases):
    rewritten = mutate(func).gen(RangeBuilder())
    for args in cases:
        assert rewritten(*args) == func(*args), args


class Recorder(BaseBuilder):
    def __init__(self):
        self.events = []

    def set_fileline(self, filename, lineno, name):
        self.events.append(("line", lineno, name))

    def arg(self, name, value):
        self.events.append(("arg", name, value))
        return value

    def bind(self, name, value, annot=BaseBuilder.empty):
        self.events.append(("bind", name, value, annot))
        return 100 if name == "unset" else value

    def ctx_for(self, iterable):
        self.events.append(("for",))
        return reversed(list(iterable))  # the builder decides how a loop runs

    def ctx_if(self, cond):
        self.events.append(("if", cond))
        yield cond

    def eval(self, value):
        self.events.append(("eval", value))

    def ret(self, value):
        self.events.append(("ret", value))
        return value


def recorded(n):
    order = []
    unset: int
    for i in range(n):
        if i:
            order.append(i)
    "an expression statement"
    return order, unset  # noqa: F821 - unbound in plain Python; the Recorder's bind gives it a value


def test_hooks_see_each_construct():
    builder = Recorder()
    result = mutate(recorded).gen(builder)(3)
    assert result == ([2, 1], 100)  # ctx_for reversed the loop; bind gave the annotated name a value
    events = builder.events
    assert events[0] == ("arg", "n", 3)
    assert ("bind", "order", [2, 1], BaseBuilder.empty) in events
    assert ("bind", "unset", BaseBuilder.empty, int) in events
    assert [e[1] for e in events if e[0] == "bind" and e[1] == "i"] == ["i"] * 3
    assert [e[1] for e in events if e[0] == "if"] == [2, 1, 0]
    assert ("eval", "an expression statement") in events
    assert events[-1] == ("ret", ([2, 1], 100))
    lines, first = inspect.getsourcelines(recorded)
    body_lines = {first + k for k, text in enumerate(lines) if k and text.strip()}
    seen = {e[1] for e in events if e[0] == "line"}
    assert seen == body_lines and all(e[2] == "recorded" for e in events if e[0] == "line")


def test_closure_values_and_parameter_hints():
    scale = 3

    def scaled(x):
        x: int
        return x * scale

    generator = mutate(scaled)
    assert generator.gen(BaseBuilder())(5) == 15
    assert generator.extra_type_hints == {"x": int}
    assert "__tb.rval('scale', scale)" in generator.source


def test_errors_point_at_the_original_line():
    def fails(d):
        value = d["missing"]
        return value

    with pytest.raises(KeyError) as info:
        mutate(fails).gen(BaseBuilder())({})
    frame = info.traceback[-1]
    assert frame.lineno + 1 == fails.__code__.co_firstlineno + 1  # 0-based lineno: the `value = ...` line
    assert 'd["missing"]' in "".join(traceback.format_tb(info.tb))


def test_refusals():
    def walrus(xs):
        while (n := len(xs)) > 0:
            xs.pop()
        return n

    with pytest.raises(SyntaxError, match=r"`\(n := len\(xs\)\)` in a while condition"):
        mutate(walrus)

    async def coroutine():
        return 1

    with pytest.raises(TypeError, match="async function"):
        mutate(coroutine)
