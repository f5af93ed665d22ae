"""Launching kernels that use `T.print` / `T.device_assert` (docs/debugging.md):
their output reaches the notebook.

Device printf writes through the CUDA driver into the process's C stdout (file descriptor 1) when the host
synchronizes; Jupyter shows only what goes through Python's `sys.stdout`, so it would land in the server's
terminal. `DebugLaunch` wraps the launch of such a kernel (and only such kernels: `CompiledKernel._set_launch`
leaves every other kernel's launch as it is): it points fds 1 and 2 at temporary files, launches, synchronizes
the device, restores them, and writes what was captured to `sys.stdout` / `sys.stderr`. A failing device
assert (CUDA's sticky cudaErrorAssert) becomes a `DeviceAssertError` naming the kernel and the assert's line.

Redirecting a file descriptor is process-wide: output of other threads during the launch is captured too (and
written out with the kernel's). Under CUDA graph capture nothing is
redirected (no synchronization is allowed).
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import re
import sys
import tempfile
import threading

from ..errors import DeviceAssertError

__all__ = ["DebugLaunch", "debug_ops_of", "captured_fds"]

_ASSERT_LINE = re.compile(r'T\.device_assert at line (\d+)')
_lock = threading.Lock()


def debug_ops_of(cuda_source: str) -> tuple[bool, list[int]]:
    """(whether the kernel prints, its asserts' lines), read from the helpers lower/emit/debug.py emits."""
    prints = 'printf("[line ' in cuda_source
    asserts = sorted({int(m) for m in _ASSERT_LINE.findall(cuda_source)})
    return prints, asserts


def _flush_c_stdio() -> None:
    try:
        ctypes.CDLL(None).fflush(None)
    except (OSError, AttributeError):  # no C library to flush (not expected on Linux)
        pass


@contextlib.contextmanager
def captured_fds(fds=(1, 2)):
    """Point file descriptors `fds` at temporary files; yields a dict fd -> captured text, filled on exit."""
    out: dict[int, str] = {}
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    _flush_c_stdio()
    saved, files = {}, {}
    try:
        for fd in fds:
            files[fd] = tempfile.TemporaryFile()
            saved[fd] = os.dup(fd)
            os.dup2(files[fd].fileno(), fd)
        yield out
    finally:
        _flush_c_stdio()
        for fd, copy in saved.items():
            os.dup2(copy, fd)
            os.close(copy)
        for fd, f in files.items():
            f.seek(0)
            out[fd] = f.read().decode(errors="replace")
            f.close()


class DebugLaunch:
    """The launch of a kernel with prints or asserts: output captured into
    `sys.stdout`, asserts made errors."""

    def __init__(self, func, kernel_name: str, assert_lines: list[int]):
        self.func = func
        self.kernel_name = kernel_name
        self.assert_lines = assert_lines

    def __call__(self, *args):
        import torch

        if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
            return self.func(*args)
        error = None
        with _lock, captured_fds() as captured:
            try:
                out = self.func(*args)
                device = next((a.device for a in args if getattr(a, "is_cuda", False)), None)
                torch.cuda.synchronize(device)  # device printf reaches the C stdout at a synchronization
            except Exception as err:  # noqa: BLE001 - a device assert surfaces here; others are re-raised below
                error = err
        if captured.get(1):
            sys.stdout.write(captured[1])
            sys.stdout.flush()
        if captured.get(2):
            sys.stderr.write(captured[2])
            sys.stderr.flush()
        if error is not None:
            raise self._assert_error(error, captured.get(1, "") + captured.get(2, "")) or error
        return out

    def _assert_error(self, error: Exception, text: str) -> DeviceAssertError | None:
        if not self.assert_lines or "assert" not in str(error).lower():
            return None
        lines = sorted({int(m) for m in _ASSERT_LINE.findall(text)}) or self.assert_lines
        failures = [t for t in text.splitlines() if "T.device_assert" in t][:8]
        where = f"line {lines[0]}" if len(lines) == 1 else f"one of lines {', '.join(map(str, lines))}"
        message = (f"T.device_assert failed in kernel '{self.kernel_name}' at {where} (CUDA: {error})"
                   + ("".join("\n  " + t for t in failures)))
        return DeviceAssertError(
            message,
            hint="a device-side assert leaves the process's CUDA context unusable: "
            "restart the Jupyter kernel (or the Python process) before launching again",
        )
