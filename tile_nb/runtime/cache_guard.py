"""Who may write the on-disk caches: folders and files that only their owner can change, checked before use.

The kernel cache holds code that this process loads and runs (`module.so`), so the checksums in `meta.json`
only detect damage: anyone who can write the folder can also rewrite the checksums. What protects the user is
that every folder from the cache root down to each file is owned by the user and writable by nobody else. So:

- folders the cache creates are made 0700 (the missing parents of the root too) and files 0600;
- before use, the root and every folder below it down to the entry, and every file read or
  loaded, must be owned by the current user and not writable by group or others; below the
  root, nothing may be a symbolic link;
- otherwise a `CacheSecurityError` names the path, its owner and mode, and what to do. It is raised to the
  caller, never turned into a silent uncached run; `TILE_NB_DISABLE_CACHE=1` (or another `TILE_NB_CACHE_DIR`)
  is the way to compile without that folder.

The folders above the root are not checked: the root is the user's choice, and `/tmp` or a shared home are
normal places for its parents.
"""
from __future__ import annotations

import os
import shutil
import stat
import time
from pathlib import Path

from ..errors import TileNBError

__all__ = ["STALE_AFTER_S", "CacheSecurityError", "CacheWarning", "check_private_file", "ensure_private",
           "read_private", "remove_leftovers", "write_private"]

# A temporary folder or file older than this was left by a killed writer:
# publishing takes well under a minute.
STALE_AFTER_S = 15 * 60

_ENFORCED = hasattr(os, "geteuid")   # POSIX owners and modes; elsewhere there is nothing to compare


class CacheSecurityError(TileNBError):
    """A cache folder or file that someone other than the user could change; it is not used.

    Fields: `path`, `uid` and `owner` (its owner), `mode` (its permission
    bits), `problem` (why it is refused).
    """

    def __init__(
        self,
        message: str,
        *,
        path: str | None = None,
        uid: int | None = None,
        owner: str | None = None,
        mode: int | None = None,
        problem: str | None = None,
        hint: str | None = None,
    ):
        super().__init__(message, hint=hint)
        self.path, self.uid, self.owner, self.mode, self.problem = path, uid, owner, mode, problem

    def __reduce__(self):
        return (_rebuild, (type(self), self.message, self.path, self.uid, self.owner, self.mode, self.problem,
                           self.hint))


def _rebuild(cls, message, path, uid, owner, mode, problem, hint):
    return cls(message, path=path, uid=uid, owner=owner, mode=mode, problem=problem, hint=hint)


class CacheWarning(UserWarning):
    """A damaged cache entry or record was found: it is removed and rebuilt
    (the message says which and why)."""


def _user_name(uid: int) -> str:
    try:
        import pwd

        return pwd.getpwuid(uid).pw_name
    except (ImportError, KeyError):
        return "no user name"


def _refuse(path: Path, st: os.stat_result, problem: str) -> CacheSecurityError:
    me = os.geteuid()
    mode = stat.S_IMODE(st.st_mode)
    owner = _user_name(st.st_uid)
    what = "folder" if stat.S_ISDIR(st.st_mode) else "file"
    message = (
        f"tile_nb refuses the cache {what} {path}: {problem}. It is owned by uid {st.st_uid} ({owner}) "
        f"with mode {mode:04o}; you are uid {me} ({_user_name(me)}). Another user could replace the "
        f"compiled code the cache holds, so it is not used."
    )
    if st.st_uid != me:
        hint = ("remove it (as its owner or root) or point TILE_NB_CACHE_DIR at a folder of your own; "
                "TILE_NB_DISABLE_CACHE=1 compiles without the disk cache")
    else:
        hint = (
            f"if you trust what it holds, `chmod -R go-w {path}` (or `chmod 700` the folders); "
            "else delete it "
            f"or point TILE_NB_CACHE_DIR elsewhere; TILE_NB_DISABLE_CACHE=1 compiles without the disk cache"
        )
    return CacheSecurityError(message, path=str(path), uid=st.st_uid, owner=owner, mode=mode, problem=problem,
                              hint=hint)


def _check(path: Path, st: os.stat_result, *, folder: bool) -> None:
    if stat.S_ISLNK(st.st_mode):
        raise _refuse(path, st, "it is a symbolic link, and the cache makes none below its root")
    if folder != stat.S_ISDIR(st.st_mode) or not (folder or stat.S_ISREG(st.st_mode)):
        raise _refuse(path, st, "it is not a " + ("folder" if folder else "regular file"))
    if not _ENFORCED:
        return
    if st.st_uid != os.geteuid():
        raise _refuse(path, st, "it belongs to another user")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise _refuse(
            path,
            st,
            "it is writable by "
            + (
                "group and others"
                if st.st_mode & stat.S_IWGRP and st.st_mode & stat.S_IWOTH
                else "its group"
                if st.st_mode & stat.S_IWGRP
                else "others"
            ),
        )


def _make_dirs(path: Path) -> None:
    """`mkdir -p` with mode 0700 for every folder it creates (pathlib gives the parents the default mode)."""
    missing = []
    while not os.path.lexists(path):
        missing.append(path)
        if path.parent == path:
            break
        path = path.parent
    for folder in reversed(missing):
        try:
            os.mkdir(folder, 0o700)
        except FileExistsError:
            pass   # another process made it first: checked like any existing folder


def ensure_private(root: Path, folder: Path, *, create: bool) -> bool:
    """Check `root` (links followed: the user chose it) and every folder from it down to `folder`; with
    `create`, make the missing ones 0700 first. Returns False when a folder is missing (and not created)."""
    if not os.path.lexists(root):
        if not create:
            return False
        _make_dirs(root)
    _check(root, os.stat(root), folder=True)
    here = root
    for part in folder.relative_to(root).parts:
        here = here / part
        try:
            st = os.lstat(here)
        except FileNotFoundError:
            if not create:
                return False
            try:
                os.mkdir(here, 0o700)
            except FileExistsError:
                pass
            st = os.lstat(here)
        _check(here, st, folder=True)
    return True


def read_private(path: Path) -> tuple[bytes, os.stat_result]:
    """The bytes of a file that only the user can change, and its stat (checked on the open file itself)."""
    _check(path, os.lstat(path), folder=False)
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        _check(path, st, folder=False)
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read(), st
    finally:
        os.close(fd)


def check_private_file(path: Path) -> None:
    """Raise unless `path` is a regular file that only the user can change
    (before a loader opens it by name)."""
    _check(path, os.lstat(path), folder=False)


def write_private(path: Path, data: bytes) -> None:
    """Create `path` (it must not exist) with mode 0600 and write `data`."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
                 | getattr(os, "O_CLOEXEC", 0), 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def remove_leftovers(folder: Path, prefixes: tuple[str, ...], *, older_than_s: float = STALE_AFTER_S) -> int:
    """Delete the files and folders in `folder` whose names start with one of `prefixes` and that have not
    changed for `older_than_s` (a killed writer's; a live writer's are younger). Returns how many went."""
    removed = 0
    now = time.time()
    try:
        names = os.listdir(folder)
    except OSError:
        return 0
    for name in names:
        if not name.startswith(prefixes):
            continue
        path = folder / name
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if now - st.st_mtime < older_than_s:
            continue
        if stat.S_ISDIR(st.st_mode):
            shutil.rmtree(path, ignore_errors=True)
        else:
            try:
                os.unlink(path)
            except OSError:
                continue
        removed += not os.path.lexists(path)
    return removed
