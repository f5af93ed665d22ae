"""`KeyedLocks` and `build_once`: fill a cache from several threads without building any entry twice.

Reading a cache stays a plain dict lookup (no lock); only a miss takes the lock of its key, so a second thread
asking for an entry that is being built waits for that build and uses its result, while other keys build in
parallel. A build that raises stores nothing: the next caller builds again (and meets the same error).
"""
from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["KeyedLocks", "build_once"]


class KeyedLocks:
    """One re-entrant lock per key, created on demand and dropped once no thread holds or waits for it."""

    def __init__(self):
        self._guard = threading.Lock()
        self._locks: dict[Any, list] = {}  # key -> [RLock, threads holding or waiting]

    @contextlib.contextmanager
    def hold(self, key):
        with self._guard:
            entry = self._locks.get(key)
            if entry is None:
                entry = self._locks[key] = [threading.RLock(), 0]
            entry[1] += 1
        try:
            # Re-entrant: a build that asks for its own key again recurses as it would in one thread.
            with entry[0]:
                yield
        finally:
            with self._guard:
                entry[1] -= 1
                if entry[1] == 0:
                    del self._locks[key]

    def __len__(self) -> int:
        """Keys now held or waited for (zero when no build is running)."""
        with self._guard:
            return len(self._locks)


def build_once(table: dict, key, build: Callable[[], Any], locks: KeyedLocks, lock_key=None):
    """`table[key]`, built by `build()` and stored when missing; concurrent
    callers for one key share one build.

    `lock_key` names the key among `locks` when one KeyedLocks serves several tables (default: `key`).
    """
    value = table.get(key)
    if value is not None:
        return value
    with locks.hold(key if lock_key is None else lock_key):
        value = table.get(key)
        if value is None:
            value = build()
            table[key] = value
    return value
