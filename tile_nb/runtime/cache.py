"""On-disk cache of compiled kernels: plain files, atomic publication, verified before use.

Layout (one folder per kernel, named by its key)::

    $TILE_NB_CACHE_DIR (default ~/.cache/tile_nb)/v1/ab/abcdef.../
        meta.json        key, key material, sha256 + size of every other file, resources, timings
        module.so        exported TVM module with the cubin inside (only where a GPU runtime built it)
        kernel.cubin     kernel.cu     kernel.ptx     lowered.py

Why it is safe with several processes: an entry is written completely into a private temporary folder and then
published with one `os.rename` of the folder, which is atomic; a reader therefore sees either no entry or a whole
one. Two writers racing for the same key both build a full entry; the loser's rename fails and its folder is
dropped. A reader checks the format, the key and the checksum of every file before using any of them; an entry
that fails the check is moved aside and rebuilt, never loaded. Nothing is pickled: metadata is JSON, code is text,
binaries are the compiler's own formats.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["FORMAT", "CacheEntry", "DiskCache", "cache_dir", "cache_enabled", "compute_key", "source_fingerprint"]

FORMAT = "tile_nb-kernel-v2"  # bumped when meta.json changes (v2: the lowering plan)


def cache_dir() -> Path:
    """`$TILE_NB_CACHE_DIR`, else `~/.cache/tile_nb` (read on every call, so tests can point it elsewhere)."""
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


class DiskCache:
    """The cache folder. All methods are safe to call from several processes at once."""

    def __init__(self, root: Path | str | None = None):
        self.root = Path(root) if root is not None else cache_dir()

    def entry_path(self, key: str) -> Path:
        return self.root / "v1" / key[:2] / key

    # ------------------------------------------------------------------ read

    def load(self, key: str, *, need_module: bool = False) -> CacheEntry | None:
        """The verified entry for `key`, or None. A corrupt or mismatched entry is moved aside (so the caller's
        rebuild can take its place) and None is returned; with `need_module`, an entry without one is a miss."""
        path = self.entry_path(key)
        if not path.is_dir():
            return None
        try:
            entry = self._verify(path, key, skip={"module.so"})
        except CorruptEntry:
            self._discard(path)
            return None
        if need_module:
            if entry.module_path is None:
                return None
            try:   # the module is loaded from its file by the caller: check the bytes it will load
                expected = entry.meta["files"]["module.so"]
                data = (path / "module.so").read_bytes()
                if len(data) != expected["size"] or _sha256(data) != expected["sha256"]:
                    raise CorruptEntry("module.so checksum mismatch")
            except (OSError, KeyError, CorruptEntry):
                self._discard(path)
                return None
        return entry

    def _verify(self, path: Path, key: str, skip: set[str]) -> CacheEntry:
        try:
            meta = json.loads((path / "meta.json").read_text())
        except (OSError, ValueError) as err:
            raise CorruptEntry(f"unreadable meta.json: {err}") from err
        if not isinstance(meta, dict) or meta.get("format") != FORMAT or meta.get("key") != key:
            raise CorruptEntry("format or key mismatch")
        files: dict[str, bytes] = {}
        for name, info in dict(meta.get("files", {})).items():
            if name in skip:
                if not (path / name).is_file():
                    raise CorruptEntry(f"{name} missing")
                continue
            try:
                data = (path / name).read_bytes()
            except OSError as err:
                raise CorruptEntry(f"{name} unreadable: {err}") from err
            if len(data) != info.get("size") or _sha256(data) != info.get("sha256"):
                raise CorruptEntry(f"{name} checksum mismatch")
            files[name] = data
        return CacheEntry(path=path, meta=meta, files=files)

    # ------------------------------------------------------------------ write

    def store(self, key: str, meta: dict[str, Any], files: dict[str, bytes | str | Path], *,
              replace: bool = False) -> Path | None:
        """Publish an entry atomically. `files` maps names to contents (or to a Path to copy). Returns the entry
        folder, or None when another process published the same key first (its entry is as good as ours).
        `replace=True` swaps out an existing entry (used when ours is better, e.g. it has a loadable module)."""
        final = self.entry_path(key)
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{key[:12]}-", dir=final.parent))
        try:
            listing = {}
            for name, content in files.items():
                if isinstance(content, Path):
                    shutil.copyfile(content, tmp / name)
                    data = (tmp / name).read_bytes()
                else:
                    data = content.encode() if isinstance(content, str) else bytes(content)
                    (tmp / name).write_bytes(data)
                listing[name] = {"sha256": _sha256(data), "size": len(data)}
            full_meta = dict(meta, format=FORMAT, key=key, files=listing, created=time.time())
            (tmp / "meta.json").write_text(json.dumps(full_meta, indent=1, sort_keys=True))
            if replace and final.exists():
                self._discard(final)
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

    def _discard(self, path: Path) -> None:
        """Move an entry out of the way first (atomic), then delete it; another process may be doing the same."""
        trash = path.parent / f".trash-{path.name[:12]}-{uuid.uuid4().hex[:8]}"
        try:
            os.rename(path, trash)
        except OSError:
            return
        shutil.rmtree(trash, ignore_errors=True)

    def clear(self) -> None:
        """Delete every entry (e.g. `tile_nb.runtime.clear_cache()`)."""
        shutil.rmtree(self.root / "v1", ignore_errors=True)
