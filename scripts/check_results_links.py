"""Every benchmarks/results file named in the repository exists, and every file there is named somewhere.

    python3 scripts/check_results_links.py

Names are read from `benchmarks/results/NAME` paths anywhere and from bare names inside the results'
summaries; `{a,b}` and `[x]` expand, `*` matches. A name marked `NAME`† was removed on purpose (the
summary says where it went). Exits 1 if a named file is missing; files no one names are listed, not failed
(README names some summaries bare).
"""
import itertools
import os
import re
import subprocess
import sys

NAME = r"[A-Za-z0-9_{},\[\]*.-]+\.(?:json|txt|csv|patch|md)"
AREAS = "gemm|attention|host-cost|rowwise|tune|descriptors|nbval|gpu-tests|sass|compile|dispatch|interp"
SKIP = (".png", ".lock", ".csv", ".patch", ".json")


def expand(token: str) -> list[str]:
    """`a-{x,y}[-z].json` -> the four names it stands for."""
    choices = []
    for part in re.split(r"(\{[^}]*\}|\[[^\]]*\])", token):
        if part.startswith("{"):
            choices.append(part[1:-1].split(","))
        elif part.startswith("["):
            choices.append(["", part[1:-1]])
        else:
            choices.append([part])
    return ["".join(c) for c in itertools.product(*choices)]


def names_in(path: str, text: str) -> list[str]:
    found = [m.group(1) for m in re.finditer(r"benchmarks/results/(" + NAME + ")", text)]
    if path.startswith("benchmarks/results/"):
        found += [m.group(1) for m in re.finditer(r"`(" + NAME + r")`(?!†)", text)]
        found += [m.group(0) for m in re.finditer(
            r"(?<![/\w.`-])(?:" + AREAS + r")[A-Za-z0-9_.-]*\.(?:json|txt|csv|patch|md)", text)]
    return found


def main() -> int:
    os.chdir(subprocess.check_output(["git", "rev-parse", "--show-toplevel"], text=True).strip())
    files = [f for f in subprocess.check_output(["git", "ls-files"], text=True).split("\n") if f]
    results = {os.path.basename(f) for f in files if f.startswith("benchmarks/results/")}
    missing, named = 0, set()
    for path in files:
        if path.endswith(SKIP):
            continue
        try:
            text = open(path, encoding="utf-8").read()
        except (OSError, UnicodeDecodeError):
            continue
        for token in names_in(path, text):
            for name in expand(token):
                if name.startswith("$"):
                    continue
                if "*" in name:
                    pattern = re.escape(name).replace(r"\*", ".*")
                    hits = {r for r in results if re.fullmatch(pattern, r)}
                else:
                    hits = {name} & results
                if not hits:
                    print(f"{path}: {token}: no such file in benchmarks/results")
                    missing += 1
                named |= hits
    for name in sorted(results - named):
        print("named nowhere:", name)
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
