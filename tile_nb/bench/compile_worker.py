"""Compiling one tuning candidate away from the parent process: `compile_job(job) -> outcome`.

A job is plain data (JSON): the candidate's phase-2 IR as TVMScript text, the target, the build options and
the lowering options (whole: the worker's environment does not change them). The worker parses the text back
into a PrimFunc, checks that it prints to the same text (so the disk-cache key it publishes under is the key
the parent will look up), and compiles it through `tile_nb.runtime.compile`, which lowers, builds and
publishes the entry (CUDA source, cubin, and on a machine with a CUDA driver the exported module) to the disk
cache. The parent then loads the kernel from that cache without building it again.

Why IR text and not the kernel's Python source: the worker needs nothing of the user's program (closures,
notebook globals, helper functions, `linecache` entries), only TVM and tile_nb; no live TVM object crosses a
process boundary; and the text is exactly what keys the disk cache.

`python -m tile_nb.bench.compile_worker` serves jobs as JSON lines on stdin/stdout (the process pool's
workers); `tile_nb.bench.ray_pool` calls `compile_job` in Ray tasks.
"""
from __future__ import annotations

import json
import os
import re
import socket
import sys
import time
import traceback

__all__ = ["compile_job", "main"]

_THREADS = re.compile(r'launch_thread\("threadIdx\.x", (\d+)\)')


def job_lowering(job: dict):
    """The lowering options a job is compiled under: its "lowering" (every field of a
    LoweringOptions, resolved by the parent: part of the cache key, so they must match exactly); a
    job without them gives its "env" (the parent's TILE_NB_* variables) as the environment to read
    them from. os.environ is not touched."""
    from ..lower.options import LoweringOptions, current

    if job.get("lowering") is not None:
        return LoweringOptions.from_dict(job["lowering"])
    return current(None, env=job.get("env") or {})


def compile_job(job: dict) -> dict:
    """Compile one candidate; never raises (a failure is an outcome with
    `ok: False`, the stage and the error).

    job: {"id", "ir" (TVMScript of the phase-2 PrimFunc), "target" (str), "options" (build options),
    "lowering" (LoweringOptions.to_dict(); or "env": TILE_NB_* variables to read them from),
    "ship_entry" (return the cache entry's files, for a parent on another machine)}. outcome: {"id",
    "ok", "stage", "error", "key", "resources", "threads", "timings", "has_module", "seconds", "pid",
    "host", "files" (when shipped)}.
    """
    start = time.perf_counter()
    out: dict = {"id": job.get("id"), "ok": False, "pid": os.getpid(), "host": socket.gethostname()}
    stage = "parse"
    try:
        import tvm

        from .. import runtime as rt

        func = tvm.script.from_source(job["ir"])
        if func.script() != job["ir"]:
            raise RuntimeError(
                "the phase-2 IR does not print back to the text it was parsed from, so the worker "
                "cannot publish it under the parent's cache key"
            )
        stage = "compile"
        kernel = rt.compile(func, job["target"], options=dict(job.get("options") or {}),
                            lowering=job_lowering(job))
        resources = kernel.resources
        out.update(
            ok=True,
            key=kernel.key,
            resources=resources.to_dict() if resources else None,
            threads=_launch_threads(kernel),
            timings=dict(kernel.build_timings or kernel.timings),
            has_module=_entry_has_module(kernel),
            pipeline=kernel.pipeline,
            from_cache=kernel.from_cache,
        )
        if job.get("ship_entry"):
            out["files"], out["meta"] = _entry_files(kernel)
    except Exception as err:  # noqa: BLE001 - every failure is reported to the parent, which shows it
        out.update(stage=stage, error=f"{type(err).__name__}: {getattr(err, 'message', None) or err}",
                   error_type=type(err).__name__, traceback=traceback.format_exc(limit=6))
    out["seconds"] = time.perf_counter() - start
    return out


def _launch_threads(kernel) -> int | None:
    """Threads per block as launched (a warp-specialized TMA kernel adds its producer warp to the T.Kernel
    threads): what registers x threads is checked against. From the plan (`launch_threads`); a kernel compiled
    from an already lowered IRModule has no plan: then from its IR's threadIdx.x launch."""
    plan = kernel.plan or {}
    if plan.get("launch_threads"):
        return int(plan["launch_threads"])
    found = [int(t) for t in _THREADS.findall(kernel.lowered_ir or "")]
    return max(found) if found else plan.get("threads")


def _entry_has_module(kernel) -> bool:
    from pathlib import Path

    return bool(kernel.cache_path) and (Path(kernel.cache_path) / "module.so").is_file()


def _entry_files(kernel) -> tuple[dict, dict]:
    """The published cache entry's files (name -> bytes) and metadata (its file listing and key material
    included, so the receiver can check both), read back through the cache's checks."""
    from ..runtime.cache import DiskCache
    from ..runtime.cache_guard import read_private

    entry = DiskCache().load(kernel.key) if kernel.key else None
    if entry is None:
        return {}, {}
    files = dict(entry.files)
    if entry.module_path is not None:
        files["module.so"] = read_private(entry.module_path)[0]
    keep = {k: v for k, v in entry.meta.items() if k not in ("format", "key", "created")}
    return files, keep


def main() -> None:
    """Serve jobs: one JSON object per line on stdin, one outcome per line on the protocol stream.

    Anything else that writes to stdout (TVM, nvcc, a print in a library) is sent to stderr instead, so the
    protocol stream stays clean: the original stdout descriptor is kept for outcomes only.
    """
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    # tvm_ffi imports torch whenever it can (~200 MB per process); a compile worker never touches a tensor,
    # and with n workers next to a notebook that memory decides whether tuning fits a 2 GB binder container
    sys.modules.setdefault("torch", None)
    try:
        import tvm  # noqa: F401 - the slow import happens before "ready", not inside the first job

        from .. import runtime  # noqa: F401
    except Exception as err:  # noqa: BLE001
        protocol.write(json.dumps({"ready": False, "error": f"{type(err).__name__}: {err}"}) + "\n")
        return
    protocol.write(json.dumps({"ready": True, "pid": os.getpid()}) + "\n")
    for line in sys.stdin:
        if not line.strip():
            continue
        outcome = compile_job(json.loads(line))
        protocol.write(json.dumps(outcome, default=str) + "\n")


if __name__ == "__main__":
    main()
