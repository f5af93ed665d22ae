"""The `--bench` (with `--flops`, `--bytes`, `--baseline`, or on `--shapes`), `--sweep` and `--tune` options
of `%%tilekernel`.

They turn the magic line's expressions into the arguments of `tile_nb.bench.bench`, `.sweep` and `.tune`:
`--flops "2*M*N*K"` is evaluated per configuration with the configuration's values (and the fixed `--shapes`)
as names; `--baseline "torch.matmul(A, B)"` is evaluated on each call with the kernel's tensors bound to its
parameter names, so it times the same inputs as the kernel.
"""
from __future__ import annotations

from typing import Any

from IPython.core.error import UsageError

from tile_nb.bench import bench, make_inputs, sweep

__all__ = ["bench_from_magic", "parse_sweep", "sweep_from_magic", "tune_from_magic"]


def parse_sweep(text: str, namespace: dict | None = None, option: str = "--sweep") -> dict[str, list]:
    """`"block_M=64,128 block_N=64,128"` -> {"block_M": [64, 128], "block_N": [64, 128]}.

    Values are Python expressions (evaluated in `namespace`); a name with one
    value is swept over that one value.
    """
    params: dict[str, list] = {}
    for item in text.split():
        name, sep, values = item.partition("=")
        if not sep or not name.isidentifier() or not values:
            raise ValueError(f"{option} takes NAME=V1,V2,... items separated by spaces, such as "
                             f"\"block_M=64,128 block_N=64,128\"; got {item!r}")
        try:
            evaluated = eval(f"({values},)", dict(namespace or {}))
        except Exception as err:  # noqa: BLE001
            raise ValueError(f"{option} {item!r}: {values!r} is not a comma-separated list of Python values "
                             f"({type(err).__name__}: {err})") from None
        params[name] = list(evaluated)
    if not params:
        raise ValueError(f"{option} needs at least one NAME=V1,V2,... item")
    return params


def _unquote(text: str | None) -> str | None:
    if text and len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    return text


def _code(text: str | None, option: str):
    text = _unquote(text)
    if not text:
        return None, None
    try:
        return compile(text, f"<%%tilekernel {option}>", "eval"), text
    except SyntaxError:
        raise UsageError(f"{option} takes a Python expression; got {text!r}") from None


def _input_names(kernel) -> list[str]:
    return [p.name for p in getattr(getattr(kernel, "signature", None), "runtime", ())]


def _work(code, namespace: dict, values: dict):
    if code is None:
        return None
    return lambda config=None: eval(code, namespace, {**values, **(config or {})})


def _baseline(code, namespace: dict, names: list[str]):
    """A baseline taking the kernel's arguments, evaluating the expression with them
    bound to the parameter names."""
    if code is None:
        return None

    def baseline(*args):
        # strict=False: arguments past the runtime parameters have no name here
        return eval(code, namespace, dict(zip(names, args, strict=False)))

    return baseline


def bench_from_magic(kernel, opts, args: tuple | None, kwargs: dict, namespace: dict,
                     consts: dict | None = None):
    """`--bench` with --flops/--bytes/--baseline, or with --shapes (random inputs): a `BenchView`."""
    flops_code, _ = _code(opts.flops, "--flops")
    bytes_code, _ = _code(opts.bytes, "--bytes")
    base_code, base_text = _code(opts.baseline, "--baseline")
    call_kwargs = dict(kwargs)
    if args is None:
        args = make_inputs(kernel, **kwargs)
    names = _input_names(kernel)
    # strict=False: arguments past the runtime parameters have no name here
    values = {**(consts or {}), **dict(zip(names, args, strict=False)), **kwargs}
    flops = _work(flops_code, namespace, values)
    nbytes = _work(bytes_code, namespace, values)
    baseline = _baseline(base_code, namespace, names)
    return bench(
        kernel,
        *args,
        flops=flops() if flops else None,
        bytes=nbytes() if nbytes else None,
        baseline=baseline,
        baseline_name=base_text,
        backend="cpu" if opts.cpu else None,
        **call_kwargs,
    )


def sweep_from_magic(kernel, opts, args: tuple | None, kwargs: dict, namespace: dict,
                     consts: dict | None = None) -> Any:
    """`--sweep SPEC`: a `SweepView` (with `--call`, over its fixed arguments; else on random inputs)."""
    try:
        params = parse_sweep(_unquote(opts.sweep), namespace)
    except ValueError as err:
        raise UsageError(str(err)) from None
    flops_code, _ = _code(opts.flops, "--flops")
    bytes_code, _ = _code(opts.bytes, "--bytes")
    base_code, base_text = _code(opts.baseline, "--baseline")
    fixed = dict(kwargs)
    options: dict[str, Any] = dict(
        flops=_work(flops_code, namespace, {**(consts or {}), **fixed}),
        bytes=_work(bytes_code, namespace, {**(consts or {}), **fixed}),
        baseline=_baseline(base_code, namespace, _input_names(kernel)), baseline_name=base_text,
        results=_unquote(opts.results), backend="cpu" if opts.cpu else None)
    if args is not None:
        return sweep(kernel, params, args=args, kwargs=fixed, **options)
    return sweep(kernel, params, make_args=fixed, **options)


def tune_from_magic(kernel, opts, args: tuple | None, kwargs: dict, namespace: dict,
                    consts: dict | None = None) -> Any:
    """`--tune [SPEC]`: a `TuneResult`. SPEC is a grid like --sweep's; without one, the kernel's own
    `@tile_nb.autotune` configurations. With `--call`, on its arguments; else
    on random inputs of `--shapes`."""
    from tile_nb.bench.tuning import tune

    spec = _unquote(opts.tune)
    if spec:
        try:
            configs: Any = parse_sweep(spec, namespace, "--tune")
        except ValueError as err:
            raise UsageError(str(err)) from None
    elif hasattr(kernel, "configs") and hasattr(kernel, "kernel"):
        configs = kernel.configs
    else:
        raise UsageError("--tune needs a grid such as --tune \"block_M=64,128 num_stages=2,3\", or a kernel "
                         "decorated with @tile_nb.autotune(configs=...)")
    options: dict[str, Any] = {}
    flops_code, _ = _code(opts.flops, "--flops")
    if flops_code is not None:
        options["flops"] = _work(flops_code, namespace, {**(consts or {}), **kwargs})
    if opts.results:
        options["results"] = _unquote(opts.results)
    if not spec:   # the autotuned kernel's own search: it also remembers the choice for its calls
        return kernel.tune(*(args or ()), **options, **kwargs)
    tuned = set(configs)
    fixed = {k: v for k, v in kwargs.items() if k not in tuned}
    return tune(getattr(kernel, "kernel", kernel), configs, *(args or ()), key=getattr(kernel, "key", None),
                **{**dict(getattr(kernel, "tune_options", {}) or {}), **options}, **fixed)
