"""The `tile_nb` pytest plugin: notebook CI for tile_nb users, on top of nbval.

Installed with tile_nb (entry point `pytest11`), it acts only in `pytest --nbval` and `--nbval-lax` runs:

1. **GPU cells.** A cell tagged `gpu` (or holding the line `# TILE_NB_GPU`) runs, and is
   compared like any other cell, where torch sees a CUDA device; elsewhere it is skipped with
   that reason. `--tile-nb-gpu=require` turns a missing device into an error, so that a GPU job
   cannot pass by skipping its GPU cells.
2. **Sanitizers.** tile_nb's output sanitizers (`tile_nb/testing/nbval_sanitize.cfg`: cell file names,
   execution counts, memory addresses) apply to every notebook, before those of `--nbval-sanitize-with`.
   `--tile-nb-no-sanitize` leaves them out.
3. **Counts.** The terminal summary gives, per notebook, how many cells had their output
   compared, ran without a comparison (`# NBVAL_IGNORE_OUTPUT`, lax mode, or a cell stored
   without output), were skipped (and why), failed.

`-p no:tile_nb` turns the plugin off.
"""
from __future__ import annotations

from collections import Counter, defaultdict

import pytest

from . import SANITIZE_FILE, cuda_device, needs_gpu, sanitize_patterns

_OUTCOMES = ("compared", "ignored", "skipped", "failed")


def pytest_addoption(parser):
    group = parser.getgroup("tile_nb", "tile_nb notebooks (with --nbval)")
    group.addoption(
        "--tile-nb-gpu",
        choices=("auto", "require"),
        default="auto",
        help="cells tagged `gpu`: 'auto' runs them where torch sees a CUDA device and skips them, with "
        "the reason, elsewhere; 'require' fails the run when there is no device (default: auto)",
    )
    group.addoption("--tile-nb-no-sanitize", action="store_true",
                    help=f"do not apply tile_nb's output sanitizers ({SANITIZE_FILE.name})")


def _is_nbval_cell(item) -> bool:
    return type(item).__name__ == "IPyNbCell" and hasattr(item, "cell") and hasattr(item, "options")


class _Tally:
    """What each notebook cell is expected to be (compared, ignored, skipped), then what it was."""

    def __init__(self):
        self.planned: dict[str, tuple[str, str, str]] = {}  # nodeid -> (notebook, outcome, reason)
        self.results: dict[str, dict[str, Counter]] = defaultdict(lambda: defaultdict(Counter))
        self.notebooks: list[str] = []
        self.gpu_note = ""

    def plan(self, item, outcome: str, reason: str = "") -> None:
        notebook = item.parent.nodeid
        if notebook not in self.notebooks:
            self.notebooks.append(notebook)
        self.planned[item.nodeid] = (notebook, outcome, reason)

    def record(self, report) -> None:
        planned = self.planned.get(report.nodeid)
        if planned is None:
            return
        notebook, outcome, reason = planned
        if report.failed:
            self.results[notebook]["failed"]["" if report.when == "call" else f"in {report.when}"] += 1
        elif report.skipped and report.when in ("setup", "call"):
            self.results[notebook]["skipped"][reason if outcome == "skipped" else _skip_reason(report)] += 1
        elif report.passed and report.when == "call":
            self.results[notebook][outcome][reason] += 1

    # pytest hooks (the tally is registered as a plugin of its own: these hooks take no `config`)
    def pytest_runtest_logreport(self, report) -> None:
        self.record(report)

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if self.notebooks:
            terminalreporter.write_sep("-", "tile_nb: notebook cells")
            for line in self.lines():
                terminalreporter.write_line(line)

    def lines(self) -> list[str]:
        width = max([len(n) for n in self.notebooks] + [8])
        out = [f"{'notebook':<{width}}  cells  " + "  ".join(f"{o:>8}" for o in _OUTCOMES)]
        totals = Counter()
        for notebook in self.notebooks:
            counts = {o: sum(self.results[notebook][o].values()) for o in _OUTCOMES}
            totals.update(counts)
            cells = sum(1 for nb, _, _ in self.planned.values() if nb == notebook)
            totals["cells"] += cells
            out.append(f"{notebook:<{width}}  {cells:>5}  " + "  ".join(f"{counts[o]:>8}" for o in _OUTCOMES))
            for outcome in ("ignored", "skipped", "failed"):
                reasons = self.results[notebook][outcome]
                if reasons:
                    detail = " | ".join(f"{n} {r}" if r else str(n) for r, n in sorted(reasons.items()))
                    out.append(f"{'':<{width}}    {outcome}: {detail}")
        if len(self.notebooks) > 1:
            out.append(
                f"{'total':<{width}}  {totals['cells']:>5}  "
                + "  ".join(f"{totals[o]:>8}" for o in _OUTCOMES)
            )
        out.append("compared: output checked against the stored one; ignored: run, output not compared; "
                   "skipped: not run")
        if self.gpu_note:
            out.append(self.gpu_note)
        return out


def _skip_reason(report) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        reason = str(longrepr[2])
        return reason.removeprefix("Skipped: ").removeprefix("Skipped")
    return ""


def pytest_configure(config):
    config._tile_nb_tally = _Tally()
    config.pluginmanager.register(config._tile_nb_tally, "tile_nb_tally")


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(session, config, items):
    cells = [item for item in items if _is_nbval_cell(item)]
    if not cells:
        return
    tally: _Tally = config._tile_nb_tally
    if not config.getoption("tile_nb_no_sanitize"):
        patterns = sanitize_patterns()
        for notebook in {id(c.parent): c.parent for c in cells}.values():
            if not hasattr(notebook, "sanitize_patterns"):
                raise pytest.UsageError(
                    "tile_nb's pytest plugin cannot add its sanitizers: this nbval version's "
                    "notebook collector has no `sanitize_patterns`; pass --tile-nb-no-sanitize "
                    f"and --nbval-sanitize-with {SANITIZE_FILE}"
                )
            # Collected before nbval's setup reads --nbval-sanitize-with: those rules come after these.
            for regex, replace in patterns:
                notebook.sanitize_patterns.setdefault(regex, replace)
    gpu_cells = {id(c): c for c in cells if needs_gpu(c.cell)}
    device = cuda_device() if gpu_cells else None
    if gpu_cells and device is None and config.getoption("tile_nb_gpu") == "require":
        raise pytest.UsageError(
            f"--tile-nb-gpu=require: {len(gpu_cells)} notebook cell(s) need a GPU (tag `gpu`), "
            "but torch sees no CUDA device"
        )
    no_gpu = "needs a CUDA device (cell tagged gpu), and torch sees none here"
    for cell in cells:
        if id(cell) in gpu_cells and device is None:
            cell.add_marker(pytest.mark.skip(reason=no_gpu))
            tally.plan(cell, "skipped", no_gpu)
        elif cell.options.get("skip"):
            cell.add_marker(pytest.mark.skip(reason="NBVAL_SKIP"))  # nbval's own skip gives no reason
            tally.plan(cell, "skipped", "NBVAL_SKIP")
        elif not cell.options.get("check"):
            tally.plan(cell, "ignored", "NBVAL_IGNORE_OUTPUT" if config.option.nbval else "--nbval-lax")
        elif cell.cell.get("execution_count") is None:
            tally.plan(cell, "ignored", "no stored output")
        else:
            tally.plan(cell, "compared")
    if gpu_cells:
        tally.gpu_note = (f"cells tagged gpu: {len(gpu_cells)}, run on {device}" if device else
                          f"cells tagged gpu: {len(gpu_cells)}, skipped (no CUDA device)")


