"""The lowering options: one typed, frozen value, resolved once per compilation and keyed into every cache.

    # func attributes > per kernel > set_options > environment > default
    opts = resolve(func, kernel={"tma": False})
    opts.tma, opts.key()

Where a value comes from, strongest first:
1. the PrimFunc's attribute (`func.with_attr("tile_nb.tma", 0)`): a
   per-function override, part of the IR text;
2. the kernel's options (`@tile_nb.jit(options={"tma": False})`, `rt.compile(..., lowering=...)`): a dict sets
   the fields it names; a whole `LoweringOptions` sets every field (nothing below applies);
3. the process's options set at run time (`tile_nb.set_options(tma=False)`,
   `with tile_nb.options(tma=False):`);
4. the environment variable (`TILE_NB_TMA=0`), read at each resolution and checked (a bad value is refused
   with an error naming the variable and its accepted values);
5. the field's default.
`None` is "auto": the lowering decides (tma: wherever legal and measured
faster; sm_count: the GPU's, else 132).

`set_options` / `options()` bump `generation()` and call the functions registered with `on_change` (the JIT
forgets the launches it kept, so a shape it has already run compiles again under the new options).
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import threading
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

__all__ = ["ENV_SWITCHES", "LoweringOptions", "LoweringOptionError", "current", "generation", "on_change",
           "options", "resolve", "set_options"]


def _opt(default, env: str | None, attr: str, doc: str):
    return field(default=default, metadata={"env": env, "attr": attr, "doc": doc})


@dataclass(frozen=True)
class LoweringOptions:
    """Every choice the lowering leaves to the user; `None` is "auto" (the lowering decides where legal)."""

    wgmma: bool = _opt(True, "TILE_NB_WGMMA", "tile_nb.wgmma",
                       "T.gemm on Hopper wgmma where the tile fits (sm_90a); False: mma.sync everywhere")
    wgmma_register_a: bool = _opt(
        True,
        None,
        "tile_nb.wgmma_register_a",
        "a register fragment as wgmma's A operand is read from registers; False: staged "
        "through shared memory",
    )
    wgmma_column_split: bool | None = _opt(
        None,
        None,
        "tile_nb.wgmma_column_split",
        "where a T.gemm's rows are fewer than 64 per warpgroup (64 rows on 256 threads: MLA decode), the "
        "warpgroups split its columns and run wgmma (tilelang's FullCol policy); None: where the plan then "
        "fits, else mma.sync (the plan's notes say so); True: always; False: mma.sync there",
    )
    wgmma_transpose_a: bool = _opt(
        True,
        "TILE_NB_WGMMA_TRANSPOSE_A",
        "tile_nb.wgmma_transpose_a",
        "T.gemm(transpose_A=True) with a 16-bit A stored [K, M] in shared memory runs on wgmma (an "
        "MN-major A, the instruction's transpose immediate); False: on mma.sync (ldmatrix.trans), as every "
        "accumulator it adds to",
    )
    wgmma_overlap: bool = _opt(False, None, "tile_nb.wgmma_overlap",
                               "a cp.async pipeline keeps one wgmma group in flight across k-tiles")
    wgmma_late_wait: bool = _opt(
        True,
        "TILE_NB_WGMMA_LATE_WAIT",
        "tile_nb.wgmma_late_wait",
        "outside TMA loops, a wgmma T.gemm is waited for where a later statement of its block first uses its "
        "accumulator or operands (or at the block's next barrier or end), not right after it: the tensor "
        "cores run it while the statements between run; False: wait right after each T.gemm",
    )
    raster: int = _opt(8, "TILE_NB_RASTER", "tile_nb.raster_group",
                       "CTAs of a 2-d GEMM grid run in groups of this many rows (L2 reuse); 1: launch order")
    tma: bool | None = _opt(
        None,
        "TILE_NB_TMA",
        "tile_nb.tma",
        "T.Pipelined as TMA loads + mbarriers on sm_90a (tma.py); True: wherever legal, "
        "False: never (cp.async), None: where legal except where cp.async measured faster",
    )
    producer_warp: bool | None = _opt(
        None,
        "TILE_NB_PRODUCER_WARP",
        "tile_nb.producer_warp",
        "a producer warp issues the TMA loads; False: the first consumer thread "
        "does, True: always a warp, None: no warp only where two 256-thread CTAs "
        "with several T.gemm fit an SM",
    )
    pingpong: bool = _opt(
        False,
        "TILE_NB_PINGPONG",
        "tile_nb.wgmma_pingpong",
        "consumer warpgroups of a TMA loop with several T.gemm take turns at the tensor cores",
    )
    softmax_overlap: bool = _opt(True, "TILE_NB_SOFTMAX_OVERLAP", "tile_nb.softmax_overlap",
                                 "a TMA loop with two T.gemm overlaps the second with the next iteration's "
                                 "register work (FlashAttention-3); False: in order")
    heavy_first: bool = _opt(
        True,
        "TILE_NB_HEAVY_FIRST",
        "tile_nb.heavy_first",
        "where the pipelined loop runs longer for larger blockIdx.x, launch the heaviest "
        "CTAs first; False: launch order",
    )
    persistent: bool | None = _opt(
        None,
        "TILE_NB_PERSISTENT",
        "tile_nb.persistent",
        "one CTA per SM walks a TMA kernel's tiles (persistent.py); True also says in "
        "the plan why a kernel did not get it, False: never",
    )
    sm_count: int | None = _opt(None, "TILE_NB_SM_COUNT", "tile_nb.sm_count",
                                "SMs a persistent kernel fills; None: the GPU's when built for it, else 132")
    tma_store: bool | None = _opt(
        None,
        "TILE_NB_TMA_STORE",
        "tile_nb.tma_store",
        "a TMA kernel's 16-bit output tile leaves through shared memory and TMA stores "
        "(epilogue.py); True also says why not, False: stores from registers",
    )
    producer_stores: bool | None = _opt(
        None,
        "TILE_NB_PRODUCER_STORES",
        "tile_nb.producer_stores",
        "the producer warp of a persistent kernel issues the TMA stores; False: the consumers do",
    )
    stream_k: bool | None = _opt(
        None,
        "TILE_NB_STREAM_K",
        "tile_nb.stream_k",
        "a persistent GEMM shares its last wave's k-tiles among all CTAs (stream_k.py); "
        "True: wherever legal (and says why not), False: never, None: where measured to pay",
    )
    cluster: int = _opt(
        0,
        "TILE_NB_CLUSTER",
        "tile_nb.cluster",
        "CTAs per cluster of a persistent TMA kernel sharing an operand by multicast (cluster.py); "
        "2 is supported, 0: none",
    )
    approx_math: bool = _opt(
        False,
        "TILE_NB_APPROX_MATH",
        "tile_nb.approx_math",
        "T.tanh, T.exp and T.exp2 of float32 (float16 / bfloat16 through float32) as the GPU's "
        "approximate instructions, whatever the compiler and its fast_math: tanh.approx.f32 "
        "(relative error at most 2^-11, PTX ISA) and ex2.approx.ftz.f32 (exp as ex2 of "
        "x * log2(e), as __expf); the interpreter stays precise (docs/IR.md). tilelang's "
        "pass_configs 'tl.enable_fast_math'",
    )
    vector_atomics: bool = _opt(
        True,
        None,
        "tile_nb.vector_atomics",
        "float32 atomic adds of a register fragment into a global tensor (`T.atomic_add(dQ[..., j], "
        "dq[i, j])` in T.Parallel) go two or four neighbouring registers per atomicAdd(float2 / "
        "float4*) on sm_90 and later (emit/vector_atomics.py); False: one atomicAdd per element",
    )
    wide_swizzle: bool = _opt(
        True,
        None,
        "tile_nb.wide_swizzle",
        "32- and 64-bit shared operands of T.gemm (the FMA and TF32 paths) get the XOR swizzle "
        "of 16-byte chunks: the 8 rows a warp reads at once hit 8 bank groups (8-way conflicts "
        "at a 32-float row otherwise); False: row-major, fewer address registers",
    )
    wgmma_swap_lbo_sbo: bool = _opt(
        False,
        None,
        "tile_nb.wgmma_swap_lbo_sbo",
        "swap the leading and stride byte offsets in the wgmma descriptor of a [K, N] B operand: a probe "
        "of the descriptor on the GPU (benchmarks/gemm.py --probe), not a tuning choice",
    )

    def __post_init__(self):
        for f in fields(self):
            object.__setattr__(self, f.name, _check(f, getattr(self, f.name), f"LoweringOptions.{f.name}"))

    # ---- what cache keys and workers use ------------------------------------------------------------------
    def key(self) -> tuple:
        """Every field's value in field order: hashable, stable across processes."""
        return tuple(getattr(self, f.name) for f in fields(self))

    def changed(self) -> dict[str, Any]:
        """The fields that differ from the defaults (JSON-serializable)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) != f.default}

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_dict(cls, values: Mapping) -> LoweringOptions:
        """A whole value from field names (the others at their defaults); unknown
        names refused with the list."""
        return cls(**_known(values, "LoweringOptions"))

    def replace(self, **changes) -> LoweringOptions:
        return dataclasses.replace(self, **_known(changes, "LoweringOptions.replace"))

    @classmethod
    def from_environment(cls, env: Mapping[str, str] | None = None) -> dict[str, Any]:
        """The fields the environment variables set (a partial layer), values checked."""
        return _environment_layer(os.environ if env is None else env)

    def describe(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.changed().items()) or "defaults"


FIELDS = {f.name: f for f in fields(LoweringOptions)}
ENV_SWITCHES = tuple(f.metadata["env"] for f in fields(LoweringOptions) if f.metadata["env"])


class LoweringOptionError(ValueError):
    """A lowering option with an unknown name or a value it does not accept."""


_TRUE, _FALSE, _AUTO = ("1", "true", "yes", "on"), ("0", "false", "no", "off"), ("auto", "")


def _kind(f) -> str:
    text = str(f.type)
    return ("tristate" if text.startswith("bool") and "None" in text else "bool" if text.startswith("bool")
            else "int?" if "None" in text else "int")


def _check(f, value, where: str):
    """`value` as the field's type: bools from bool/0/1 (and strings "0"/"1"/"true"/... from the environment),
    ints from ints or digit strings, None (or "auto") for auto where the field has it."""
    kind = _kind(f)
    accepted = {"bool": "True/False (or 0/1)", "tristate": "True/False/None (or 0/1/auto)",
                "int": "an integer", "int?": "an integer or None (auto)"}[kind]
    raw = value
    if isinstance(value, str):  # the environment's spelling
        accepted = {"bool": "0 or 1", "tristate": "0, 1 or auto", "int": "an integer",
                    "int?": "an integer or auto"}[kind]
    if hasattr(value, "value") and not isinstance(value, (bool, int, str)):  # a TVM IntImm attribute
        value = value.value
    if isinstance(value, str):
        text = value.strip().lower()
        if text in _AUTO and kind in ("tristate", "int?"):
            return None
        if kind in ("bool", "tristate") and text in _TRUE + _FALSE:
            return text in _TRUE
        if kind in ("int", "int?") and text.lstrip("-").isdigit():
            return int(text)
    elif value is None and kind in ("tristate", "int?"):
        return None
    elif kind in ("bool", "tristate") and isinstance(value, int) and value in (0, 1):
        return bool(value)
    elif kind in ("int", "int?") and isinstance(value, int) and not isinstance(value, bool):
        return value
    raise LoweringOptionError(f"{where} = {raw!r}: expected {accepted}")


def _known(values: Mapping, where: str) -> dict:
    unknown = sorted(set(values) - set(FIELDS))
    if unknown:
        raise LoweringOptionError(f"{where}: unknown lowering option{'s' if len(unknown) > 1 else ''} "
                                  f"{', '.join(map(repr, unknown))}; the options are {', '.join(FIELDS)}")
    return dict(values)


def _environment_layer(env: Mapping[str, str]) -> dict[str, Any]:
    out = {}
    for name, f in FIELDS.items():
        var = f.metadata["env"]
        if var is not None and var in env:
            out[name] = _check(f, env[var], var)
    return out


def _attribute_layer(func) -> dict[str, Any]:
    attrs = getattr(func, "attrs", None) or {}
    out = {}
    for name, f in FIELDS.items():
        value = attrs.get(f.metadata["attr"], None)
        if value is not None:
            out[name] = _check(f, value, f"the function attribute {f.metadata['attr']}")
    return out


_DEFAULT = LoweringOptions()


# ---- options set at run time: one process-wide layer, changes counted -------------------------------------
_lock = threading.Lock()
_process: dict[str, Any] = {}  # the layer of set_options / options()
_generation = 0
_watchers: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def generation() -> int:
    """Bumped by every `set_options` / `options()` entry and exit."""
    return _generation


def on_change(holder, forget) -> None:
    """Call `forget(holder)` after every change of the run-time options, for as long as `holder` lives (a JIT
    kernel forgets the launches its fast path kept, which do not look at the options)."""
    with _lock:
        _watchers[holder] = forget


def _set_layer(layer: dict) -> None:
    global _process, _generation
    with _lock:
        _process = dict(layer)
        _generation += 1
        _cache.clear()
        watchers = list(_watchers.items())
    for holder, forget in watchers:
        forget(holder)


def set_options(**values) -> None:
    """Set lowering options for this process from now on (above the environment, below a kernel's
    own); a value of `None` for a field that has no "auto" is refused; `set_options()` with no
    arguments keeps what was set."""
    checked = {k: _check(FIELDS[k], v, k) for k, v in _known(values, "set_options").items()}
    _set_layer({**_process, **checked})


def reset_options() -> None:
    """Drop what `set_options` set."""
    _set_layer({})


@contextlib.contextmanager
def options(**values):
    """`with tile_nb.options(tma=False): kernel(...)`: the options inside the block, restored after it."""
    saved = dict(_process)
    set_options(**values)
    try:
        yield current()
    finally:
        _set_layer(saved)


# ---- resolution --------------------------------------------------------------------------------------------
_cache: dict = {}


def current(
    kernel: LoweringOptions | Mapping | None = None, env: Mapping[str, str] | None = None
) -> LoweringOptions:
    """The options of a kernel without function attributes: `kernel`'s, over the run-time options, over the
    environment (`env`, default os.environ), over the defaults."""
    if isinstance(kernel, LoweringOptions):
        return kernel
    env = os.environ if env is None else env
    raw = tuple(env.get(name) for name in ENV_SWITCHES)
    kernel_items = tuple(sorted(kernel.items())) if kernel else ()
    try:
        memo = (raw, _generation, kernel_items)
        hit = _cache.get(memo)
    except TypeError:
        memo = hit = None
    if hit is not None:
        return hit
    layer = {**_environment_layer(env), **_process}
    if kernel:
        layer.update({k: _check(FIELDS[k], v, k) for k, v in _known(kernel, "options").items()})
    resolved = LoweringOptions(**layer) if layer else _DEFAULT
    if memo is not None:
        if len(_cache) > 256:
            _cache.clear()
        _cache[memo] = resolved
    return resolved


def resolve(func=None, kernel: LoweringOptions | Mapping | None = None,
            env: Mapping[str, str] | None = None) -> LoweringOptions:
    """The options the lowering of `func` follows: its function attributes over `current(kernel, env)`."""
    base = current(kernel, env)
    attrs = _attribute_layer(func) if func is not None else {}
    return dataclasses.replace(base, **attrs) if attrs else base


def kernel_options(value) -> LoweringOptions | dict | None:
    """A kernel's `options=` checked at decoration: a LoweringOptions, or a dict of known field names."""
    if value is None or isinstance(value, LoweringOptions):
        return value
    if not isinstance(value, Mapping):
        raise LoweringOptionError(f"options= takes a tile_nb.LoweringOptions or a dict of option names; got "
                                  f"{type(value).__name__}")
    return {k: _check(FIELDS[k], v, k) for k, v in _known(value, "options").items()}
