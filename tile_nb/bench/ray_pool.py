"""Tuning past one machine with Ray (`pip install 'tile_nb[ray]'`): compile jobs on Ray CPU workers, timing on
Ray GPU actors, one per GPU of the cluster.

    ray.init(address="auto")               # or nothing: a local Ray is started
    gemm.tune(A, B, C, configs=grid, pool="ray")

The jobs are those of the local process pool (`compile_worker.compile_job`: phase-2 IR as TVMScript text). A
Ray worker may be on another machine with another disk, so it sends the built cache entry back
(`ship_entry`: CUDA source, cubin, exported module) and the parent publishes it to its own disk cache; an
actor receives the entry with its job, publishes it to its machine's cache and loads the kernel from there
(no build on the GPU node). An actor makes random inputs of the call's shapes and dtypes on its GPU and
times with `do_bench`. Timings of different GPUs are not compared for the final choice: the best few are
re-timed, interleaved over rounds, on one actor.

A shipped entry is checked before it is stored (`publish_entry`): its key must be the key of its material, and
the key this process computes for the job it sent (same IR, target, options, switches, tile_nb and TVM); its
files must match their checksums. Anything else is refused with a `ShippedEntryError` (the configuration fails
with it). This catches a worker with another version or environment, or a damaged transfer; it cannot catch a
worker that lies about what it built (the cluster runs the code it is sent, so
it is trusted like this machine).

`device="cpu"` makes CPU actors that time the CPU interpreter on the same jobs: it exists so the whole Ray
path (scheduling, shipping entries, inputs from specs, timing) is tested on machines without a GPU; its
timings measure the interpreter, and the result says so.
"""
from __future__ import annotations

import hashlib
import os
import sys
import time

from ..errors import TileNBError

__all__ = ["RayPool", "ShippedEntryError", "publish_entry", "time_on_actors"]

_remote_compile = None
_Bencher = None


def _ray():
    try:
        import ray
    except ImportError:
        raise ImportError("pool='ray' needs Ray: pip install 'tile_nb[ray]'") from None
    if not ray.is_initialized():
        ray.init()
    return ray


def _gpu_name() -> str:
    import torch

    return torch.cuda.get_device_name()


def cluster_gpu_name() -> str | None:
    """The name of a GPU of the Ray cluster (asked on a GPU worker: the parent may have none), or None."""
    ray = _ray()
    if int(ray.cluster_resources().get("GPU", 0)) < 1:
        return None
    return ray.get(ray.remote(num_gpus=1)(_gpu_name).remote())


def _compile_on_ray_worker(job: dict) -> dict:
    """A Ray task: keep off the GPU (when torch is not loaded yet in this worker),
    compile, ship the entry back."""
    if "torch" not in sys.modules:
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    from tile_nb.bench.compile_worker import compile_job

    return compile_job(dict(job, ship_entry=True))


class ShippedEntryError(TileNBError, ValueError):
    """A cache entry sent by a Ray worker does not match the job it was sent for; it is not stored."""


_BOOKKEEPING = ("format", "key", "files", "created")   # fields the cache writes itself


def check_shipped(key: str, files: dict, meta: dict | None, expected_key: str | None = None) -> None:
    """Raise `ShippedEntryError` unless `files` and `meta` are a whole entry for `key`: the key recomputed
    from the material in `meta` (and equal to `expected_key`, the receiver's own key for the job), every file
    listed with its sha256 and size, and nothing unlisted."""
    from ..runtime.cache import check_file_name, compute_key

    where = f"the cache entry a Ray worker sent for key {str(key)[:16]}..."
    material = (meta or {}).get("material")
    if not isinstance(material, dict):
        raise ShippedEntryError(
            f"{where} has no key material in its meta.json, so its key cannot be checked",
            hint="the worker runs an older tile_nb; install the same version on every node",
        )
    if compute_key(material) != key:
        raise ShippedEntryError(
            f"{where} is not the key of its own material (recomputed {compute_key(material)})"
        )
    if expected_key is not None and key != expected_key:
        raise ShippedEntryError(
            f"{where} is not the key this process computes for the job it sent ({expected_key})",
            hint="the worker differs in tile_nb, TVM, its lowering switches or the target; the key material "
                 f"it used: { {k: v for k, v in material.items() if k != 'ir_sha256'} }")
    listing = meta.get("files")
    if not isinstance(listing, dict) or set(listing) != set(files):
        raise ShippedEntryError(f"{where} lists files {sorted(listing or {})} but sent {sorted(files)}")
    for name in files:
        try:
            check_file_name(name)
        except ValueError as err:
            raise ShippedEntryError(f"{where}: {err}") from None
    for name, data in files.items():
        info = listing[name]
        data = bytes(data)
        if not isinstance(info, dict) or info.get("size") != len(data) or \
                info.get("sha256") != hashlib.sha256(data).hexdigest():
            raise ShippedEntryError(f"{where}: {name} does not match its sha256 and size in meta.json")


def publish_entry(
    key: str | None, files: dict | None, meta: dict | None, *, expected_key: str | None = None
) -> None:
    """Put a shipped cache entry into this machine's disk cache unless an equal or better one is there, after
    `check_shipped` (`expected_key`: the key this process computes for the job, see `expected_key_of`)."""
    if not key or not files:
        return
    check_shipped(key, files, meta, expected_key)
    from ..runtime.cache import DiskCache

    disk = DiskCache()
    existing = disk.load(key)
    if existing is not None and (existing.module_path is not None or "module.so" not in files):
        return
    keep = {k: v for k, v in meta.items() if k not in _BOOKKEEPING}
    disk.store(key, keep, {name: bytes(data) for name, data in files.items()}, replace=existing is not None)


def expected_key_of(job: dict, func=None) -> str:
    """The disk-cache key this process gives the job's phase-2 IR, target, options and lowering switches."""
    from ..runtime.compile import cache_key

    if func is None:
        import tvm

        func = tvm.script.from_source(job["ir"])
    from .compile_worker import job_lowering

    return cache_key(func, job["target"], job.get("options"), lowering=job_lowering(job))[0]


class RayPool:
    """Compile jobs as Ray tasks (one CPU each); `run(jobs)` yields outcomes as they complete."""

    kind = "ray"

    def __init__(self):
        global _remote_compile
        self.ray = _ray()
        if _remote_compile is None:
            _remote_compile = self.ray.remote(num_cpus=1)(_compile_on_ray_worker)
        self.workers = int(self.ray.cluster_resources().get("CPU", 1))

    def run(self, jobs):
        ray = self.ray
        pending = {_remote_compile.remote(job): job for job in jobs}
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            job = pending.pop(ready[0])
            job_id = job["id"]
            try:
                out = ray.get(ready[0])
            except Exception as err:  # noqa: BLE001 - a dead Ray worker costs its job only
                out = {"id": job_id, "ok": False, "stage": "compile",
                       "error": f"RayError: the Ray task compiling this configuration failed: {err}"}
            files, meta = out.pop("files", None), out.pop("meta", None)
            if out.get("ok"):
                try:
                    publish_entry(out.get("key"), files, meta, expected_key=expected_key_of(job))
                    out["shipped"] = files
                    out["shipped_meta"] = meta
                except ShippedEntryError as err:
                    out.update(ok=False, stage="publish", error=f"ShippedEntryError: {err}")
            yield out

    def close(self) -> None:
        pass


def _bencher_class(ray):
    global _Bencher
    if _Bencher is None:
        class Bencher:
            """One per GPU: load a shipped kernel, make inputs from their specs, time it with do_bench."""

            def __init__(self, device: str):
                if device == "cpu":
                    os.environ["CUDA_VISIBLE_DEVICES"] = ""
                self.device = device

            def bench(self, job: dict) -> dict:
                return bench_job(job, self.device)

        _Bencher = ray.remote(Bencher)
    return _Bencher


def _inputs(specs: list, device: str) -> list:
    import torch

    from ..language.dtypes import torch_dtype

    gen = torch.Generator().manual_seed(0)
    out = []
    for s in specs:
        if "value" in s:
            out.append(s["value"])
            continue
        dtype = torch_dtype(s["dtype"])
        if dtype.is_floating_point:
            t = torch.randn(s["shape"], generator=gen, dtype=torch.float32).to(dtype)
        else:
            t = torch.randint(-4, 5, s["shape"], generator=gen).to(dtype)
        out.append(t.to(device))
    return out


def bench_job(job: dict, device: str) -> dict:
    """Time one candidate where this function runs (a Ray actor); never raises."""
    import socket

    from ..runtime.cache import DiskCache  # noqa: F401 - imported before TVM's slow import, fails fast if broken

    out = {"id": job["id"], "ok": False, "pid": os.getpid(), "host": socket.gethostname()}
    stage = "load"
    try:
        import tvm

        from . import do_bench
        from .compile_worker import job_lowering
        from .results import timing_dict

        func = tvm.script.from_source(job["ir"])
        publish_entry(
            job.get("key"), job.get("files"), job.get("meta"), expected_key=expected_key_of(job, func)
        )
        args = _inputs(job["specs"], device)
        if device == "cpu":
            from .. import interp

            launch = lambda: interp.run(func, args)
        else:
            from .. import runtime as rt

            kernel = rt.compile(func, job["target"], options=dict(job.get("options") or {}),
                                lowering=job_lowering(job))
            out["from_cache"] = kernel.from_cache
            launch = lambda: kernel(*args)
        stage = "run"
        launch()
        if device != "cpu":
            import torch

            torch.cuda.synchronize()
            out["device_name"] = torch.cuda.get_device_name()
        stage = "time"
        timing = do_bench(launch, warmup_ms=job["warmup_ms"], rep_ms=job["rep_ms"], device=device)
        out.update(ok=True, timing=timing_dict(timing))
    except Exception as err:  # noqa: BLE001 - reported to the parent
        out.update(stage=stage, error=f"{type(err).__name__}: {getattr(err, 'message', None) or err}")
    return out


def _specs(kernel, args: tuple, kwargs: dict, config: dict) -> tuple[list, list]:
    """Shapes and dtypes of the call's arguments (outputs included), and the arguments themselves."""
    from .inputs import is_tensor, make_inputs

    if not any(is_tensor(a) for a in args):
        args = make_inputs(kernel, device="cpu", **kwargs, **config)
    _, call_args = kernel.call_arguments(*args, **kwargs, **config)
    specs = [{"shape": [int(d) for d in a.shape], "dtype": str(a.dtype).replace("torch.", "")} if is_tensor(a)
             else {"value": a} for a in call_args]
    return specs, call_args


def time_on_actors(
    kernel,
    args,
    kwargs,
    points,
    survivors,
    funcs,
    outcomes,
    result,
    reporter,
    *,
    target: str,
    options: dict,
    lowering: dict,
    device: str,
    flops,
    nbytes,
    warmup_ms,
    rep_ms,
    confirm,
    rounds,
) -> None:
    """Time the survivors on Ray actors (one per GPU, or CPU actors timing the interpreter), one job per actor
    at a time; then re-time the best `confirm` in `rounds` on the first actor."""
    from .results import retime_best, timing_from

    ray = _ray()
    if device == "cuda":
        n = int(ray.cluster_resources().get("GPU", 0))
        if n < 1:
            raise RuntimeError("pool='ray' found no GPU in the Ray cluster to time on")
        actors = [_bencher_class(ray).options(num_gpus=1).remote("cuda") for _ in range(n)]
    else:
        n = max(1, min(2, int(ray.cluster_resources().get("CPU", 1))))
        actors = [_bencher_class(ray).options(num_cpus=0).remote("cpu") for _ in range(n)]
    jobs, call_args = {}, {}
    for i in survivors:
        out = outcomes[i]
        specs, call_args[i] = _specs(kernel, args, kwargs, points[i].config)
        jobs[i] = {
            "id": i,
            "ir": funcs[i].script(),
            "target": target,
            "options": options,
            "lowering": lowering,
            "key": out.get("key"),
            "files": out.get("shipped"),
            "meta": out.get("shipped_meta"),
            "specs": specs,
            "warmup_ms": warmup_ms,
            "rep_ms": rep_ms,
        }
    t0 = time.perf_counter()
    queue = list(survivors)
    in_flight = {}
    idle = list(actors)
    while queue or in_flight:
        while queue and idle:
            actor = idle.pop()
            i = queue.pop(0)
            in_flight[actor.bench.remote(jobs[i])] = (i, actor)
        ready, _ = ray.wait(list(in_flight), num_returns=1)
        i, actor = in_flight.pop(ready[0])
        idle.append(actor)
        out = ray.get(ready[0])
        p = points[i]
        if out.get("ok"):
            p.timing = timing_from(out["timing"])
            p.set_rates(flops, nbytes, call_args[i])
        else:
            p.error, p.stage = out.get("error"), out.get("stage")
        reporter.update(result, p, "time")
    result.timings["bench"] = time.perf_counter() - t0

    def time_one(i):
        out = ray.get(actors[0].bench.remote(jobs[i]))
        return out["timing"]["median_ms"] if out.get("ok") else None

    top = retime_best(result, points, survivors, confirm=confirm, rounds=rounds, flops=flops, nbytes=nbytes,
                      time_one=time_one, args_of=call_args.__getitem__)
    result.notes.append(
        f"timed on {len(actors)} Ray actor(s) ({device}); the best {len(top)} re-timed on one"
    )
    for actor in actors:
        ray.kill(actor)
