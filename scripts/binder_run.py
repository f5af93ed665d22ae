"""Execute notebooks headless, as a mybinder.org user would run them (every cell, in order,
in a fresh kernel), and record the peak memory of each run; print a table; exit 1 when a
notebook fails or goes over the limit.

    python scripts/binder_run.py notebooks/*.ipynb [--limit-mb 1000]

Run by scripts/binder_check.sh with the binder environment's python. Peak memory is sampled every 50 ms with
psutil: the proportional set size (PSS) of the kernel process and its children (what the notebook
itself costs), and the total with this driver process (nbclient) added. PSS splits each shared page
among the processes that map it, so the sum counts a library shared by a kernel and its compile workers
once, as the container's memory limit does; a sum of resident sets (RSS, used where PSS is not
available) would count it once per process. Cells that raise fail the run, except those tagged
`raises-exception` (they show an error on purpose).
"""
from __future__ import annotations

import argparse
import os
import re
import sys
import threading
import time
from pathlib import Path

import nbformat
import psutil
from nbclient import NotebookClient

MB = 1e6


def footprint(proc: psutil.Process) -> int:
    """Bytes of memory `proc` accounts for: its PSS (Linux), else its RSS."""
    try:
        return proc.memory_full_info().pss
    except (AttributeError, psutil.AccessDenied):  # no PSS on this platform, or smaps unreadable
        return proc.memory_info().rss


class PeakSampler(threading.Thread):
    """Samples the memory of this process and of the descendants it starts until stopped; keeps the peaks.

    Processes that were already there when it was made (the previous notebook's kernel, still shutting down)
    are not counted: they are not this notebook's memory. Nor is a fork of this process that has not yet run
    the program it was made for (starting a kernel forks this driver, and until the exec the child shares the
    driver's pages: its PSS is half the driver's)."""

    def __init__(self, interval: float = 0.05):
        super().__init__(daemon=True)
        self.interval = interval
        self.me = psutil.Process()
        self.earlier = {proc.pid for proc in self.me.children(recursive=True)}
        self.own_cmdline = self.me.cmdline()
        self.peak_children = 0
        self.peak_total = 0
        self._stop_event = threading.Event()

    def sample(self) -> None:
        children = 0
        for proc in self.me.children(recursive=True):
            if proc.pid in self.earlier:
                continue
            try:
                if proc.cmdline() == self.own_cmdline:  # forked, not yet exec'd: the driver's own pages
                    continue
                children += footprint(proc)
            except psutil.Error:  # a process that just ended
                pass
        self.peak_children = max(self.peak_children, children)
        self.peak_total = max(self.peak_total, children + footprint(self.me))

    def run(self) -> None:
        while not self._stop_event.is_set():
            self.sample()
            time.sleep(self.interval)

    def stop(self) -> None:
        self._stop_event.set()
        self.join()
        self.sample()


def run_notebook(path: Path, timeout: int) -> dict:
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
    )
    sampler = PeakSampler()
    sampler.start()
    start = time.perf_counter()
    error = None
    try:
        client.execute()
    except Exception as exc:  # noqa: BLE001 - reported in the table, and the run fails
        text = re.sub(r"\x1b\[[0-9;]*m", "", str(exc)).strip()   # the traceback's terminal colours
        error = f"{type(exc).__name__}: {text.splitlines()[-1][:200] if text else ''}"
    finally:
        sampler.stop()
    cells = sum(1 for c in nb.cells if c.cell_type == "code")
    return {"name": path.name, "cells": cells, "seconds": time.perf_counter() - start,
            "kernel_mb": sampler.peak_children / MB, "total_mb": sampler.peak_total / MB, "error": error}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="+", type=Path)
    parser.add_argument(
        "--limit-mb", type=float, default=1000.0, help="fail above this peak (default 1000 MB)"
    )
    parser.add_argument(
        "--limit-on",
        choices=("total", "kernel"),
        default="total",
        help="which peak the limit applies to: the total with the driver (what a binder container "
        "counts; the default) or the kernel and its children alone",
    )
    parser.add_argument("--timeout", type=int, default=600, help="seconds per cell")
    args = parser.parse_args(argv)
    print(
        f"python {sys.executable}; CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')!r}",
        flush=True,
    )
    rows = []
    for path in args.notebooks:
        row = run_notebook(path, args.timeout)
        rows.append(row)
        print(f"  {row['name']}: {row['seconds']:.1f} s, peak {row['total_mb']:.0f} MB"
              + (f", FAILED: {row['error']}" if row["error"] else ""), flush=True)
    width = max(len(r["name"]) for r in rows)
    print(f"\n{'notebook':<{width}}  cells  seconds  peak kernel MB  peak total MB")
    measured = f"{args.limit_on}_mb"
    for r in rows:
        status = "FAILED" if r["error"] else ("OVER LIMIT" if r[measured] > args.limit_mb else "ok")
        print(f"{r['name']:<{width}}  {r['cells']:>5}  {r['seconds']:>7.1f}  {r['kernel_mb']:>14.0f}  "
              f"{r['total_mb']:>13.0f}  {status}")
    print(f"peak kernel (PSS): the kernel process and its children; peak total: with the nbclient driver. "
          f"Limit {args.limit_mb:.0f} MB on the peak {args.limit_on} (mybinder.org guarantees 1 GB).")
    failed = [r["name"] for r in rows if r["error"] or r[measured] > args.limit_mb]
    if failed:
        print(f"binder check FAILED: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
