"""Tuning results on disk, beside the kernel cache: one JSON file per (kernel, shapes, device, versions).

    $TILE_NB_CACHE_DIR (default ~/.cache/tile_nb)/tune-v1/ab/abcdef....json

The key is a sha256 over:
- the kernel: its name, the sha256 of its source text, and the values of the closure variables and module
  globals its body reads (by type and repr);
- the shapes: the values of the tuning key (by default every const, e.g. M, N, K) and the compile-time
  arguments that are not tuned (e.g. `out_dtype`);
- the search space: the list of configurations (another list is another search);
- the device: its name and arch;
- the versions: tile_nb (version and the fingerprint of its lowering and backend sources, as the kernel cache)
  and TVM.
A file holds the key material (so `entries()` can say what each one is for), the chosen configuration and the
whole search (every configuration's time, pruning reason or error). Written atomically (a temporary file, then
a rename), so any number of processes may read and write the store at once; JSON only, nothing is unpickled.

The store's folders are private like the kernel cache's (`tile_nb.runtime.cache_guard`: created 0700,
refused with a `CacheSecurityError` when someone else could write them). A damaged record (unreadable,
without a result, or whose best configuration is not in the search space) is reported with a
`CacheWarning` and removed, so the search runs again and stores a good one; temporary files that a killed
writer left are removed by later writers.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import time
import uuid
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..runtime.cache_guard import CacheWarning, ensure_private, read_private, remove_leftovers, write_private

__all__ = ["FORMAT", "StoredTuning", "TuneStore", "best_in", "key_of", "stable_repr"]

FORMAT = "tile_nb-tune-v1"


def stable_repr(value: Any) -> str | None:
    """`type:repr` of a value whose repr is the same in every process, else None (an object address in it)."""
    text = repr(value)
    if " at 0x" in text or " object at " in text:
        return None
    kind = type(value)
    return f"{kind.__module__}.{kind.__qualname__}:{text}"


@functools.cache
def _versions() -> dict:
    from ..runtime.cache import _tile_nb_version, _tvm_version, source_fingerprint

    return {"tile_nb": _tile_nb_version(), "sources": source_fingerprint(), "tvm": _tvm_version()}


def key_material(kernel: dict, key_values: dict, configs: list[dict], device: str, arch: str) -> dict:
    """What the key is made of (JSON-able; stored in the file for inspection)."""
    space = json.dumps([sorted((k, repr(v)) for k, v in c.items()) for c in configs])
    return {"format": FORMAT, "kernel": kernel, "key": {k: repr(v) for k, v in key_values.items()},
            "configs_sha256": hashlib.sha256(space.encode()).hexdigest(), "n_configs": len(configs),
            "device": device, "arch": arch, **_versions()}


def key_of(material: dict) -> str:
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()


@dataclass
class StoredTuning:
    """One file of the store: what it is for, and its chosen configuration."""

    path: Path
    key: str
    kernel: str
    key_values: dict
    device: str
    best: dict | None
    created: float

    def __repr__(self) -> str:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(self.created))
        shapes = " ".join(f"{k}={v}" for k, v in self.key_values.items())
        return (
            f"<tuning {self.kernel} [{shapes}] on {self.device}: best {self.best} ({when}, {self.key[:12]})>"
        )


def best_in(best: Any, configs: list[dict]) -> dict | None:
    """The configuration of `configs` that a stored best configuration is (compared as the store wrote it:
    JSON, anything else as its str), or None when it is none of them."""
    as_stored = lambda value: json.loads(json.dumps(value, default=str))  # noqa: E731
    if not isinstance(best, dict) or not best:
        return None
    for config in configs:
        if as_stored(config) == best:
            return config
    return None


def _problem(record: Any, key: str, configs: list[dict] | None) -> str | None:
    """Why a parsed record cannot be used for `key` (and the search space `configs`, when given), or None."""
    if not isinstance(record, dict) or record.get("format") != FORMAT:
        return f"it is not a {FORMAT} record"
    if record.get("key") != key:
        return "it names another key"
    result = record.get("result")
    if not isinstance(result, dict) or not result:
        return "it holds no search result"
    if not isinstance(result.get("points"), list) or not isinstance(result.get("best"), dict):
        return "its search result has no points or no best configuration"
    if configs is not None and best_in(result["best"], configs) is None:
        return f"its best configuration {result['best']} is not in the search space"
    return None


class TuneStore:
    """The tuning folder. Safe to use from several processes at once."""

    def __init__(self, root: Path | str | None = None):
        if root is None:
            from ..runtime.cache import cache_dir

            self.anchor = cache_dir()          # the folder whose ownership is checked first
            self.root = self.anchor / "tune-v1"
        else:
            self.anchor = self.root = Path(root)

    def path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    def load(self, key: str, configs: list[dict] | None = None) -> dict | None:
        """The stored record for `key`, or None when there is none. A damaged one (not JSON, another key, no
        result, or, with `configs`, a best configuration outside them) is reported with a `CacheWarning` and
        removed, so the caller searches again."""
        path = self.path(key)
        if not ensure_private(self.anchor, path.parent, create=False):
            return None
        try:
            data, st = read_private(path)
        except FileNotFoundError:
            return None
        try:
            record = json.loads(data)
        except ValueError:
            record, why = None, "it is not JSON"
        else:
            why = _problem(record, key, configs)
        if why is not None:
            self._reject(path, why, st)
            return None
        return record

    def reject(self, key: str, why: str) -> None:
        """Report the record of `key` as damaged (`why`) and remove it."""
        self._reject(self.path(key), why, None)

    def _reject(self, path: Path, why: str, seen: os.stat_result | None) -> None:
        warnings.warn(
            f"tile_nb: the stored tuning {path} is damaged ({why}); it is ignored, removed, and the "
            f"configurations are searched again",
            CacheWarning,
            stacklevel=3,
        )
        try:
            now = os.lstat(path)
            # another process may have just replaced it with a good record: remove only the file that was read
            if seen is None or (now.st_ino, now.st_mtime_ns) == (seen.st_ino, seen.st_mtime_ns):
                os.unlink(path)
        except OSError:
            pass

    def save(self, key: str, material: dict, result: dict) -> Path:
        path = self.path(key)
        ensure_private(self.anchor, path.parent, create=True)
        remove_leftovers(path.parent, (".",))    # only temporary files are hidden here: a killed writer's
        record = {"format": FORMAT, "key": key, "material": material, "best": result.get("best"),
                  "created": time.time(), "result": result}
        tmp = path.with_name(f".tmp-{key[:12]}-{uuid.uuid4().hex[:8]}.tmp")
        write_private(tmp, (json.dumps(record, indent=1, default=str) + "\n").encode())
        try:
            os.replace(tmp, path)
        except OSError:
            tmp.unlink(missing_ok=True)
            raise
        return path

    def entries(self, kernel: str | None = None) -> list[StoredTuning]:
        """Every stored tuning (of the kernel named `kernel`, when given), oldest first."""
        out = []
        if not ensure_private(self.anchor, self.root, create=False):
            return out
        for path in sorted(self.root.glob("*/*.json")):
            try:
                ensure_private(self.anchor, path.parent, create=False)
                record = json.loads(read_private(path)[0])
                material = record["material"]
                entry = StoredTuning(path, record["key"], material["kernel"]["name"], material["key"],
                                     material["device"], record.get("best"), float(record.get("created", 0)))
            except (OSError, ValueError, KeyError, TypeError):
                continue
            if kernel is None or entry.kernel == kernel:
                out.append(entry)
        return sorted(out, key=lambda e: e.created)

    def clear(self, kernel: str | None = None, source_sha256: str | None = None) -> int:
        """Delete stored tunings (all, or those of one kernel name / one kernel source); returns how many."""
        removed = 0
        for entry in self.entries(kernel):
            if source_sha256 is not None:
                record = self.load(entry.key) or {}
                if record.get("material", {}).get("kernel", {}).get("source_sha256") != source_sha256:
                    continue
            try:
                entry.path.unlink()
                removed += 1
            except OSError:
                pass
        return removed


def main(argv: list[str] | None = None) -> int:
    """`python -m tile_nb.bench.tune_store list [KERNEL]` / `clear [KERNEL]`:
    inspect or delete stored tunings."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m tile_nb.bench.tune_store", description=main.__doc__)
    ap.add_argument("command", choices=["list", "clear"])
    ap.add_argument("kernel", nargs="?", default=None, help="only this kernel (by name)")
    args = ap.parse_args(argv)
    store = TuneStore()
    if args.command == "clear":
        print(f"removed {store.clear(args.kernel)} stored tuning(s) from {store.root}")
        return 0
    entries = store.entries(args.kernel)
    for e in entries:
        print(repr(e))
    print(f"{len(entries)} stored tuning(s) in {store.root}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
