"""Execute notebooks headless with nbclient, writing executed copies to an
output folder, and show progress."""
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient


def main(paths: list[str], out_dir: str = "build/notebooks") -> int:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for i, path in enumerate(paths, 1):
        start = time.perf_counter()
        print(f"[{i}/{len(paths)}] {path} ...", flush=True)
        nb = nbformat.read(path, as_version=4)
        NotebookClient(
            nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(Path(path).parent)}}
        ).execute()
        nbformat.write(nb, out / Path(path).name)
        print(f"      done in {time.perf_counter() - start:.1f} s -> {out / Path(path).name}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
