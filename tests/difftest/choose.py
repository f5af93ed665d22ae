"""Where the generator's choices come from: hypothesis (shrinkable, in the tests) or a seeded `random.Random`
(the command-line fuzzer, where a failure is named by its integer seed).

The grammar (`families/`) asks a `Chooser` for every choice, so one generator serves both.
"""
from __future__ import annotations

import random
from collections.abc import Sequence
from typing import TypeVar

__all__ = ["Chooser", "HypothesisChooser", "RandomChooser"]

X = TypeVar("X")


class Chooser:
    """The three questions a grammar asks. Earlier items of `choice` are preferred when hypothesis shrinks."""

    def choice(self, options: Sequence[X]) -> X:
        raise NotImplementedError

    def integer(self, lo: int, hi: int) -> int:
        """An int in [lo, hi] (both included)."""
        raise NotImplementedError

    def boolean(self) -> bool:
        return self.choice((False, True))

    def subset(self, options: Sequence[X], lo: int, hi: int) -> list[X]:
        """Between lo and hi distinct items of `options`, in their order."""
        count = self.integer(lo, min(hi, len(options)))
        picked: list[X] = []
        pool = list(options)
        for _ in range(count):
            item = self.choice(pool)
            pool.remove(item)
            picked.append(item)
        return [o for o in options if o in picked]


class HypothesisChooser(Chooser):
    """Choices drawn with hypothesis (the `draw` of `st.composite`), so failing examples shrink (smaller
    shapes, fewer ops)."""

    def __init__(self, draw):
        self.draw = draw

    def choice(self, options):
        from hypothesis import strategies as st

        return self.draw(st.sampled_from(list(options)))

    def integer(self, lo, hi):
        from hypothesis import strategies as st

        return self.draw(st.integers(lo, hi))


class RandomChooser(Chooser):
    """Choices from `random.Random(seed)`: the same seed always gives the same kernel."""

    def __init__(self, seed: int):
        self.seed = seed
        self.rng = random.Random(seed)

    def choice(self, options):
        return self.rng.choice(list(options))

    def integer(self, lo, hi):
        return self.rng.randint(lo, hi)
