"""On-disk cache of compiled kernels: plain files, atomic publication, verified before use.

Layout (one folder per kernel, named by its key)::

    $TILE_NB_CACHE_DIR (default ~/.cache/tile_nb)/v1/ab/abcdef.../
        meta.json        key, key material, sha256 + size of every other file, resources, timings
        module.so        exported TVM module with the cubin inside (only where a GPU runtime built it)
        kernel.cubin     kernel.cu     kernel.ptx     lowered.py

        meta.sha256      sha256 of meta.json (so a damaged meta.json is found like any other damaged file)

Why it is safe with several processes: an entry is written completely into a private temporary folder and then
published with one `os.rename` of the folder, which is atomic; a reader therefore sees either no entry or a
whole one. Two writers racing for the same key both build a full entry; the loser's rename fails and its
folder is dropped. A reader checks the format, the key and the checksum of every file before using any of
them; an entry that fails the check is reported (a `CacheWarning`), moved aside and rebuilt, never loaded.
Temporary and discarded folders that a killed process left behind are removed by later writers once they are
old enough. Nothing is pickled: metadata is JSON, code is text, binaries are the compiler's own formats.

Why it is safe with other users: checksums only detect damage, so the folders are private (cache_guard.py):
the root and every folder and file below it must belong to the user and be writable by nobody else, or a
`CacheSecurityError` says which path is wrong and how to fix it.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shutil
import tempfile
import time
import uuid
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .cache_guard import (
    CacheSecurityError,
    CacheWarning,
    check_private_file,
    ensure_private,
    read_private,
    remove_leftovers,
    write_private,
)

__all__ = [
    "FORMAT",
    "CacheEntry",
    "CacheSecurityError",
    "CacheWarning",
    "CorruptEntry",
    "DiskCache",
    "cache_dir",
    "cache_enabled",
    "check_file_name",
    "compute_key",
    "source_fingerprint",
]

# Bumped when an entry's layout changes (v2: the lowering plan; v3: meta.sha256
# and the key material in meta.json).
FORMAT = "tile_nb-kernel-v3"
META_SUM = "meta.sha256"
_KEY = re.compile(r"[0-9a-f]{64}")
_LEFTOVERS = (".tmp-", ".trash-")


def cache_dir() -> Path:
    """`$TILE_NB_CACHE_DIR`, else `~/.cache/tile_nb` (read on every call, so tests can point it
    elsewhere). It must belong to the user and be writable by nobody else (else
    `CacheSecurityError`); tile_nb creates it 0700."""
    env = os.environ.get("TILE_NB_CACHE_DIR")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "tile_nb"


def cache_enabled() -> bool:
    """False when `TILE_NB_DISABLE_CACHE` is set to a true value."""
    return os.environ.get("TILE_NB_DISABLE_CACHE", "").lower() not in ("1", "true", "yes")


@functools.cache
def _tile_nb_version() -> str:
    try:
        from importlib.metadata import version

        return version("tile_nb")
    except Exception:  # noqa: BLE001 - running from a source tree that is not installed
        return "0+source"


@functools.cache
def source_fingerprint() -> str:
    """sha256 over the Python sources that decide what a kernel compiles to: tile_nb/lower and tile_nb/backend
    (and this cache's own format). Editing a lowering rule therefore invalidates every cached kernel."""
    root = Path(__file__).resolve().parent.parent
    digest = hashlib.sha256()
    for package in ("lower", "backend"):
        folder = root / package
        if not folder.is_dir():
            continue
        for path in sorted(folder.rglob("*.py")):
            digest.update(str(path.relative_to(root)).encode())
            digest.update(b"\0")
            digest.update(path.read_bytes())
            digest.update(b"\0")
    return digest.hexdigest()


@functools.cache
def _tvm_version() -> str:
    import tvm

    return str(tvm.__version__)


def key_material(ir_text: str, target_text: str, options: dict[str, Any]) -> dict[str, Any]:
    """Everything the key is made of, as JSON-able values (stored in meta.json for inspection)."""
    return {
        "format": FORMAT,
        "ir_sha256": hashlib.sha256(ir_text.encode()).hexdigest(),
        "target": target_text,
        "options": options,
        "tile_nb": _tile_nb_version(),
        "sources": source_fingerprint(),
        "tvm": _tvm_version(),
    }


def compute_key(material: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass
class CacheEntry:
    """A verified entry: its folder, metadata and file contents (text files decoded)."""

    path: Path
    meta: dict[str, Any]
    files: dict[str, bytes] = field(default_factory=dict)

    def text(self, name: str) -> str | None:
        data = self.files.get(name)
        return None if data is None else data.decode()

    @property
    def module_path(self) -> Path | None:
        return self.path / "module.so" if "module.so" in self.meta["files"] else None


class CorruptEntry(Exception):
    """An entry failed verification (why is in the message)."""


def check_file_name(name: str) -> None:
    """Entry files are plain names: a shipped listing must not reach outside its
    folder or shadow the metadata."""
    if not isinstance(name, str) or not name or "/" in name or "\\" in name or name.startswith(".") \
            or name in ("meta.json", META_SUM):
        raise ValueError(f"a cache entry's file names are plain names other than meta.json and {META_SUM}; "
                         f"got {name!r}")


def _check_key(key: str) -> None:
    if not isinstance(key, str) or not _KEY.fullmatch(key):
        raise ValueError(f"a cache key is 64 lowercase hex digits (a sha256); got {key!r}")


_swept: set[str] = set()   # cache roots whose leftovers this process has already looked for


class DiskCache:
    """The cache folder. All methods are safe to call from several processes at once; each raises
    `CacheSecurityError` when a folder or file on its way could be changed by someone other than the user."""

    def __init__(self, root: Path | str | None = None):
        self.root = Path(root) if root is not None else cache_dir()

    def entry_path(self, key: str) -> Path:
        return self.root / "v1" / key[:2] / key

    # ------------------------------------------------------------------ read

    def load(self, key: str, *, need_module: bool = False) -> CacheEntry | None:
        """The verified entry for `key`, or None. A corrupt or mismatched entry is reported with a
        `CacheWarning` and moved aside (so the caller's rebuild can take its place) and None is returned; with
        `need_module`, an entry without one is a miss."""
        _check_key(key)
        path = self.entry_path(key)
        if not ensure_private(self.root, path, create=False):
            return None
        try:
            entry = self._verify(path, key, skip={"module.so"})
            if need_module:
                if entry.module_path is None:
                    return None
                # the caller loads the module from its file: check the bytes it will load
                self._read_checked(path, "module.so", entry.meta["files"]["module.so"])
        except CorruptEntry as err:
            self.report_damage(path, str(err))
            return None
        return entry

    def _read_checked(self, path: Path, name: str, info: Any) -> bytes:
        try:
            data, _ = read_private(path / name)
        except OSError as err:
            raise CorruptEntry(f"{name} is unreadable: {err.strerror or err}") from err
        if not isinstance(info, dict) or len(data) != info.get("size") or _sha256(data) != info.get("sha256"):
            raise CorruptEntry(f"{name} does not match its checksum in meta.json")
        return data

    def _verify(self, path: Path, key: str, skip: set[str]) -> CacheEntry:
        try:
            raw, _ = read_private(path / "meta.json")
            recorded, _ = read_private(path / META_SUM)
        except OSError as err:
            raise CorruptEntry(
                f"{Path(err.filename or '?').name} is unreadable: {err.strerror or err}"
            ) from err
        if recorded.decode(errors="replace").strip() != _sha256(raw):
            raise CorruptEntry(f"meta.json does not match its checksum in {META_SUM}")
        try:
            meta = json.loads(raw)
        except ValueError as err:
            raise CorruptEntry(f"meta.json is not JSON: {err}") from err
        if not isinstance(meta, dict) or meta.get("format") != FORMAT or meta.get("key") != key:
            raise CorruptEntry("meta.json names another format or key")
        listing = meta.get("files")
        if not isinstance(listing, dict):
            raise CorruptEntry("meta.json lists no files")
        files: dict[str, bytes] = {}
        for name, info in listing.items():
            try:
                check_file_name(name)
            except ValueError as err:
                raise CorruptEntry(str(err)) from err
            if name in skip:
                try:
                    check_private_file(path / name)
                except OSError as err:
                    raise CorruptEntry(f"{name} is missing") from err
                continue
            files[name] = self._read_checked(path, name, info)
        return CacheEntry(path=path, meta=meta, files=files)

    def report_damage(self, path: Path, why: str) -> None:
        """Warn that the entry at `path` is damaged and move it aside; quiet when another process removed it
        first (what it read was then a folder being taken away, not damage)."""
        if not os.path.isdir(path):
            return
        warnings.warn(
            f"tile_nb: the cached kernel {path} is damaged ({why}); it is removed and will be rebuilt",
            CacheWarning,
            stacklevel=3,
        )
        self.discard(path)

    # ------------------------------------------------------------------ write

    def store(self, key: str, meta: dict[str, Any], files: dict[str, bytes | str | Path], *,
              replace: bool = False) -> Path | None:
        """Publish an entry atomically. `files` maps names to contents (or to a Path to copy).
        Returns the entry folder, or None when another process published the same key first (its
        entry is as good as ours). `replace=True` swaps out an existing entry (used when ours is
        better, e.g. it has a loadable module)."""
        _check_key(key)
        for name in files:
            check_file_name(name)
        final = self.entry_path(key)
        ensure_private(self.root, final.parent, create=True)
        self._sweep(final.parent)
        tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{key[:12]}-", dir=final.parent))   # mode 0700
        try:
            listing = {}
            for name, content in files.items():
                if isinstance(content, Path):
                    data = content.read_bytes()
                else:
                    data = content.encode() if isinstance(content, str) else bytes(content)
                write_private(tmp / name, data)
                listing[name] = {"sha256": _sha256(data), "size": len(data)}
            full_meta = dict(meta, format=FORMAT, key=key, files=listing, created=time.time())
            raw = json.dumps(full_meta, indent=1, sort_keys=True).encode()
            write_private(tmp / "meta.json", raw)
            write_private(tmp / META_SUM, (_sha256(raw) + "\n").encode())
            if replace and final.exists():
                self.discard(final)
            try:
                os.rename(tmp, final)      # atomic; fails if another writer got there first
            except OSError:
                if final.is_dir():
                    return None
                raise
            return final
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)

    def _sweep(self, parent: Path) -> None:
        """Remove what killed writers left: in the folder written to, and once per process in every folder."""
        remove_leftovers(parent, _LEFTOVERS)
        top = self.root / "v1"
        if str(top) in _swept:
            return
        _swept.add(str(top))
        try:
            subs = [Path(e.path) for e in os.scandir(top) if e.is_dir(follow_symlinks=False)]
        except OSError:
            return
        for sub in subs:
            try:
                ensure_private(self.root, sub, create=False)
            except CacheSecurityError:
                continue   # not ours to tidy; a load or store there raises with the reason
            remove_leftovers(sub, _LEFTOVERS)

    def discard(self, path: Path) -> None:
        """Move an entry out of the way first (atomic), then delete it; another
        process may be doing the same."""
        trash = path.parent / f".trash-{path.name[:12]}-{uuid.uuid4().hex[:8]}"
        try:
            os.rename(path, trash)
        except OSError:
            return
        shutil.rmtree(trash, ignore_errors=True)

    def clear(self) -> None:
        """Delete every entry (e.g. `tile_nb.runtime.clear_cache()`)."""
        shutil.rmtree(self.root / "v1", ignore_errors=True)
