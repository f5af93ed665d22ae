"""Running one difftest case and comparing its outputs; imports only torch (tile_nb lazily, to compile).

A case is a Python module (`Case.core_text()` in case.py) that defines:
    KERNEL                 the `@tile_nb.jit` kernel
    make_inputs(device)    the call's arguments, built from a fixed seed (outputs poisoned: NaN or a sentinel)
    model(*args)           what the kernel must compute, in torch, from the grammar (never from tile_nb)
    OUTPUTS                output name -> index of the in-place argument, or "return" / "return:<k>"
    RULES                  output name -> {"model": rule, "gpu": rule}; rule = {"kind": "exact"} or
                           {"kind": "close", "rtol": r, "atol": a}
The text of this file is pasted into every reproducer, so a reproducer runs with plain `python`.

An in-place output is a view into a larger poisoned allocation (`tensor._base`): besides the output itself,
the rest of that allocation is compared, so a write past its ends, or into the gaps of a strided view, shows
as a changed poison value ("Y outside its view").
"""
from __future__ import annotations

import traceback

import torch

EXACT = {"kind": "exact"}
# dynamic shared memory per block (opt-in maximum)
SHARED_LIMIT = {"sm_90a": 227 * 1024, "sm_80": 163 * 1024}
_BITS = {torch.float16: torch.int16, torch.bfloat16: torch.int16, torch.float32: torch.int32,
         torch.float64: torch.int64}


def base_of(t):
    """The allocation a tensor views (itself when it is not a view)."""
    return t._base if t._base is not None else t


def compare(actual, expected, rule) -> str | None:
    """None when `actual` matches `expected` under `rule`; else what differs, with the first few elements.

    exact: the same bits (any NaN matches any NaN: outputs are poisoned with NaN, and a NaN's payload is not
    part of the contract). close: |a - e| <= atol + rtol * |e| elementwise (the family sets atol from the
    size of the terms that can cancel); infinities must match exactly and NaN must meet NaN.
    """
    a, e = actual.detach().cpu(), expected.detach().cpu()
    if a.shape != e.shape or a.dtype != e.dtype:
        return f"shape/dtype {tuple(a.shape)} {a.dtype}, expected {tuple(e.shape)} {e.dtype}"
    if a.is_floating_point():
        both_nan = torch.isnan(a) & torch.isnan(e)
        if rule["kind"] == "exact":
            same = both_nan | (a.view(_BITS[a.dtype]) == e.view(_BITS[e.dtype]))
        else:
            a64, e64 = a.double(), e.double()
            close = (a64 - e64).abs() <= rule["atol"] + rule["rtol"] * e64.abs()
            same = both_nan | (a64 == e64) | (close & torch.isfinite(e64) & torch.isfinite(a64))
    else:
        same = a == e
    bad = (~same).nonzero()
    if len(bad) == 0:
        return None
    shown = []
    for index in bad[:6].tolist():
        index = tuple(index)
        shown.append(f"{list(index)}: got {a[index].item()!r}, expected {e[index].item()!r}")
    return f"{len(bad)} of {a.numel()} elements differ ({rule['kind']}); " + "; ".join(shown)


def _tensor_args(args):
    return [(i, a) for i, a in enumerate(args) if isinstance(a, torch.Tensor)]


def _returned(result, where: str):
    items = result if isinstance(result, tuple) else (result,)
    k = int(where.split(":")[1]) if ":" in where else 0
    return items[k]


def run_case(ns, device: str):
    """Run the kernel once on `device` ("cpu": the interpreter). Returns (args, bases before, result)."""
    args = ns["make_inputs"](device)
    before = {i: base_of(a).clone() for i, a in _tensor_args(args)}
    result = ns["KERNEL"](*args)
    return args, before, result


def _outside(view, base):
    """The elements of `base` that `view` does not cover (guard zones, gaps of a strided view), flattened."""
    inside = torch.zeros(base.numel(), dtype=torch.bool)
    torch.as_strided(inside, view.size(), view.stride(), view.storage_offset()).fill_(True)
    return base.detach().cpu().reshape(-1)[~inside]


def observe(ns, args, result) -> dict:
    """What a run produced, as named parts on the CPU: each output (in its own coordinates) and, for in-place
    outputs, the rest of its allocation ("Y outside its view"), which must keep its poison."""
    parts = {}
    for name, where in ns["OUTPUTS"].items():
        if isinstance(where, str):
            parts[name] = _returned(result, where).detach().cpu()
            continue
        view = args[where]
        parts[name] = view.detach().cpu().clone()
        if view._base is not None:
            parts[f"{name} outside its view"] = _outside(view, base_of(view))
    return parts


def expect(ns, args, before, model_out) -> dict:
    """The parts `observe` should see: the model's values, and the untouched poison around them."""
    parts = {}
    for name, where in ns["OUTPUTS"].items():
        parts[name] = model_out[name].detach().cpu()
        if not isinstance(where, str) and args[where]._base is not None:
            parts[f"{name} outside its view"] = _outside(args[where], before[where])
    return parts


def _rule(ns, part: str, which: str) -> dict:
    return EXACT if part.endswith(" outside its view") else ns["RULES"][part][which]


def _inputs_unchanged(ns, args, before, who: str) -> list[str]:
    problems = []
    outputs = {i for i in ns["OUTPUTS"].values() if not isinstance(i, str)}
    for i, a in _tensor_args(args):
        if i not in outputs:
            diff = compare(base_of(a), before[i], EXACT)
            if diff:
                problems.append(f"{who} changed input argument {i}: {diff}")
    return problems


def check_interpreter(ns) -> tuple[list[str], dict]:
    """The interpreter against the model; also that inputs are left as they were. Returns (problems, the parts
    the interpreter produced)."""
    args = ns["make_inputs"]("cpu")
    model_out = ns["model"](*[a.clone() if isinstance(a, torch.Tensor) else a for a in args])
    before = {i: base_of(a).clone() for i, a in _tensor_args(args)}
    try:
        result = ns["KERNEL"](*args)
    except Exception as err:  # noqa: BLE001 - any exception is a finding, reported with its type
        return [f"interpreter raised {type(err).__name__}: {_indented(err)}"], {}
    actual, expected = observe(ns, args, result), expect(ns, args, before, model_out)
    problems = []
    for part, value in expected.items():
        diff = compare(actual[part], value, _rule(ns, part, "model"))
        if diff:
            problems.append(f"interpreter vs model, output {part}: {diff}")
    return problems + _inputs_unchanged(ns, args, before, "the interpreter"), actual


def check_gpu(ns, interp_parts: dict | None = None, device: str = "cuda") -> list[str]:
    """The compiled kernel on CUDA tensors against the interpreter on the same inputs (and against the model,
    to say which side is off). `device="cpu"` runs the same comparison interpreter against interpreter (a test
    of this code without a GPU)."""
    if interp_parts is None:
        args, _, result = run_case(ns, "cpu")
        interp_parts = observe(ns, args, result)
    args = ns["make_inputs"](device)
    model_out = ns["model"](*[a.cpu() if isinstance(a, torch.Tensor) else a for a in args])
    before = {i: base_of(a).clone() for i, a in _tensor_args(args)}
    try:
        result = ns["KERNEL"](*args)
        if device != "cpu":
            torch.cuda.synchronize()
    except Exception as err:  # noqa: BLE001
        return [f"GPU run raised {type(err).__name__}: {_indented(err)}"]
    actual, expected = observe(ns, args, result), expect(ns, args, before, model_out)
    problems = []
    for part in expected:
        diff = compare(actual[part], interp_parts[part], _rule(ns, part, "gpu"))
        if diff:
            vs_model = compare(actual[part], expected[part], _rule(ns, part, "gpu"))
            interp_ok = compare(interp_parts[part], expected[part], _rule(ns, part, "model")) is None
            problems.append(f"GPU vs interpreter, output {part}: {diff} [GPU vs model: "
                            f"{'agrees' if vs_model is None else 'differs'}; interpreter vs model: "
                            f"{'agrees' if interp_ok else 'differs'}]")
    return problems + _inputs_unchanged(ns, args, before, "the GPU run")


def classify_compile_error(err) -> str:
    """"refused" for a clear error about the user's kernel: a TileNBError, or the lowering's
    NotImplementedError (LoweringError) naming what it cannot lower; "crash" for anything else (TVM errors,
    InternalError, AttributeError...)."""
    from tile_nb.errors import TileNBError

    if isinstance(err, (TileNBError, NotImplementedError)) and "InternalError" not in str(err):
        return "refused"
    return "crash"


def describe_refusal(err) -> str:
    """The refusal's message, and whether it is a TileNBError that points at the user's line."""
    line = getattr(err, "lineno", None)
    where = f"line {line}" if line is not None else "no source line"
    return f"{type(err).__name__} ({where}): {_first_lines(err, 1)}"


def check_compile(ns, target: str, max_spill_bytes: int = 0) -> tuple[str, str]:
    """Lower and build for `target` without a GPU (nvcc makes the cubin, ptxas -v gives the resources).

    Returns (outcome, detail): "ok", "refused" (a clear error naming the construct), "crash", or "resources"
    (ptxas reported spills beyond `max_spill_bytes`, a stack frame, or the
    shared memory is over the arch limit).
    """
    args = ns["make_inputs"]("cpu")
    try:
        kernel = ns["KERNEL"].compile(*args, target=target)
    except Exception as err:  # noqa: BLE001
        kind = classify_compile_error(err)
        if kind == "refused":
            return kind, describe_refusal(err)
        return kind, f"{type(err).__name__}: {_first_lines(err)}\n" + "".join(
            traceback.format_exception(type(err), err, err.__traceback__)[-4:])
    res = kernel.resources
    if kernel.cubin is None or res is None:
        return "crash", f"no cubin or ptxas report for {target} (is nvcc installed?)"
    issues = []
    if res.spill_stores + res.spill_loads > max_spill_bytes:
        issues.append(f"spills {res.spill_stores} B stored / {res.spill_loads} B loaded")
    if res.stack_bytes:
        issues.append(f"{res.stack_bytes} B stack frame")
    arch = target.split("=")[-1]
    limit = SHARED_LIMIT.get(arch)
    if limit is not None and res.total_shared_bytes > limit:
        issues.append(f"{res.total_shared_bytes} B shared memory > {limit} B limit of {arch}, compiled "
                      "without an error")
    if issues:
        return "resources", f"{target}: " + "; ".join(issues) + f" ({res})"
    return "ok", str(res)


def _indented(err) -> str:
    """The whole message (a TileNBError's includes the user's line and a
    caret), continuation lines indented."""
    return str(err).rstrip().replace("\n", "\n        ")


def _first_lines(err, n: int = 3) -> str:
    lines = [line for line in str(err).splitlines() if line.strip()]
    return " | ".join(lines[:n]) if lines else repr(err)


def main(ns) -> int:
    """A reproducer's entry point: interpreter vs model, compile for sm_90a and sm_80, and (with a GPU) the
    compiled kernel vs the interpreter. Prints each result; returns 1 when any check fails."""
    failed = False
    print(f"case: {ns.get('SPEC')}")
    problems, outputs = check_interpreter(ns)
    print("interpreter vs model:", "ok" if not problems else "FAILED")
    for p in problems:
        print("   ", p)
    failed |= bool(problems)
    for target in ("sm_90a", "sm_80"):
        outcome, detail = check_compile(ns, target)
        print(f"compile {target}: {outcome}: {detail}")
        failed |= outcome in ("crash", "resources")
    if torch.cuda.is_available():
        problems = check_gpu(ns, outputs or None)
        print("GPU vs interpreter:", "ok" if not problems else "FAILED")
        for p in problems:
            print("   ", p)
        failed |= bool(problems)
    else:
        print("GPU vs interpreter: skipped (no CUDA device)")
    return 1 if failed else 0
