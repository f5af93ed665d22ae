"""Fuzz from the command line, by integer seed; every failure is listed with its seed and a reproducer.

    PYTHONPATH=tests python -m difftest --seeds 0:200                 # CPU tier, every family
    PYTHONPATH=tests python -m difftest --family copy --seeds 17:18   # one kernel again, by its seed
    PYTHONPATH=tests python -m difftest --tier gpu --seeds 0:50       # on a CUDA machine
    PYTHONPATH=tests python -m difftest --tier interp --seeds 0:2000  # interpreter vs model only (fast)
    PYTHONPATH=tests python -m difftest --show copy 17                # print the generated kernel

Seed n of family f is `FAMILIES[f].draw(RandomChooser(n))`; the hypothesis tests draw their own kernels.
"""
from __future__ import annotations

import argparse
import collections
import sys
import time

from .choose import RandomChooser
from .families import FAMILIES
from .runners import run_cpu, run_gpu


def _seeds(text: str) -> range:
    lo, _, hi = text.partition(":")
    return range(int(lo), int(hi)) if hi else range(int(lo), int(lo) + 1)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m difftest", description=__doc__.splitlines()[0])
    parser.add_argument("--family", action="append", choices=sorted(FAMILIES), help="default: all")
    parser.add_argument("--seeds", default="0:20", help="A:B (B excluded) or one seed")
    parser.add_argument("--tier", choices=("cpu", "interp", "gpu"), default="cpu")
    parser.add_argument("--out", help="folder for reproducers (default $DIFFTEST_OUT or a temp folder)")
    parser.add_argument("--show", nargs=2, metavar=("FAMILY", "SEED"), help="print one kernel's reproducer")
    parser.add_argument("-q", "--quiet", action="store_true", help="print failures and the summary only")
    args = parser.parse_args(argv)
    if args.show:
        family, seed = args.show
        case = FAMILIES[family].render(FAMILIES[family].draw(RandomChooser(int(seed))))
        print(case.module_text())
        return 0
    families = args.family or list(FAMILIES)
    counts: dict = collections.defaultdict(collections.Counter)
    refusals: collections.Counter = collections.Counter()
    failures = []
    start = time.perf_counter()
    for family in families:
        module = FAMILIES[family]
        for seed in _seeds(args.seeds):
            case = module.render(module.draw(RandomChooser(seed)))
            t = time.perf_counter()
            if args.tier == "gpu":
                outcome = run_gpu(case)
            else:
                outcome = run_cpu(case, compile_=args.tier == "cpu")
            status = "FAIL" if outcome.problems else ("refused" if outcome.refusals else
                                                      "skipped" if outcome.skipped else "ok")
            counts[family][status] += 1
            for _target, message in outcome.refusals:
                refusals[(family, message)] += 1
            if outcome.problems:
                path = case.write_reproducer(args.out)
                failures.append((family, seed, outcome.problems[0].splitlines()[0], path, case.spec))
            if not args.quiet or outcome.problems:
                first = outcome.problems[0].splitlines()[0][:160] if outcome.problems else ""
                print(f"{family:12s} seed {seed:5d} {status:8s} {time.perf_counter() - t:5.2f}s {first}",
                      flush=True)
    print(f"\n{sum(sum(c.values()) for c in counts.values())} kernels in {time.perf_counter() - start:.0f} s "
          f"({args.tier} tier)")
    for family in families:
        print(f"  {family:12s} " + ", ".join(f"{k} {v}" for k, v in sorted(counts[family].items())))
    if refusals:
        print("\nrefused (kernels, family, message):")
        for (family, message), n in refusals.most_common():
            print(f"  {n:4d}  {family:12s} {message[:200]}")
    if failures:
        print("\nfailures (family, seed, first problem, reproducer):")
        for family, seed, problem, path, spec in failures:
            print(f"  {family} seed {seed}: {problem[:220]}\n      {path}\n      {spec!r}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
