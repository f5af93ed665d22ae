"""Build a `KernelView` from what the JIT already holds: template, specialized
PrimFunc, compiled kernel, a run.

Everything here is duck-typed, so the views work on any object of the right shape:
- a template: `.script()` (TVMScript with symbolic consts), `.stopped` (None or "reason"), optionally `.func`;
- a specialized function: a TVM `PrimFunc` (`.script()`, `.params`, `.attrs`);
- a compiled kernel: `.cuda_source`, `.ptx`, `.sass`, `.lowered_ir`, `.resources`, `.timings` (stage ->
  seconds), any of them missing or None;
- a jit function: `.template(**compile_kwargs)`, `.specialize(*args, **kwargs)`, `.compile(*args, **kwargs)`.
The notebook only renders what the kernel objects hold (STYLE.md); nothing here compiles by itself.
"""
from __future__ import annotations

import inspect
import linecache
from typing import Any

from tile_nb.notebook.diff import changed_lines
from tile_nb.notebook.linemap import clean_lines, region_line_map, script_lines, shift_line_map
from tile_nb.notebook.views import KernelView, Param, Section

__all__ = [
    "clean_script",
    "const_values",
    "func_params",
    "max_abs_err",
    "signature_of",
    "source_lines",
    "source_of",
    "template_func_of",
    "tensor_device",
    "view_from_parts",
]

def clean_script(text: str) -> str:
    """TVMScript as the views show it: without the printer's `# from tvm... import` header, trailing blanks
    and the front end's internal `tile_nb.*` function attributes."""
    return "\n".join(clean_lines(text)[0])


def _script(obj) -> str:
    if obj is None:
        return ""
    if isinstance(obj, str):
        return obj
    script = getattr(obj, "script", None)
    return script() if callable(script) else str(obj)


def _buffer_type(param):
    """The `tvm.tirx.BufferType` of a PrimFunc param (TIRx buffer params are Vars typed by it), else None."""
    ty = getattr(param, "ty", None)
    return ty if ty is not None and type(ty).__name__ == "BufferType" else None


def _dim_text(dim) -> str:
    return str(dim.value) if type(dim).__name__ == "IntImm" else str(dim)


def _is_var(dim) -> bool:
    return type(dim).__name__ == "Var"


def _is_int(dim) -> bool:
    return isinstance(dim, int) or type(dim).__name__ == "IntImm"


def func_params(func) -> list[Param]:
    """Runtime params of a PrimFunc, in order: buffers as "tensor" and scalar Vars as "scalar"."""
    params = []
    for p in getattr(func, "params", ()):
        ty = _buffer_type(p)
        if ty is not None:
            dims = ", ".join(_dim_text(d) for d in ty.shape)
            strides = list(getattr(ty, "strides", None) or [])
            if strides:
                annotation = (
                    f"T.StridedTensor[[{dims}], [{', '.join(_dim_text(s) for s in strides)}], {ty.dtype}]"
                )
            else:
                annotation = f"T.Tensor[[{dims}], {ty.dtype}]"
            params.append(Param(str(p.name), "tensor", annotation))
        else:
            dtype = getattr(getattr(p, "ty", None), "dtype", None) or getattr(p, "dtype", "")
            params.append(Param(str(p.name), "scalar", f"T.{dtype}"))
    return params


def _shape_pairs(template_func, specialized_func):
    """(template dim, specialized dim) pairs over the buffers' shapes and strides, params matched by name."""
    spec_params = {str(p.name): p for p in getattr(specialized_func, "params", ())}
    for p in getattr(template_func, "params", ()):
        other = spec_params.get(str(p.name))
        t_ty, s_ty = _buffer_type(p), _buffer_type(other) if other is not None else None
        if t_ty is None or s_ty is None:
            continue
        yield from zip(list(t_ty.shape), list(s_ty.shape), strict=True)
        # strict=False: one side may have no strides (row-major)
        yield from zip(list(t_ty.strides or []), list(s_ty.strides or []), strict=False)


def const_values(
    template_func, specialized_func, given: dict | None = None
) -> tuple[dict[str, int], list[str]]:
    """Const values and dynamic dim names, read by comparing the template's and the specialized buffer shapes.

    A symbolic dim of the template that is an integer in the specialized function is a const; one that stays
    symbolic is a `T.dynamic` dim. `given` (keyword arguments such as `M=1024`)
    adds consts used only in the grid.
    """
    consts: dict[str, int] = {}
    dynamic: list[str] = []
    for t_dim, s_dim in _shape_pairs(template_func, specialized_func):
        if not _is_var(t_dim):
            continue
        name = str(t_dim)
        if _is_int(s_dim):
            consts.setdefault(name, int(s_dim))
        elif _is_var(s_dim) and name not in dynamic:
            dynamic.append(name)
    for name, value in (given or {}).items():
        if isinstance(value, int) and not isinstance(value, bool):
            consts.setdefault(name, value)
    return consts, dynamic


def tensor_device(values) -> str:
    """The torch device string of the first tensor among `values` ("cpu" when none is a tensor)."""
    for value in values:
        device = getattr(value, "device", None)
        if device is not None and hasattr(value, "data_ptr"):
            return str(device)
    return "cpu"


def max_abs_err(actual, expected) -> float:
    """Largest absolute difference between two tensors (or tuples of tensors), computed in float64."""
    if isinstance(actual, (tuple, list)):
        return max((max_abs_err(a, e) for a, e in zip(actual, expected, strict=True)), default=0.0)
    import torch

    actual = torch.as_tensor(actual).detach().to("cpu", torch.float64)
    expected = torch.as_tensor(expected).detach().to("cpu", torch.float64)
    if actual.numel() == 0:
        return 0.0
    return float((actual - expected).abs().max())


def _resources(obj) -> dict[str, int] | None:
    if obj is None:
        return None
    keys = ("registers", "shared_bytes", "spill_stores", "spill_loads")
    get = obj.get if isinstance(obj, dict) else (lambda k, d=None: getattr(obj, k, d))
    values = {k: int(get(k, 0) or 0) for k in keys}
    # Shared memory per block: static `__shared__` plus dynamic (tile_nb's Resources keeps them apart).
    values["shared_bytes"] += int(get("dynamic_shared_bytes", 0) or 0)
    return values


def _text_attr(obj, attr: str):
    """A compiled kernel's text attribute; some are made on first access (SASS
    needs cuobjdump), so never raise."""
    try:
        return getattr(obj, attr, None)
    except Exception:  # noqa: BLE001 - a missing disassembler only costs that section
        return None


def _compiled_line_maps(compiled, func, source, tile_op_lines) -> dict[str, dict[int, list[int]]]:
    """"lowered" / "cuda" -> {user line: [lines of that text]}, from the compiled kernel's source regions and
    the phase-2 `func` it was compiled from (empty without one of them)."""
    regions = getattr(compiled, "source_regions", None)
    if func is None or not isinstance(regions, dict):
        return {}
    return {
        text: region_line_map(func, source, regions.get(text), tile_op_lines) for text in ("lowered", "cuda")
    }


def _compiled_sections(
    compiled, *, lowered: bool, cuda: bool, line_maps: dict | None = None
) -> list[Section]:
    line_maps = line_maps or {}
    sections = []
    plan = getattr(compiled, "plan", None)
    if isinstance(plan, dict):
        from tile_nb.notebook.plan import plan_text

        sections.append(Section("plan", "Lowering plan", "text", plan_text(plan)))
    lowered_ir = _text_attr(compiled, "lowered_ir") if lowered else None
    if lowered_ir is not None:
        shown, where = clean_lines(_script(lowered_ir))
        line_map = shift_line_map(line_maps.get("lowered"), where)
        sections.append(
            Section("lowered", "Lowered IR", "python", "\n".join(shown), line_map=_tuples(line_map))
        )
    if cuda:
        for attr, sid, title, language in (("cuda_source", "cuda", "CUDA source", "cuda"),
                                           ("ptx", "ptx", "PTX", "ptx"),
                                           ("sass", "sass", "SASS", "text")):
            text = _text_attr(compiled, attr)
            if text:
                text = str(text).rstrip()
                line_map = None
                if sid == "cuda":  # rstrip keeps the line numbers; lines past the end are dropped
                    line_map = shift_line_map(line_maps.get("cuda"),
                                              list(range(1, len(text.split("\n")) + 1)))
                sections.append(Section(sid, title, language, text, line_map=_tuples(line_map)))
    return sections


def _tuples(line_map: dict[int, list[int]] | None) -> dict[int, tuple[int, ...]] | None:
    return {k: tuple(v) for k, v in line_map.items()} if line_map else None


def _shown_ir(obj, source, tile_op_lines) -> tuple[str, dict[int, tuple[int, ...]] | None]:
    """The displayed TVMScript of a PrimFunc (or any `.script()` object, or text) and its source line map."""
    if obj is None:
        return "", None
    if hasattr(obj, "body") and hasattr(obj, "script"):  # a PrimFunc: the line map comes with the text
        text, line_map = script_lines(obj, source, tile_op_lines)
        return text, _tuples(line_map)
    return clean_script(_script(obj)), None


def source_of(kernel):
    """The `KernelSource` of a jit function (`.definition.source`), or None."""
    source = getattr(getattr(kernel, "definition", None), "source", None)
    return source if hasattr(source, "tree") and hasattr(source, "first_line") else None


def source_lines(source) -> dict | None:
    """The kernel's lines as its file or cell has them (for the view's line
    mapping): first line number, lines."""
    if source is None:
        return None
    count = len(str(source.text).rstrip("\n").split("\n"))
    lines = linecache.getlines(str(source.filename))[source.first_line - 1: source.first_line - 1 + count]
    if not lines:
        return None
    return {"first_line": int(source.first_line), "lines": [line.rstrip("\n") for line in lines]}


_TEMPLATE_FUNC_ATTRS = ("func", "prim_func", "primfunc")


def template_func_of(template):
    """The PrimFunc behind a template object (`.func`, `.prim_func`), the template
    itself if it is one, or None."""
    if template is None:
        return None
    for attr in _TEMPLATE_FUNC_ATTRS:
        func = getattr(template, attr, None)
        if func is not None and hasattr(func, "params"):
            return func
    return template if hasattr(template, "params") else None


def stop_note(stopped, source_filename: str | None = None) -> str | None:
    """Where and why the template stopped: `.stopped` is None, a string, or an
    object with `lineno`/`reason`."""
    if not stopped:
        return None
    lineno, reason = getattr(stopped, "lineno", None), getattr(stopped, "reason", None)
    if reason is None:
        return str(stopped)
    text = f"at line {lineno}" if lineno else "before the end of the body"
    if lineno and source_filename:
        line = linecache.getline(source_filename, lineno).strip()
        if line:
            text += f" (`{line}`)"
    return f"{text}: {reason}"


def _annotated_params(runtime_func, template_func, template, specialized_meta) -> list[Param]:
    """Runtime params in PrimFunc order, with the annotations as the user wrote
    them where the front end kept them.

    The template's annotations (symbolic: `T.Tensor[[M, K], T.float16]`) are preferred; a template that
    stopped early may lack later params, which then come from the specialized function.
    """
    outputs = set(getattr(template, "outputs", None) or getattr(specialized_meta, "outputs", None) or ())
    symbolic = {p.name: p for p in func_params(template_func)} if template_func is not None else {}
    params = []
    for p in func_params(runtime_func):
        p = symbolic.get(p.name, p)
        meta = None
        for source in (template, specialized_meta):
            buffers = getattr(source, "buffers", None) or {}
            if p.name in buffers and getattr(buffers[p.name], "annotation", None) is not None:
                meta = buffers[p.name]
                break
        if meta is not None:
            annotation = repr(meta.annotation)
            kind = getattr(meta, "kind", "tensor")
            if kind == "output" or p.name in outputs:
                annotation = f"T.empty -> {annotation}"
            elif kind == "pointer":
                annotation = f"T.ptr -> {annotation}"
            p = Param(p.name, "tensor", annotation)
        elif p.name in outputs:
            p = Param(p.name, p.kind, f"T.empty -> {p.annotation}")
        params.append(p)
    return params


def view_from_parts(
    name: str,
    *,
    template=None,
    specialized=None,
    compiled=None,
    compile_time: dict | None = None,
    given_consts: dict | None = None,
    run: dict | None = None,
    backend: str | None = None,
    lowered: bool = False,
    cuda: bool = False,
    notes: list[str] | None = None,
    source_filename: str | None = None,
    source=None,
) -> KernelView:
    """Assemble a `KernelView`; every part is optional.

    `template`: a phase-1 template object (an elaboration with `.func`, `.stopped`, `.buffers`, `.consts`,
    `.dynamic`, any of them optional) or a PrimFunc; `specialized`: the phase-2 PrimFunc (or an elaboration);
    `compiled`: a compiled kernel (its lowered IR, CUDA/PTX/SASS are shown when `lowered` /
    `cuda`; its resources and timings always); `compile_time`: the Python compile-time parameters
    and their values; `given_consts`:
    consts given as keywords; `run`: {"device": str, "max_abs_err": float | None}; `backend`: "cuda",
    "cpu-interpreter" or None; `source_filename`: the kernel's file or cell, to quote the line a template
    stopped at; `source`: the kernel's `KernelSource`, for the line mapping (each IR section's `line_map` and
    the view's `source` lines).
    """
    template_func = template_func_of(template)
    specialized_func = template_func_of(specialized)
    sections: list[Section] = []
    template_text = specialized_text = None
    template_map = specialized_map = None
    if template is not None:
        template_text, template_map = _shown_ir(template_func or template, source,
                                                getattr(template, "tile_op_lines", None))
    if specialized is not None:
        specialized_text, specialized_map = _shown_ir(specialized_func or specialized, source,
                                                      getattr(specialized, "tile_op_lines", None))
    if template_text is not None:
        sections.append(Section("template", "Phase 1: template", "python", template_text,
                                note=stop_note(getattr(template, "stopped", None), source_filename),
                                line_map=template_map))
    consts: dict[str, int] = {}
    dynamic: list[str] = list(getattr(template, "dynamic", None) or ())
    if specialized_text is not None:
        changed = None
        if template_text is not None:
            changed = tuple(changed_lines(template_text.split("\n"), specialized_text.split("\n")))
        sections.append(Section("specialized", "Phase 2: specialized", "python", specialized_text,
                                changed_lines=changed, line_map=specialized_map))
        consts, found_dynamic = const_values(template_func, specialized_func, given_consts)
        dynamic += [n for n in found_dynamic if n not in dynamic]
    elif given_consts:
        consts = {k: v for k, v in given_consts.items() if isinstance(v, int) and not isinstance(v, bool)}
    # Consts in the order the kernel declares them (`T.const('M, N, K')`), where the template says.
    order = [str(n) for n in (getattr(template, "consts", None) or ()) if isinstance(n, str)]
    consts = {**{n: consts[n] for n in order if n in consts}, **consts}
    const_names = list(consts) + [n for n in order if n not in consts]

    runtime_func = specialized_func if specialized_func is not None else template_func
    params = _annotated_params(runtime_func, template_func, template, specialized)
    params += [Param(n, "const", "T.const") for n in const_names]
    params += [Param(n, "dynamic", "T.dynamic") for n in dynamic]
    params += [Param(n, "compile_time", _value_text(v)) for n, v in (compile_time or {}).items()]

    timings_ms: dict[str, float] = {}
    resources = None
    if compiled is not None:
        line_maps = _compiled_line_maps(
            compiled, specialized_func, source, getattr(specialized, "tile_op_lines", None)
        )
        sections += _compiled_sections(compiled, lowered=lowered, cuda=cuda, line_maps=line_maps)
        resources = _resources(getattr(compiled, "resources", None))
        pipeline = getattr(compiled, "pipeline", None)
        if pipeline:
            notes = [*(notes or []), f"pipeline: {pipeline}"]
        timings_ms = {str(k): float(v) * 1e3 for k, v in (getattr(compiled, "timings", None) or {}).items()}
    return KernelView(name=name, params=params, consts=consts, backend=backend, sections=sections,
                      resources=resources, timings_ms=timings_ms, run=run, notes=list(notes or []),
                      source=source_lines(source) if source is not None else None)


def _value_text(value: Any) -> str:
    """`= 128`, `= float16`: a compile-time value as the view shows it (stable: no addresses)."""
    text = repr(value)
    if " at 0x" in text or len(text) > 60:
        text = getattr(value, "__name__", None) or type(value).__name__
    return f"= {text}"


def signature_of(kernel) -> inspect.Signature | None:
    """The Python signature behind a jit function (through `__wrapped__` or a `.fn`/`.func` attribute)."""
    for candidate in (kernel, getattr(kernel, "fn", None), getattr(kernel, "func", None)):
        if candidate is None or not callable(candidate):
            continue
        try:
            return inspect.signature(candidate)
        except (TypeError, ValueError):
            continue
    return None
