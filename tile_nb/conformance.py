"""The conformance runner: tilelang's own examples and LazyJIT/eager tests, run on tile_nb from a tilelang
checkout outside this repository (fetched, never copied in), each in its own process.

    python -m tile_nb.conformance PATH [--cases GLOB ...] [--backend interp|cuda] [--timeout S] [--jobs N]
                                       [--json OUT] [--markdown OUT] [--tests GLOB ...] [--run-excluded]
                                       [--budget SECONDS]

Cases:
- every `examples/**/example_*.py`, run through `python -m tile_nb.run` (so `import tilelang` is tile_nb's
  stand-in) with its own checks as the reference. When a test file next to it calls `<example>.main(...)` with
  literal arguments (tilelang's CI sizes, usually small), the case imports the example and makes that call;
  otherwise it runs the example as `__main__` with its default arguments.
- every `examples/**/*.ipynb`: its code cells in order in one process (a cell whose stored outputs show an
  error may raise again; magics become comments), classified like the examples;
- every test function of `testing/python/language/*eager*.py` and `*lazy*.py` (more with `--tests GLOB`), run
  under pytest through `python -m tile_nb.run --pytest`, one process per test.
Each example is classified by the tilelang API names its source uses: `sm_100` (tcgen05, TMEM, ...; Blackwell
only), `AMD` (an amd/ example, MFMA, HIP target), `low-level` (mbarriers, TMA copies, warp specialization,
thread bindings, PTX/extern calls), else `tile-level`. sm_100 and AMD examples are excluded (counted apart)
unless `--run-excluded`. With `--backend interp` (the default without a GPU) each process maps torch's "cuda"
device to the CPU (tile_nb/tilelang/cpu_device.py), so kernels run on tile_nb's interpreter.

Outcomes: pass; fail (the case's own check, an AssertionError); error (anything else; when the cause is a
tilelang API tile_nb lacks, its name is the "missing" column); timeout (`--timeout` seconds per case, the
process group is killed); skip (a pytest skip); excluded; not run (`--budget` was spent before it
started). The max error is the largest absolute difference any
`torch.testing.assert_close` / `torch.allclose` in the case saw.

The examples' own references need what tilelang's examples/requirements name: einops, triton (its kernels run
under TRITON_INTERPRET=1 on the interpreter backend) and flash-linear-attention (kept on its Triton kernels:
FLA_DISABLE_BACKEND_DISPATCH=1), installed where PYTHONPATH finds them (`pip install --target DIR ...`).
flash_attn needs CUDA to build (and the GPU machine has no network); benchmarks/stand_ins/flash_attn is a
torch stand-in for the two functions the examples call, which says so on import. `--deps GLOB=DIR` puts DIR
first on the PYTHONPATH of the cases GLOB matches: `'*=benchmarks/stand_ins'` for that stand-in, and
tilelang's gdn examples call flash-linear-attention's API of June 2025, which no release has
(scripts/conformance_deps.sh).
"""
from __future__ import annotations

import argparse
import ast
import collections
import concurrent.futures
import dataclasses
import datetime
import fnmatch
import json
import os
import platform
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

__all__ = ["Case", "discover", "classify", "run_case", "run_all", "table", "markdown", "main"]

CLASSES = ("tile-level", "low-level", "sm_100", "AMD", "no tilelang", "notebook", "test")
EXCLUDED_CLASSES = ("sm_100", "AMD", "no tilelang")   # counted apart, not run unless --run-excluded
DEFAULT_TESTS = ("testing/python/language/*eager*.py", "testing/python/language/*lazy*.py")

_SM100 = re.compile(r"tcgen05\w*|alloc_tmem|\bTMEM\b|\btmem\w*|\bsm_?100a?\b|blockscaled|"
                    r"compute_version_(?:ge|eq)\(\s*10\b")
_AMD = re.compile(r"\bmfma\w*|\bgfx9\d\d\b|target\s*=\s*[\"']hip|\brocm\b")
_LOW = re.compile(
    r"\bmbarrier\w*|alloc_barrier|alloc_cluster_barrier|barrier_arrive|barrier_wait|tma_copy|"
    r"fence_proxy_async|set_max_nreg|\bT\.ws\b|\bWS(?:Sync|Role|Pipeline|Scope|ID)\b|ws_op|"
    r"get_thread_binding|thread_binding|\bptx_\w+|call_extern|wgmma\w*|ClusterKernel|access_ptr|"
    # (a pass config that turns warp specialization off, tl.disable_warp_specialized, is not a use of it)
    r"tvm_thread_allreduce|cp_async\w*|import_source|\bT\.attr\b|(?<!disable_)warp_specialize\w*|"
    # per-warp tensor-core code written by hand: tilelang's MMA emitters and their ldmatrix / stmatrix
    r"\w*IntrinEmitter\b|\w*_macro_generator\b|\bldmatrix\w*|\bstmatrix\w*"
)


# Errors tile_nb raises that are symptoms of a tilelang form it does not read yet, when the case's
# source uses that form: (error pattern, source pattern, the feature). Shown as "<feature>
# (inferred)" in the missing column.
_SYMPTOMS = (
    (
        re.compile(r"'_TensorType' object is not callable|no tensor dim is exactly"),
        re.compile(r"\bT\.Tensor\("),
        "tilelang.language.Tensor(shape, dtype) call form",
    ),
)


def _infer_missing(case: Case) -> str | None:
    if case.missing or case.status not in ("error", "fail"):
        return case.missing
    try:
        source = Path(case.path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    for error, form, feature in _SYMPTOMS:
        if error.search(case.error) and form.search(source):
            return f"{feature} (inferred)"
    return None


@dataclasses.dataclass
class Case:
    name: str                      # examples/gemm/example_gemm.py, or testing/...py::test_x
    kind: str                      # "example" or "test"
    path: str                      # the script or test file
    klass: str = "tile-level"
    why: list = dataclasses.field(default_factory=list)   # the API names that set the class
    # [args, kwargs] for main(), from a sibling test file; None: run as __main__
    call: list | None = None
    test: str | None = None        # the test function
    status: str = "not run"
    error: str = ""
    missing: str | None = None
    max_error: float | None = None
    seconds: float = 0.0
    # tests: [pytest items passed, pytest items] (parametrized tests have several)
    items: list | None = None
    # interp: the first reason the sm_90a lowering gave for refusing a kernel the interpreter ran (its
    # NotLowerableWarning), None where it took every one: the CPU's estimate of the GPU's outcome
    gpu_lowering: str | None = None
    # a folder put first on PYTHONPATH for this case (--deps): its reference's packages at another version
    deps: str | None = None

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


def classify(source: str, relpath: str = "") -> tuple[str, list[str]]:
    """(class, the names found that decided it) for an example's source text."""
    parts = Path(relpath).parts
    if not re.search(r"^\s*(?:import tilelang|from tilelang\b)", source, re.M):
        return "no tilelang", ["no `import tilelang`"]
    for klass, pattern in (("sm_100", _SM100), ("AMD", _AMD), ("low-level", _LOW)):
        found = sorted(set(pattern.findall(source)))
        if klass == "sm_100" and any("sm100" in p or "tcgen05" in p for p in parts):
            found = found or [next(p for p in parts if "sm100" in p or "tcgen05" in p)]
        if klass == "AMD" and any(re.search(r"(?:^|_)(?:amd|cdna\d*|rocm)(?:_|$|\.py)", p) for p in parts):
            found = found or ["an AMD example (its path)"]
        if found:
            return klass, found[:6]
    return "tile-level", []


def _literal_call(node: ast.Call):
    try:
        args = [ast.literal_eval(a) for a in node.args]
        kwargs = {k.arg: ast.literal_eval(k.value) for k in node.keywords if k.arg is not None}
    except (ValueError, SyntaxError, TypeError):
        return None
    if any(k.arg is None for k in node.keywords):
        return None
    return [args, kwargs]


def _main_call(example: Path) -> list | None:
    """The literal arguments of the first `<example module>.main(...)` call in a
    test file next to the example."""
    stem = example.stem
    for test_file in sorted(example.parent.glob("test_*.py")):
        try:
            tree = ast.parse(test_file.read_text(encoding="utf-8", errors="replace"))
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "main"
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == stem
            ):
                call = _literal_call(node)
                if call is not None:
                    return call
    return None


def _test_functions(path: Path) -> list[str]:
    try:
        tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
    except SyntaxError:
        return []
    names = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
            names.append(node.name)
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            names += [f"{node.name}::{m.name}" for m in node.body
                      if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef)) and m.name.startswith("test")]
    return names


def discover(root: str | os.PathLike, cases: list[str] | None = None,
             tests: tuple[str, ...] | list[str] = DEFAULT_TESTS) -> list[Case]:
    """The cases of a tilelang checkout at `root`, filtered by `cases` (fnmatch globs on the case name)."""
    root = Path(root).resolve()
    found: list[Case] = []
    for path in sorted((root / "examples").glob("**/example_*.py")):
        rel = path.relative_to(root).as_posix()
        source = path.read_text(encoding="utf-8", errors="replace")
        klass, why = classify(source, rel)
        found.append(Case(rel, "example", str(path), klass, why, call=_main_call(path)))
    for path in sorted((root / "examples").glob("**/*.ipynb")):
        if ".ipynb_checkpoints" in path.parts:
            continue
        rel = path.relative_to(root).as_posix()
        try:
            from .run import notebook_cells

            source = "\n".join(text for _, text, _ in notebook_cells(str(path)))
        except (OSError, ValueError):
            source = ""
        klass, why = classify(source, rel)
        found.append(Case(rel, "notebook", str(path), klass, why))
    test_files = sorted({p for pattern in tests for p in root.glob(pattern)})
    for path in test_files:
        rel = path.relative_to(root).as_posix()
        for name in _test_functions(path):
            found.append(Case(f"{rel}::{name}", "test", str(path), "test", test=name))
    if cases:
        found = [c for c in found if any(fnmatch.fnmatch(c.name, g) or fnmatch.fnmatch(Path(c.name).name, g)
                                         for g in cases)]
    return found


def _child_env(deps: str | None = None) -> dict:
    env = dict(os.environ)
    here = str(Path(__file__).resolve().parent.parent)  # the directory holding the tile_nb package
    # absolute: each case runs in its example's directory, where `PYTHONPATH=.gl/pydeps` would name nothing
    paths = ([deps] if deps else []) + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join([here] + [os.path.abspath(p) for p in paths])
    env.setdefault("PYTHONHASHSEED", "0")
    # flash-linear-attention (the reference of the gdn / linear-attention examples) routes some ops to its
    # tilelang kernels when `import tilelang` works, which here would be tile_nb checking itself: keep fla's
    # Triton kernels as the reference
    env.setdefault("FLA_DISABLE_BACKEND_DISPATCH", "1")
    return env


def _last_line(text: str) -> str:
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1] if lines else ""


def run_case(case: Case, backend: str = "interp", timeout: float = 120.0, shadow: bool = False,
             python: str | None = None) -> Case:
    """Run one case in its own process (its own session: a timeout kills everything it started)."""
    with tempfile.TemporaryDirectory(prefix="tile_nb_conf_") as tmp:
        result_path = os.path.join(tmp, "result.json")
        cmd = [python or sys.executable, "-m", "tile_nb.run", "--result-json", result_path]
        if backend == "interp":
            cmd.append("--cpu")
        if shadow:
            cmd.append("--shadow")
        if case.kind == "test":
            cmd += ["--pytest", "--", f"{case.path}::{case.test}", "-q", "-p", "no:cacheprovider",
                    "--tb=short", "-W", "ignore"]
        elif case.call is not None:
            cmd += ["--call", "main", "--args", json.dumps(case.call), case.path]
        else:
            cmd.append(case.path)
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=os.path.dirname(case.path), env=_child_env(case.deps),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
        try:
            _out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.communicate()
            case.status, case.error, case.seconds = "timeout", f"no result in {timeout:g} s", timeout
            return case
        except BaseException:  # Ctrl-C: the case's processes go too
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            raise
        case.seconds = time.perf_counter() - start
        if backend == "interp":
            case.gpu_lowering = lowering_refusal(err)
        try:
            with open(result_path) as f:
                result = json.load(f)
        except (OSError, ValueError):
            case.status = "error"
            case.error = _last_line(err) or f"exit status {proc.returncode}, no result"
            return case
    if case.kind == "test":
        entries = list(result.get("tests", {}).values())
        if not entries:
            case.status, case.error = (
                "error",
                _last_line(err) or f"pytest exit status {result.get('exit_status')}",
            )
            return case
        order = {"error": 0, "fail": 1, "pass": 2, "skip": 3}
        worst = min(entries, key=lambda e: order.get(e["status"], 0))
        case.items = [sum(e["status"] == "pass" for e in entries), len(entries)]
        case.status, case.error, case.missing = worst["status"], worst.get("error", ""), worst.get("missing")
        errors = [e["max_error"] for e in entries if e.get("max_error") is not None]
    else:
        case.status, case.error, case.missing = (
            result["status"],
            result.get("error", ""),
            result.get("missing"),
        )
        errors = [result["max_error"]] if result.get("max_error") is not None else []
    case.max_error = max(errors) if errors else None
    case.missing = _infer_missing(case)
    return case


_NOT_LOWERABLE = re.compile(r"NotLowerableWarning: (\S+)\(\) runs on the CPU interpreter, but (.*)")


def lowering_refusal(stderr: str) -> str | None:
    """`kernel(): reason` from the first NotLowerableWarning in a case's stderr (each interpreted kernel is
    also lowered for the GPU, tile_nb/jit.py), None where there is none."""
    lines = stderr.splitlines()
    for i, line in enumerate(lines):
        m = _NOT_LOWERABLE.search(line)
        if m:
            reason = lines[i + 1].strip() if m.group(2).endswith("on the GPU:") and i + 1 < len(lines) \
                else m.group(2)
            return f"{m.group(1)}(): {reason}"
    return None


def run_all(cases: list[Case], backend: str = "interp", timeout: float = 120.0, jobs: int = 1,
            run_excluded: bool = False, shadow: bool = False, progress=None,
            budget: float | None = None, alone: tuple[str, ...] = ()) -> list[Case]:
    """Run the cases, `jobs` at once; those whose name matches a glob of `alone` (an example that needs most
    of the GPU's memory) after the others, one at a time with nothing beside them. With `budget` (seconds of
    wall time for the whole run, e.g. a lent GPU's 10-minute call), no case starts after it is spent and
    none runs past it, so the results still get written."""
    deadline = None if budget is None else time.monotonic() + budget

    def run_one(case: Case) -> Case:
        limit = timeout
        if deadline is not None:
            left = deadline - time.monotonic()
            if left < 1:
                case.error = f"not started: the run's --budget of {budget:g} s was spent"
                return case                                  # status stays "not run"
            limit = min(timeout, left)
        return run_case(case, backend, limit, shadow)

    todo = []
    for case in cases:
        if case.klass in EXCLUDED_CLASSES and not run_excluded:
            case.status, case.error = "excluded", f"{case.klass} only: {', '.join(case.why)}"
        else:
            todo.append(case)
    solo = [c for c in todo if any(fnmatch.fnmatch(c.name, g) for g in alone)]
    shared = [c for c in todo if not any(c is s for s in solo)]
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = [pool.submit(run_one, c) for c in shared]
        for future in concurrent.futures.as_completed(futures):
            case = future.result()
            if progress is not None:
                progress(case)
    for case in solo:
        run_one(case)
        if progress is not None:
            progress(case)
    return cases


def _fmt_error(value: float | None) -> str:
    return "" if value is None else f"{value:.3g}"


def _cell(text: str, width: int = 110) -> str:
    text = (text or "").replace("|", "\\|").replace("\n", " ")
    return text if len(text) <= width else text[: width - 3] + "..."


def totals(cases: list[Case]) -> dict:
    """{class: Counter of statuses}: examples by class, then one row for notebooks and one for tests."""
    out: dict[str, collections.Counter] = {}
    for case in cases:
        key = case.klass if case.kind == "example" else case.kind   # notebooks and tests get their own rows
        out.setdefault(key, collections.Counter())[case.status] += 1
    return out


def missing_ranked(cases: list[Case]) -> list[tuple[str, int, list[str]]]:
    """The tilelang APIs tile_nb lacks, by how many cases (not excluded) they stopped, most first."""
    blocked: dict[str, list[str]] = collections.defaultdict(list)
    for case in cases:
        if case.missing and case.status not in ("pass", "excluded"):
            blocked[case.missing].append(case.name)
    return sorted(((api, len(names), names) for api, names in blocked.items()), key=lambda t: (-t[1], t[0]))


def other_errors_ranked(cases: list[Case]) -> list[tuple[str, int]]:
    """The first lines of failures not caused by a missing API, grouped (numbers blanked), most first."""
    def general(text: str) -> str:
        text = re.sub(r"kernel '\w+'", "kernel 'K'", re.sub(r"\b\w+\(\)", "K()", text))
        return re.sub(r"\d+", "N", text)[:140]

    counts = collections.Counter(
        general(c.error) for c in cases if c.status in ("fail", "error") and not c.missing
    )
    return counts.most_common()


def table(cases: list[Case]) -> str:
    """The per-case table and the totals, as Markdown (readable as plain text)."""
    lines = [
        "| case | class | result | error / missing feature | max error |",
        "| --- | --- | --- | --- | --- |",
    ]
    for case in cases:
        what = f"missing: {case.missing}" if case.missing else case.error
        if case.missing and case.missing.endswith("(inferred)"):
            what += f"; {case.error}"
        lines.append(f"| {_cell(case.name, 90)} | {case.klass} | {case.status} | {_cell(what)} | "
                     f"{_fmt_error(case.max_error)} |")
    lines += ["", totals_table(cases)]
    return "\n".join(lines)


def totals_table(cases: list[Case]) -> str:
    statuses = ("pass", "fail", "error", "timeout", "skip", "excluded")
    if any(c.status == "not run" for c in cases):                 # a run cut short by --budget
        statuses += ("not run",)
    lines = [
        "| class | cases | " + " | ".join(statuses) + " |",
        "| --- | --- | " + " | ".join("---" for _ in statuses) + " |",
    ]
    counts = totals(cases)
    for klass in [k for k in CLASSES if k in counts] + sorted(set(counts) - set(CLASSES)):
        c = counts[klass]
        lines.append(
            f"| {klass} | {sum(c.values())} | " + " | ".join(str(c.get(s, 0)) for s in statuses) + " |"
        )
    return "\n".join(lines)


def _git_commit(root: str) -> str | None:
    """The commit of the checkout at `root` when `root` is the top of its own git work tree; None otherwise (a
    copy without .git inside another repository, such as an ignored folder of this one, would name that
    repository's commit)."""
    try:
        out = subprocess.run(
            ["git", "-C", root, "rev-parse", "--show-toplevel", "HEAD"], capture_output=True, text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    lines = out.stdout.split()
    if out.returncode != 0 or len(lines) != 2 or os.path.realpath(lines[0]) != os.path.realpath(root):
        return None
    return lines[1]


def machine() -> str:
    try:
        import torch

        gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else None
        torch_version = torch.__version__
    except ImportError:
        gpu, torch_version = None, "none"
    where = gpu or "no GPU"
    return f"{platform.node() or 'host'}: {platform.machine()}, {os.cpu_count()} CPUs, {where}, " \
           f"Python {platform.python_version()}, torch {torch_version}"


_NO_MODULE = re.compile(r"ModuleNotFoundError: No module named '([\w.]+)'")


def _tile_level_line(ran: list[Case]) -> str:
    """The issue's measure: the share of tile-level examples that pass, and how many of the others stop at
    a Python package their reference needs that is not installed where the run was (not tile_nb's doing, and
    still counted as not passing)."""
    tile = [c for c in ran if c.klass == "tile-level"]
    passed = sum(c.status == "pass" for c in tile)
    missing = collections.Counter(m.group(1).split(".")[0] for c in tile if c.status != "pass"
                                  for m in [_NO_MODULE.match(c.error or "")] if m)
    share = f"{100 * passed / len(tile):.0f}%" if tile else "n/a"
    text = (f"Tile-level examples (no mbarrier / TMA / warp-specialization primitives): {passed} of "
            f"{len(tile)} pass ({share}).")
    if missing:
        names = ", ".join(f"`{name}` ({n})" for name, n in missing.most_common())
        text += (f" {sum(missing.values())} of the others stop importing a package their reference needs "
                 f"that is not installed here: {names}.")
    return text


def markdown(cases: list[Case], *, commit: str | None, backend: str, command: str, timeout: float,
             date: str | None = None, machine_text: str | None = None) -> str:
    """The results document: where and how it ran, totals, ranked missing features, the per-case table."""
    date = date or datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    examples = [c for c in cases if c.kind == "example"]
    notebooks = [c for c in cases if c.kind == "notebook" and c.status != "excluded"]
    tests = [c for c in cases if c.kind == "test"]
    ran = [c for c in examples if c.status != "excluded"]
    lines = [
        "# tilelang conformance of tile_nb",
        "",
        f"- tilelang commit: `{commit or 'unknown'}` (a fetched checkout outside this repository)",
        f"- machine: {machine_text or machine()}",
        f"- backend: {backend}"
        + (
            " (torch's \"cuda\" device mapped to the CPU: tile_nb's interpreter)"
            if backend == "interp"
            else ""
        ),
        f"- date: {date}",
        f"- command: `{command}` (per-case timeout {timeout:g} s)",
        "",
        "## Totals",
        "",
        f"Examples: {sum(c.status == 'pass' for c in ran)} of {len(ran)} pass "
        f"({len(examples) - len(ran)} excluded and counted apart: sm_100-only, AMD-only, and examples "
        "that do not "
        f"import tilelang (Triton/torch baselines)). "
        f"LazyJIT/eager tests: {sum(c.status == 'pass' for c in tests)} of {len(tests)} test functions pass "
        f"({sum(c.items[0] for c in tests if c.items)} of {sum(c.items[1] for c in tests if c.items)} "
        "pytest items). "
        f"Notebooks: {sum(c.status == 'pass' for c in notebooks)} of {len(notebooks)} run to the end.",
        "",
        _tile_level_line(ran),
        "",
        totals_table(cases),
        "",
        "## Missing features, ranked by the cases they stop",
        "",
        "The first unsupported tilelang API each failing case reached (a case can need more behind it). "
        "\"(inferred)\": tile_nb's error is a known symptom of that form and the case's source uses it.",
        "",
        "| tilelang API | cases | which |",
        "| --- | --- | --- |",
    ]
    for api, n, names in missing_ranked(cases):
        shown = ", ".join(Path(x).name if "::" not in x else x.split("::")[-1] for x in names[:6])
        lines.append(f"| `{api}` | {n} | {_cell(shown + (', ...' if len(names) > 6 else ''), 160)} |")
    lines += [
        "",
        "## Other first errors (not a missing API), grouped",
        "",
        "| first line of the error | cases |",
        "| --- | --- |",
    ]
    for text, n in other_errors_ranked(cases):
        lines.append(f"| {_cell(text, 160)} | {n} |")
    lines += _lowering_section(ran, backend)
    lines += ["", "## Per case", "", table(cases).split("\n\n")[0], ""]
    return "\n".join(lines)


def _lowering_section(ran: list[Case], backend: str) -> list[str]:
    """interp: which passing tile-level examples the sm_90a lowering would refuse (no GPU needed)."""
    if backend != "interp":
        return []
    passing = [c for c in ran if c.klass == "tile-level" and c.status == "pass"]
    refused = [c for c in passing if c.gpu_lowering]
    lines = [
        "",
        "## The GPU lowering of what passes here",
        "",
        f"Of the {len(passing)} tile-level examples that pass on the interpreter, the sm_90a lowering (run "
        "on each kernel the interpreter ran, without a GPU) takes every kernel of "
        f"{len(passing) - len(refused)}" + ("." if not refused else
                                             f"; it refuses a kernel of {len(refused)} (the first refusal):"),
    ]
    if refused:
        lines += ["", "| case | the lowering's refusal |", "| --- | --- |"]
        lines += [f"| {c.name} | {_cell(c.gpu_lowering, 160)} |" for c in refused]
    return lines


def _deps_rule(text: str) -> tuple[str, str]:
    glob, sep, folder = text.partition("=")
    if not sep or not glob or not folder:
        raise argparse.ArgumentTypeError(
            f"expected GLOB=DIR (e.g. 'examples/gdn/*=.gl/fla-2025-06'), got {text!r}"
        )
    if not os.path.isdir(folder):
        raise argparse.ArgumentTypeError(f"{folder!r} (from {text!r}) is not a folder")
    return glob, os.path.abspath(folder)


def assign_deps(cases: list[Case], rules: list[tuple[str, str]]) -> None:
    """Each case takes the folder of the first rule whose glob matches its name (--deps)."""
    for case in cases:
        case.deps = next((folder for glob, folder in rules if fnmatch.fnmatch(case.name, glob)), None)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tile_nb.conformance",
        description="Run a tilelang checkout's examples and LazyJIT tests on tile_nb.",
    )
    parser.add_argument("path", help="a tilelang checkout (outside this repository)")
    parser.add_argument("--cases", nargs="+", metavar="GLOB", help="only cases whose name matches a glob")
    parser.add_argument("--tests", nargs="+", metavar="GLOB", default=list(DEFAULT_TESTS),
                        help="test files (globs under PATH) whose test functions are cases")
    parser.add_argument("--backend", choices=("interp", "cuda"), default=None,
                        help="interp: CUDA tensors become CPU tensors, the interpreter runs the kernels "
                             "(default without a GPU); cuda: unchanged, on the GPU")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per case (default 120)")
    parser.add_argument("--jobs", type=int, default=1, help="cases run at once (default 1)")
    parser.add_argument("--budget", type=float, default=None, metavar="SECONDS",
                        help="wall time for the whole run: no case starts after it and none runs past it; "
                             "the cases left are reported as 'not run' (for a device call's time limit)")
    parser.add_argument("--alone", nargs="+", metavar="GLOB", default=[],
                        help="cases whose name matches a glob run after the others, one at a time (an "
                             "example that needs most of the GPU's memory)")
    parser.add_argument("--deps", nargs="+", metavar="GLOB=DIR", default=[], type=_deps_rule,
                        help="cases whose name matches GLOB get DIR first on PYTHONPATH: the packages their "
                             "references were written against, where they differ from the other cases' "
                             "(tilelang's gdn examples call flash-linear-attention's API of 2025-06)")
    parser.add_argument("--json", dest="json_out", help="write every case as JSON here")
    parser.add_argument(
        "--markdown", help="write the results document (totals, ranked missing features, table)"
    )
    parser.add_argument("--commit", help="the tilelang commit, when PATH is not a git work tree")
    parser.add_argument(
        "--run-excluded", action="store_true", help="run sm_100-only and AMD-only examples too"
    )
    parser.add_argument("--shadow", action="store_true", help="pass --shadow to tile_nb.run (a real tilelang "
                        "is importable and should be hidden)")
    parser.add_argument("--list", action="store_true", help="list the cases and their classes; run nothing")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    root = Path(args.path).resolve()
    if not (root / "examples").is_dir() and not (root / "testing").is_dir():
        print(
            f"tile_nb.conformance: {root} has no examples/ or testing/: not a tilelang checkout",
            file=sys.stderr,
        )
        return 2
    backend = args.backend
    if backend is None:
        try:
            import torch

            backend = "cuda" if torch.cuda.is_available() else "interp"
        except ImportError:
            backend = "interp"
    cases = discover(root, args.cases, args.tests)
    assign_deps(cases, args.deps)
    if args.list:
        for case in cases:
            how = "" if case.kind == "test" else (f" main(*{case.call[0]}, **{case.call[1]})" if case.call
                                                  else " as __main__")
            print(f"{case.klass:10} {case.name}{how}")
        return 0
    total = sum(1 for c in cases if c.klass not in EXCLUDED_CLASSES or args.run_excluded)
    done = [0]

    def progress(case: Case) -> None:
        done[0] += 1
        what = f"missing {case.missing}" if case.missing else case.error
        print(f"[{done[0]}/{total}] {case.status:8} {case.seconds:6.1f}s {case.name}  {what[:100]}",
              file=sys.stderr, flush=True)

    run_all(cases, backend, args.timeout, args.jobs, args.run_excluded, args.shadow, progress, args.budget,
            tuple(args.alone))
    print(table(cases))
    commit = args.commit or _git_commit(str(root))
    command = "python -m tile_nb.conformance " + " ".join(argv if argv is not None else sys.argv[1:])
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(
                {
                    "commit": commit,
                    "backend": backend,
                    "machine": machine(),
                    "cases": [c.to_json() for c in cases],
                },
                f,
                indent=1,
            )
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(markdown(cases, commit=commit, backend=backend, command=command, timeout=args.timeout))
    return 0


if __name__ == "__main__":
    sys.exit(main())
