"""Compile pools for tuning: worker processes on this machine, or the parent process itself.

    with ProcessPool(workers=16) as pool:
        for outcome in pool.run(jobs):     # in completion order; a job = compile_worker's JSON dict
            ...

Each worker is `python -m tile_nb.bench.compile_worker`, a fresh interpreter (not a fork: the parent may hold
CUDA and TVM state that a fork cannot use) reading one JSON job per line. A plain subprocess instead of
`concurrent.futures.ProcessPoolExecutor`: a worker that crashes inside TVM or the CUDA compiler (a segfault,
an abort) costs only its own job, which is reported with the exit status and the end of its stderr, and the
worker is replaced; a job that hangs is killed after `timeout_s`. Nothing is pickled and the user's `__main__`
is never re-imported, so scripts without an `if __name__ == "__main__":` guard and notebooks both work.

Until the first worker is ready (a fresh interpreter imports TVM: seconds), the parent compiles jobs itself,
so a small search never waits for the pool and a large one loses no time to its start.

Workers hide the GPUs (`CUDA_VISIBLE_DEVICES=""`): they compile (CUDA source, cubin, ptxas
figures, the exported module) but never create a CUDA context, so they take no GPU memory and do
not disturb the timing in the parent.
"""
from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

from .compile_worker import compile_job

__all__ = ["InlinePool", "ProcessPool", "WorkerStartError", "default_workers"]


class WorkerStartError(RuntimeError):
    """No compile worker could start (the message has the worker's error output)."""


def default_workers(jobs: int) -> int:
    """One worker per CPU core the process may use, at most one per job."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return max(1, min(cores, jobs))


class InlinePool:
    """Compiles in this process, one job after another (`workers=0`): for
    debugging, or where processes can't."""

    kind = "inline"
    workers = 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def run(self, jobs: Iterable[dict]) -> Iterator[dict]:
        for job in jobs:
            yield compile_job(job)

    def close(self) -> None:
        pass


WORKER_COMMAND = (sys.executable, "-m", "tile_nb.bench.compile_worker")


class _Worker:
    def __init__(self, env: dict, command=WORKER_COMMAND):
        self.stderr = tempfile.TemporaryFile()  # noqa: SIM115 - kept open for the worker's life; close() closes it
        # Its own session: a Ctrl-C sent to the terminal's or the notebook kernel's process group interrupts
        # the parent only, which then kills the workers (and their nvcc) as a group.
        self.proc = subprocess.Popen(list(command), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.stderr, env=env, start_new_session=hasattr(os, "killpg"))
        os.set_blocking(self.proc.stdout.fileno(), False)
        self.buffer = b""
        self.ready = False
        self.job: dict | None = None
        self.sent_at = 0.0
        self.started_at = time.monotonic()

    def send(self, job: dict) -> None:
        self.job, self.sent_at = job, time.monotonic()
        self.proc.stdin.write((json.dumps(job) + "\n").encode())
        self.proc.stdin.flush()

    def lines(self) -> tuple[list[dict], bool]:
        """Complete messages read so far, and whether the worker's output has ended."""
        try:
            chunk = os.read(self.proc.stdout.fileno(), 1 << 20)
        except BlockingIOError:
            return [], False
        if not chunk:
            return [], True
        self.buffer += chunk
        *complete, self.buffer = self.buffer.split(b"\n")
        return [json.loads(line) for line in complete if line.strip()], False

    def stderr_tail(self, limit: int = 1500) -> str:
        self.stderr.seek(0)
        text = self.stderr.read().decode(errors="replace")
        return text[-limit:].strip()

    def kill(self) -> None:
        if self.proc.poll() is None:
            if hasattr(os, "killpg"):
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)  # the compilers it started go with it
                except ProcessLookupError:
                    pass
            else:
                self.proc.kill()
        self.proc.wait()

    def close(self) -> None:
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.kill()
        self.stderr.close()


def _exit_text(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def worker_env(hide_gpus: bool = True) -> dict:
    """The workers' environment: the parent's, tile_nb importable, GPUs hidden, one thread each."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])   # the folder holding the tile_nb package
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    if hide_gpus:
        env["CUDA_VISIBLE_DEVICES"] = ""
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("TVM_NUM_THREADS", "1")
    return env


class ProcessPool:
    """`workers` compile processes on this machine; `run(jobs)` yields outcomes as they complete."""

    kind = "process"

    def __init__(self, workers: int, *, timeout_s: float = 600.0, start_timeout_s: float = 300.0,
                 hide_gpus: bool = True, inline_while_starting: bool = True, command=WORKER_COMMAND):
        if workers < 1:
            raise ValueError(f"ProcessPool needs at least 1 worker; got workers={workers}")
        self.workers = workers
        self.timeout_s, self.start_timeout_s = timeout_s, start_timeout_s
        self.env = worker_env(hide_gpus)
        self.command = tuple(command)   # the worker program (tests give a stand-in that crashes or hangs)
        # start right away
        self._pool: list[_Worker] = [_Worker(self.env, self.command) for _ in range(workers)]
        self._restarts = 0
        self.inline_while_starting = inline_while_starting   # the parent compiles until a worker is ready
        self.inline_jobs = 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def run(self, jobs: Iterable[dict]) -> Iterator[dict]:
        pending = list(jobs)
        busy = 0
        selector = selectors.DefaultSelector()
        for w in self._pool:
            selector.register(w.proc.stdout, selectors.EVENT_READ, w)
        try:
            while pending or busy:
                for w in self._pool:
                    if w.ready and w.job is None and pending:
                        w.send(pending.pop(0))
                        busy += 1
                if self.inline_while_starting and pending and not any(w.ready for w in self._pool):
                    # the workers are still importing TVM (seconds): compile here meanwhile
                    self.inline_jobs += 1
                    yield compile_job(pending.pop(0))
                    wait = 0.0
                else:
                    wait = 0.5
                for key, _ in selector.select(timeout=wait):
                    w = key.data
                    messages, ended = w.lines()
                    for msg in messages:
                        if "ready" in msg:
                            if not msg["ready"]:
                                ended = True
                                w.startup_error = msg.get("error")
                            else:
                                w.ready = True
                            continue
                        w.job = None
                        busy -= 1
                        yield msg
                    if ended:
                        busy -= w.job is not None
                        yield from self._replace(w, selector, "ended", bool(pending) or busy > 0)
                now = time.monotonic()
                for w in list(self._pool):
                    if w.job is not None and now - w.sent_at > self.timeout_s:
                        busy -= 1
                        yield from self._replace(w, selector, "timeout", bool(pending) or busy > 0)
                    elif not w.ready and now - w.started_at > self.start_timeout_s:
                        yield from self._replace(w, selector, "start timeout", bool(pending) or busy > 0)
                if not self._pool and (pending or busy):
                    raise WorkerStartError("every compile worker failed; see the errors above")
        except BaseException:
            # Ctrl-C, or a consumer that stopped early: the jobs in flight are
            # abandoned, and their workers with them
            self.close()
            raise
        finally:
            selector.close()

    def _replace(self, w: _Worker, selector, why: str, still_needed: bool) -> Iterator[dict]:
        """Report the job of a worker that died or hung, and start another worker in its place."""
        job = w.job
        if why == "ended":
            w.proc.wait()
        else:
            w.kill()
        status = _exit_text(w.proc.returncode)
        tail = w.stderr_tail()
        selector.unregister(w.proc.stdout)
        self._pool.remove(w)
        w.close()
        # an import error or a broken install: the next worker would fail alike
        if not w.ready and job is None:
            error = getattr(w, "startup_error", None) or f"{status} before it was ready"
            raise WorkerStartError(f"a compile worker could not start ({error}); its stderr:\n{tail}")
        if job is not None:
            what = f"timed out after {self.timeout_s:.0f} s and was killed" if why == "timeout" else \
                f"died ({status})"
            yield {"id": job.get("id"), "ok": False, "stage": "compile", "pid": w.proc.pid,
                   "error": f"WorkerCrash: the compile worker {what} while compiling this configuration"
                            + (f"; its stderr ends with:\n{tail}" if tail else ""),
                   "seconds": time.monotonic() - w.sent_at}
        if still_needed and self._restarts < 4 * self.workers:
            self._restarts += 1
            fresh = _Worker(self.env, self.command)
            self._pool.append(fresh)
            selector.register(fresh.proc.stdout, selectors.EVENT_READ, fresh)

    def close(self) -> None:
        for w in self._pool:
            if w.job is not None:
                w.kill()  # nobody will read its outcome: don't wait for a compile that may take minutes
            w.close()
        self._pool = []
