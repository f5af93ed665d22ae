"""`tilelang.autotuner` / `tilelang.autotune` on tile_nb: the decorator is accepted, and a call that gives every tuned
parameter (tilelang's way of skipping the search) runs that configuration. A call that would search raises
UnsupportedTilelangAPI: tile_nb's own search is `@tile_nb.autotune(configs={...}, key=[...])`, with another
configuration format, and is not mapped yet."""
from __future__ import annotations

import functools

from ._support import forwarding_getattr, unsupported

__all__ = ["autotune"]


class AutoTuneImpl:
    def __init__(self, fn, configs):
        self._fn = fn
        self._configs = configs
        functools.update_wrapper(self, fn, updated=())

    def _tuned_names(self, args, kwargs) -> set:
        configs = self._configs(*args, **kwargs) if callable(self._configs) else self._configs
        if isinstance(configs, dict):          # {name: [values]}
            return set(configs)
        names = set()
        for config in configs or []:
            names |= set(config)
        return names

    def __call__(self, *args, **kwargs):
        missing = self._tuned_names(args, kwargs) - set(kwargs)
        if missing:
            raise unsupported("tilelang.autotune search",
                              f"give the tuned parameters {', '.join(sorted(missing))} to run one configuration")
        return self._fn(*args, **kwargs)

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._fn, name)


def autotune(func=None, *, configs, **profile_options):
    """tilelang.autotune: the profile options (warmup, rep, ref_prog, ...) are accepted and not used."""
    def decorate(fn):
        return AutoTuneImpl(fn, configs)

    return decorate if func is None else decorate(func)


__getattr__ = forwarding_getattr(__name__, "tilelang.autotuner", {})
