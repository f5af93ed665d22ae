"""Autotuning: find the fastest configuration of a kernel's compile-time parameters for one set of shapes.

    result = tune(gemm, {"block_M": [64, 128], "block_N": [128, 256], "num_stages": [2, 3]}, A, B, C)
    result.best_config          # {"block_M": 128, "block_N": 256, "num_stages": 3}
    print(result.table())       # every configuration: time, TFLOP/s, registers, shared memory, spills, status

The search, in order:
1. elaborate every configuration in this process (phase 2; a configuration the front end refuses is recorded
   with the error at the user's line);
2. compile them in parallel worker processes (`pool="process"`, `tile_nb.bench.pool`) or on Ray CPU workers
   (`pool="ray"`); a worker receives the phase-2 IR as TVMScript text and publishes the built kernel to the
   disk cache, so nothing is built twice;
3. prune by compile failure and by static resources (shared memory, registers x threads, spills: `limits`);
4. time the survivors one at a time on the GPU (`do_bench`: warm-up, L2 flush, CUDA events),
   through a launcher that binds the arguments once; then time the best `confirm` again,
   interleaved over `rounds`, so clock drift (the GPU's power cap, temperature) cannot pick the
   winner; the median of those rounds ranks them;
5. store the result (`tune_store`): a later call in any process with the same kernel, shapes, device and
   versions reads it instead of searching.
Without a GPU (or on CPU tensors) the search stops after step 3: compile-only
tuning, labelled so, nothing stored.
"""
from __future__ import annotations

import dataclasses
import datetime
import difflib
import itertools
import os
import re
import time
from collections.abc import Callable, Iterable
from typing import Any

from ..runtime import with_device_facts
from .inputs import compile_time_names, device_name, is_tensor, make_inputs, sync
from .limits import limits_for, resource_problem
from .progress import make_reporter
from .results import SweepPoint, TuneResult, label, retime_best
from .run import error_text
from .timing import do_bench
from .tune_store import TuneStore, best_in, key_material, key_of

__all__ = ["ConfigError", "TuneOptions", "expand_configs", "tune", "tuning_key"]


class ConfigError(ValueError):
    """A tuning configuration names something that is not a compile-time parameter (or is malformed)."""


def expand_configs(configs: Any) -> list[dict]:
    """A list of dicts as is; a dict of lists as its grid (every combination, in
    order). Duplicates are dropped."""
    if isinstance(configs, dict):
        for name, values in configs.items():
            if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
                raise ConfigError(
                    f"a configuration grid maps each name to a list of values; '{name}' maps to {values!r}"
                )
        grid = {k: list(v) for k, v in configs.items()}
        out = [dict(zip(grid, combo, strict=True)) for combo in itertools.product(*grid.values())]
    elif isinstance(configs, (list, tuple)):
        out = []
        for i, c in enumerate(configs):
            if not isinstance(c, dict):
                raise ConfigError(f"configs[{i}] must be a dict of compile-time values such as "
                                  f"{{'block_M': 128}}; got {type(c).__name__}")
            out.append(dict(c))
    else:
        raise ConfigError(
            f"configs must be a list of dicts or a dict of lists (a grid); got {type(configs).__name__}"
        )
    unique: list[dict] = []
    for c in out:
        if c not in unique:
            unique.append(c)
    if not unique:
        raise ConfigError("configs is empty: give at least one configuration")
    return unique


def check_config_names(kernel, configs: list[dict]) -> None:
    names = compile_time_names(kernel)
    kname = getattr(kernel, "__name__", "kernel")
    for i, c in enumerate(configs):
        for k in c:
            if k not in names:
                near = difflib.get_close_matches(k, sorted(names), n=1)
                raise ConfigError(
                    f"tuning config {i} of {kname}() sets '{k}', which is not a compile-time parameter; "
                    f"compile-time parameters: {', '.join(sorted(names)) or 'none'}"
                    + (f" (did you mean '{near[0]}'?)" if near else "")
                )


def params_of(configs: list[dict]) -> dict[str, list]:
    """name -> the distinct values it takes, in order (what the views put in columns and on axes)."""
    params: dict[str, list] = {}
    for c in configs:
        for k, v in c.items():
            values = params.setdefault(k, [])
            if v not in values:
                values.append(v)
    return params


def tuning_key(kernel, args: tuple, kwargs: dict, tuned: set[str], key: list[str] | None) -> dict:
    """The values a tuning result is stored under: the consts named by `key` (default: every const) and the
    compile-time arguments that are not tuned, read from a call with these arguments."""
    compile_values, consts = kernel.call_values(*args, **kwargs)
    kname = getattr(kernel, "__name__", "kernel")
    out = {}
    names = list(consts) if key is None else list(key)
    for name in names:
        if name in consts:
            out[name] = consts[name]
        elif name in compile_values:
            pass   # compile-time values are in the key anyway (below)
        else:
            raise ConfigError(
                f"autotune key '{name}' of {kname}() is neither a const nor a compile-time parameter; "
                f"consts: {', '.join(consts) or 'none'}; compile-time parameters: "
                f"{', '.join(compile_values) or 'none'}"
            )
    for name, value in compile_values.items():
        if name not in tuned:
            out[name] = value
    return out


# The lowering's budget refusals (lower/analysis/budget.py): a configuration that cannot fit is pruned, not
# failed.
# Read from the message because LoweringError has no resource fields yet; an unmatched message stays a
# failure, shown with its text, so a change of wording loses the label, never the reason.
_REFUSALS = (
    re.compile(r"the kernel needs ([\d.]+ KiB) of shared memory per block; (\S+) allows ([\d.]+ KiB)"),
    re.compile(r"register fragments need (\d+) 32-bit registers per thread; a thread has at most (\d+)"),
)


def lowering_refusal(error: str) -> str | None:
    """`shared memory 256.0 KiB > 227.0 KiB per block (sm_90a; refused by the lowering)`, or None."""
    m = _REFUSALS[0].search(error)
    if m:
        return f"shared memory {m.group(1)} > {m.group(3)} per block ({m.group(2)}; refused by the lowering)"
    m = _REFUSALS[1].search(error)
    if m:
        return (
            f"register fragments {m.group(1)} > {m.group(2)} registers per thread (refused by the lowering)"
        )
    return None


def gpu_available(args: tuple) -> tuple[bool, str | None]:
    """Whether a search on these arguments can time on the GPU, and if not, why (the inputs decide: CUDA
    tensors time on the GPU; without tensors, a GPU torch sees)."""
    tensors = [a for a in args if is_tensor(a)]
    if tensors:
        gpu = tensors[0].device.type == "cuda"
        return gpu, None if gpu else "the inputs are CPU tensors"
    import torch

    gpu = torch.cuda.is_available()
    return gpu, None if gpu else "torch sees no GPU"


def gpu_name() -> str:
    return device_name(True)


@dataclasses.dataclass(frozen=True)
class TuneOptions:
    """How `tune` searches and what it keeps. Every field has its default;
    `tune(..., options=TuneOptions(...))`, or the same names as keywords of `tune` (`pool="inline"`), which
    replace the fields of `options`.

    - `key`: the consts the result is stored under (default: all of them;
      fixed compile-time arguments always).
    - `store=False`: neither read nor write the tuning store; `force=True`: search again and overwrite.
    - `pool`: "process" (worker processes on this machine; `workers` of them, default one per core), "inline"
      (this process, one at a time) or "ray" (Ray CPU tasks compile; Ray GPU actors time, one per GPU of the
      cluster, when it has GPUs; `tile_nb[ray]`). `ray_actor_device="cpu"` times the CPU interpreter on CPU
      actors instead (tests the Ray path without a GPU; labelled, never stored).
    - `flops` / `bytes`: work of one call (numbers or functions of the config) for TFLOP/s and GB/s.
    - `warmup_ms`, `rep_ms`: `do_bench` per configuration; `confirm`, `rounds`: re-time the best `confirm`
      configurations `rounds` times, interleaved, and rank them by the median of those rounds.
    - `max_spill_bytes`: prune configurations whose kernels spill more (None: never prune for spills).
    - `compile_timeout_s`: a worker's compile of one configuration is given up after this long.
    - `restore`: runtime arguments (outputs the timing overwrites) put back afterwards, by name.
    - `progress`: "auto", "print", "tqdm", None, or a reporter (`tile_nb.bench.progress`).
    - `results`: also write the result as JSON to this path.
    """

    key: tuple[str, ...] | None = None
    store: bool = True
    force: bool = False
    progress: Any = "auto"
    pool: str = "process"
    workers: int | None = None
    flops: float | Callable | None = None
    bytes: float | Callable | None = None
    warmup_ms: float = 25.0
    rep_ms: float = 100.0
    confirm: int = 3
    rounds: int = 3
    max_spill_bytes: int | None = 0
    compile_timeout_s: float = 600.0
    restore: tuple[str, ...] | None = None
    results: str | None = None
    ray_actor_device: str | None = None

    def __post_init__(self):
        for name in ("key", "restore"):   # lists as given by a call; a frozen value holds tuples
            value = getattr(self, name)
            if value is not None and not isinstance(value, tuple):
                object.__setattr__(self, name, tuple(value))

    @classmethod
    def names(cls) -> frozenset[str]:
        return frozenset(f.name for f in dataclasses.fields(cls))

    @classmethod
    def split(cls, options: TuneOptions | dict | None, keywords: dict) -> tuple[TuneOptions, dict]:
        """(the options: `options` with the fields named in `keywords` replaced, the
        other keywords: the call's)."""
        if options is None:
            options = cls()
        elif isinstance(options, dict):
            options = cls(**options)
        elif not isinstance(options, cls):
            raise TypeError(f"tune() options must be a TuneOptions (or a dict of its fields); got "
                            f"{type(options).__name__}")
        names = cls.names()
        given = {k: v for k, v in keywords.items() if k in names}
        rest = {k: v for k, v in keywords.items() if k not in names}
        return (dataclasses.replace(options, **given) if given else options), rest


def tune(kernel, configs, *args, options: TuneOptions | dict | None = None, **kwargs) -> TuneResult:
    """Search `configs` for `kernel`'s fastest configuration on these arguments; return a `TuneResult`.

    - `configs`: a list of dicts of compile-time values, or a grid `{"block_M": [64, 128], ...}`.
    - arguments: tensors (`A, B, C`; outputs are overwritten while timing, `restore=["C"]` puts named tensors
      back afterwards), or consts as keywords (`M=8192, N=8192, K=8192`: random inputs are made on the GPU).
      Other keywords are fixed compile-time arguments (`out_dtype=T.float16`).
    - `options`: a `TuneOptions` (the store, the pool, the timing, progress, ...); its field names are
      accepted as keywords too (`pool="inline", rounds=5`) and replace those fields.
    """
    t_start = time.perf_counter()
    opts, kwargs = TuneOptions.split(options, kwargs)
    configs = expand_configs(configs)
    check_config_names(kernel, configs)
    tuned = {k for c in configs for k in c}
    name = getattr(kernel, "__name__", "kernel")
    clash = sorted(tuned & set(kwargs))
    if clash:
        raise ConfigError(
            f"{name}(): {', '.join(clash)} is tuned (it is in the configs), so the call must not set it"
        )
    if opts.restore:
        known = [p.name for p in kernel.signature.runtime]
        bad = [r for r in opts.restore if r not in known]
        if bad:
            raise ConfigError(
                f"restore names {bad}, which are not runtime parameters of {name}(); they are {known}"
            )

    gpu, why_not = gpu_available(args)
    ray_gpu_name = None
    ray_actor_device = opts.ray_actor_device
    if opts.pool == "ray" and ray_actor_device in (None, "cuda"):
        from .ray_pool import cluster_gpu_name

        ray_gpu_name = cluster_gpu_name()       # None when the Ray cluster has no GPU
        if ray_gpu_name is not None:
            ray_actor_device, gpu, why_not = "cuda", True, None
    via_ray_actors = opts.pool == "ray" and ray_actor_device is not None
    mode = "gpu" if gpu else "compile-only"
    if via_ray_actors and ray_actor_device == "cpu":
        mode = "interpreter"

    probe = {**kwargs, **configs[0]}
    key_values = tuning_key(kernel, args, probe, tuned, opts.key)
    from ..backend.target import resolve_target, target_arch

    target = resolve_target(getattr(kernel, "target", None))
    arch = target_arch(target)
    dev_name = (ray_gpu_name or gpu_name()) if gpu else f"no GPU ({why_not})"
    identity = kernel.identity()
    material = key_material(identity, key_values, configs, dev_name, arch)
    from ..lower.options import current

    # resolved once, for the store key and every job
    lowering_options = current(getattr(kernel, "options", None))
    if lowering_options.changed():  # other lowering options build other kernels: their tuning is stored apart
        material["lowering"] = lowering_options.changed()
    store_key = key_of(material)
    use_store = opts.store and mode == "gpu" and identity["persistable"]
    tune_store = TuneStore()
    if use_store and not opts.force:
        cached = _stored_result(tune_store, store_key, configs)
        if cached is not None:
            return cached

    result = TuneResult(name, params_of(configs), gpu=mode == "gpu", device_name=dev_name, mode=mode,
                        key=key_values, date=datetime.datetime.now().isoformat(timespec="seconds"))
    if not identity["persistable"] and opts.store and mode == "gpu":
        result.notes.append(f"not stored: {identity['why']}")
    if mode == "compile-only":
        result.notes.append(f"compile-only because {why_not}")
    points = [SweepPoint(config=dict(c)) for c in configs]
    result.points = points

    # 1. elaborate (phase 2) in this process: front-end errors carry the user's line
    t0 = time.perf_counter()
    # binding, the key, the store lookup (and TVM's import, if first)
    result.timings["setup"] = t0 - t_start
    jobs, funcs = [], {}
    compile_options = dict(getattr(kernel, "compile_options", None) or {})
    from ..runtime.cache import cache_enabled

    use_disk = bool(compile_options.pop("cache", True)) and cache_enabled()
    lowering = lowering_options.to_dict()  # whole: a worker compiles under these, whatever its environment
    with_tensors = any(is_tensor(a) for a in args)
    for i, p in enumerate(points):
        try:
            # with tensors: the function a launch on them compiles (their alignment and divisibility included)
            func = (kernel.launch_func if with_tensors else kernel.specialize)(*args, **kwargs, **p.config)
        except Exception as err:  # noqa: BLE001 - recorded and shown
            p.error, p.stage = error_text(err), "elaborate"
            continue
        # workers hide the GPU: what the lowering needs to know of it goes with the IR (and the cache key)
        funcs[i] = func = with_device_facts(func, target, lowering_options)
        jobs.append({"id": i, "ir": func.script(), "target": str(target), "options": compile_options,
                     "lowering": lowering})
    result.timings["elaborate"] = time.perf_counter() - t0

    # 2. compile in parallel, 3. prune
    reporter = make_reporter(opts.progress, len(points), name)
    _begin(reporter, "compile", len(points))
    for p in points:
        if p.error is not None:
            reporter.update(result, p, "compile")
    compile_pool = _make_pool(opts.pool, opts.workers, len(jobs), use_disk, opts.compile_timeout_s, result)
    result.pool, result.workers = compile_pool.kind, compile_pool.workers
    limits = limits_for(arch, use_device=gpu)
    outcomes: dict[int, dict] = {}
    t0 = time.perf_counter()
    busy = 0.0
    try:
        for out in compile_pool.run(jobs):
            i = int(out["id"])
            p = points[i]
            outcomes[i] = out
            busy += float(out.get("seconds") or 0.0)
            p.compile_s = out.get("seconds")
            if out.get("pid") is not None:
                p.compiled_by = f"pid {out['pid']}" + (f" on {out['host']}" if out.get("host") else "")
            if not out.get("ok"):
                refusal = lowering_refusal(out.get("error") or "")
                if refusal is not None:
                    p.pruned, p.stage = refusal, "resources"
                else:
                    p.error, p.stage = out.get("error") or "compile failed", out.get("stage") or "compile"
            else:
                p.resources = out.get("resources") or {}
                threads = out.get("threads") or _threads_of(funcs[i])
                p.pruned = resource_problem(p.resources, threads, limits, opts.max_spill_bytes)
                if p.pruned is not None:
                    p.stage = "resources"
            reporter.update(result, p, "compile")
    finally:
        if not via_ray_actors:
            compile_pool.close()
    result.timings["compile_wall"] = time.perf_counter() - t0
    result.timings["compile_busy"] = busy
    survivors = [i for i, p in enumerate(points) if p.compiled]

    # 4. time, one configuration at a time
    if mode != "compile-only" and survivors:
        _begin(reporter, "time", len(survivors))
        snapshot = _snapshot(kernel, args, opts.restore)
        try:
            if via_ray_actors:
                from .ray_pool import time_on_actors

                time_on_actors(
                    kernel,
                    args,
                    kwargs,
                    points,
                    survivors,
                    funcs,
                    outcomes,
                    result,
                    reporter,
                    target=str(target),
                    options=compile_options,
                    lowering=lowering,
                    device=ray_actor_device,
                    flops=opts.flops,
                    nbytes=opts.bytes,
                    warmup_ms=opts.warmup_ms,
                    rep_ms=opts.rep_ms,
                    confirm=opts.confirm,
                    rounds=opts.rounds,
                )
            else:
                _time_here(kernel, args, kwargs, points, survivors, outcomes, result, reporter, opts)
        finally:
            _restore(snapshot)
            if via_ray_actors:
                compile_pool.close()
    reporter.close(result)

    best = result.best() if mode != "compile-only" else None
    result.best_config = dict(best.config) if best is not None else None
    result.timings["total"] = time.perf_counter() - t_start
    if mode == "gpu" and best is None and survivors:
        result.notes.append("no configuration ran successfully")
    if not survivors:
        result.notes.append("every configuration failed or was pruned")
    if use_store and best is not None:
        result.results = str(tune_store.save(store_key, material, result.to_dict()))
    if opts.results is not None:
        result.save(opts.results)
    return result


def _stored_result(store: TuneStore, key: str, configs: list[dict]) -> TuneResult | None:
    """The stored search for `key` whose best configuration is one of `configs`, or None; a damaged record is
    reported and removed by the store (or here, when it does not read back), so the caller searches again."""
    record = store.load(key, configs)
    if record is None:
        return None
    try:
        cached = TuneResult.from_dict(record["result"], results=str(store.path(key)))
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        store.reject(key, f"its search result does not read back: {type(err).__name__}: {err}")
        return None
    cached.best_config = best_in(record["result"]["best"], configs)   # the space's values (JSON made lists)
    cached.from_cache = True
    return cached


def _begin(reporter, phase: str, total: int) -> None:
    begin = getattr(reporter, "begin", None)
    if begin is not None:
        begin(phase, total)


def _lowering_options(kernel=None) -> dict:
    """The kernel's lowering options as of now (its options=, tile_nb.set_options, the environment), whole: a
    job carries them as its options (compile_worker.job_lowering), not as environment variables."""
    from ..lower.options import current

    return current(getattr(kernel, "options", None)).to_dict()


def _threads_of(func) -> int | None:
    attrs = getattr(func, "attrs", None)
    try:
        return int(attrs["tile_nb.threads"]) if attrs is not None and "tile_nb.threads" in attrs else None
    except (TypeError, ValueError):
        return None


def _make_pool(
    pool: str, workers: int | None, n_jobs: int, use_disk: bool, timeout_s: float, result: TuneResult
):
    from .pool import InlinePool, ProcessPool, default_workers

    if pool == "ray":
        if not use_disk:
            raise ConfigError("pool='ray' hands kernels over through the disk cache, which is turned off "
                              "(TILE_NB_DISABLE_CACHE or compile_options cache=False)")
        from .ray_pool import RayPool

        return RayPool()
    if pool == "inline" or workers == 0 or n_jobs <= 1:
        return InlinePool()
    if pool != "process":
        raise ConfigError(f"pool must be 'process', 'inline' or 'ray'; got {pool!r}")
    if not use_disk:
        result.notes.append(
            "the disk cache is off, so worker processes cannot hand kernels over: compiled in this "
            "process, one at a time"
        )
        return InlinePool()
    return ProcessPool(workers or default_workers(n_jobs), timeout_s=timeout_s)


def _snapshot(kernel, args: tuple, restore: tuple[str, ...] | None) -> list:
    if not restore:
        return []
    names = [p.name for p in kernel.signature.runtime]
    return [
        (args[names.index(n)], args[names.index(n)].clone()) for n in restore if names.index(n) < len(args)
    ]


def _restore(snapshot: list) -> None:
    for tensor, saved in snapshot:
        tensor.copy_(saved)


def _time_here(
    kernel, args, kwargs, points, survivors, outcomes, result, reporter, opts: TuneOptions
) -> None:
    """Time the survivors on this process's GPU, then re-time the best few in interleaved rounds."""
    flops, nbytes, warmup_ms, rep_ms = opts.flops, opts.bytes, opts.warmup_ms, opts.rep_ms
    if not any(is_tensor(a) for a in args):
        args = make_inputs(kernel, device="cuda", **kwargs, **points[survivors[0]].config)
    t0 = time.perf_counter()
    launchers = {}
    rebuilt = []
    for i in survivors:
        p = points[i]
        stage = "run"
        try:
            launch = kernel.launcher(*args, **kwargs, **p.config)
            here = outcomes.get(i, {}).get("pid") == os.getpid()     # compiled in this process: in memory
            if launch.kernel is not None and not here and not launch.kernel.from_cache:
                rebuilt.append(label(p.config))
            launch()
            sync(True)
            stage = "time"
            p.timing = do_bench(launch, warmup_ms=warmup_ms, rep_ms=rep_ms, device="cuda")
            p.set_rates(flops, nbytes, launch.args)
            launchers[i] = launch
        except Exception as err:  # noqa: BLE001 - recorded and shown
            p.error, p.stage, p.timing = error_text(err), stage, None
        reporter.update(result, p, "time")
    result.timings["bench"] = time.perf_counter() - t0
    if rebuilt:
        result.notes.append(
            f"{len(rebuilt)} configuration(s) were built again in this process (the worker's cache "
            f"entry had no loadable module): {', '.join(rebuilt[:4])}"
        )
    retime_best(
        result,
        points,
        launchers,
        confirm=opts.confirm,
        rounds=opts.rounds,
        flops=flops,
        nbytes=nbytes,
        time_one=lambda i: (
            do_bench(launchers[i], warmup_ms=warmup_ms, rep_ms=rep_ms, device="cuda").median_ms
        ),
        args_of=lambda i: launchers[i].args,
    )
