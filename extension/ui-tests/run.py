"""Browser test: a real JupyterLab, headless Chromium, the quickstart notebook run as a user runs it.

Usage: `bash scripts/browser_test.sh` (installs everything the README's way first), or, with JupyterLab and the
extension installed in this Python, `python extension/ui-tests/run.py [--no-docs] [--dark]`.
Starts JupyterLab on a free port in a temporary folder holding notebooks/01_quickstart.ipynb (as stored) and a copy
of it whose outputs lack the extension's MIME type (so JupyterLab shows tile_nb's static HTML, sanitized as for any
untrusted notebook), runs `screenshot.mjs` (Playwright driving Debian's Chromium), stops the server.
Needs Debian's Chromium at /usr/bin/chromium (or CHROMIUM=/path), `npm ci` done in extension/ (playwright-core),
Pillow. Writes ui-tests/output/*.png and, unless --no-docs, docs/jupyterlab-view.png and
docs/jupyterlab-cuda-mapping.png (< 200 KB each).
"""

import argparse
import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
EXTENSION = HERE.parent
REPO = EXTENSION.parent
OUTPUT = HERE / "output"
DOCS_PNG = REPO / "docs" / "jupyterlab-view.png"
DOCS_CUDA_PNG = REPO / "docs" / "jupyterlab-cuda-mapping.png"   # the same line mapped into the CUDA source
MAX_DOCS_BYTES = 200_000


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_server(url: str, process: subprocess.Popen, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"JupyterLab exited early with code {process.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise TimeoutError(f"JupyterLab did not answer {url} within {timeout:.0f} s")


MIME = "application/vnd.tile-nb.kernel+json"
QUICKSTART = REPO / "notebooks" / "01_quickstart.ipynb"


def expectations(notebook: Path) -> dict:
    """How many kernel views and %%tilekernel cells the browser should find in a notebook."""
    cells = json.loads(notebook.read_text())["cells"]
    views = sum(MIME in output.get("data", {}) for cell in cells for output in cell.get("outputs", []))
    magic = re.compile(r"^(\s*\n)*%%tilekernel(\s|$)")
    tile_cells = sum(
        cell["cell_type"] == "code" and bool(magic.match("".join(cell["source"]))) for cell in cells
    )
    return {"name": notebook.name, "views": views, "tileCells": tile_cells}


def static_copy(notebook: Path, target: Path) -> None:
    """The notebook without the extension's MIME type in its outputs: JupyterLab then renders the static HTML."""
    data = json.loads(notebook.read_text())
    for cell in data["cells"]:
        for output in cell.get("outputs", []):
            output.get("data", {}).pop(MIME, None)
    target.write_text(json.dumps(data, indent=1))


def set_theme(base: str, token: str, theme: str) -> None:
    """Store the theme in the (temporary) user settings before the page loads."""
    body = json.dumps({"raw": json.dumps({"theme": theme})}).encode()
    request = urllib.request.Request(
        f"{base}/lab/api/settings/@jupyterlab/apputils-extension:themes",
        data=body,
        method="PUT",
        headers={"Authorization": f"token {token}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10):
        pass


def save_docs_png(source: Path, target: Path) -> None:
    """Store the screenshot small: 256 colors, which UI text survives well.

    Resampling blurs text and makes the PNG larger (about 70 KiB at the native 1364 px against
    185 KiB scaled to 1200 px), so only a screenshot wider than 1440 px is scaled down.
    """
    from PIL import Image

    image = Image.open(source).convert("RGB")
    if image.width > 1440:
        image = image.resize((1440, round(image.height * 1440 / image.width)), Image.LANCZOS)
    image.quantize(colors=256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE).save(
        target, optimize=True
    )
    size = target.stat().st_size
    if size > MAX_DOCS_BYTES:
        raise RuntimeError(f"{target} is {size} bytes, over {MAX_DOCS_BYTES}")
    print(f"wrote {target.relative_to(REPO)} ({image.width}x{image.height}, {size // 1024} KiB)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-docs", action="store_true", help="do not update docs/jupyterlab-view.png")
    parser.add_argument(
        "--dark",
        action="store_true",
        help="use the JupyterLab Dark theme (implies --no-docs; the docs screenshot is light)",
    )
    args = parser.parse_args()

    OUTPUT.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="tnb-ui-") as tmp:
        root = Path(tmp) / "root"
        root.mkdir()
        shutil.copy(QUICKSTART, root / QUICKSTART.name)
        static_copy(QUICKSTART, root / "static_view.ipynb")
        port, token = free_port(), secrets.token_hex(16)
        command = [
            sys.executable,
            "-m",
            "jupyterlab",  # this environment's JupyterLab (`-m jupyter lab` runs the first jupyter-lab on PATH)
            "--no-browser",
            f"--port={port}",
            "--ip=127.0.0.1",
            f"--ServerApp.token={token}",
            f"--ServerApp.root_dir={root}",
            f"--LabApp.workspaces_dir={Path(tmp) / 'workspaces'}",
            # Keep settings (e.g. --dark's theme) out of the user's own ~/.jupyter.
            f"--LabApp.user_settings_dir={Path(tmp) / 'user-settings'}",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        ]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            command.append("--allow-root")
        log = (OUTPUT / "jupyterlab.log").open("w")
        started = time.monotonic()
        lab = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=root)
        try:
            base = f"http://127.0.0.1:{port}"
            wait_for_server(f"{base}/api/status?token={token}", lab)
            print(f"JupyterLab up in {time.monotonic() - started:.1f} s at {base}")
            if args.dark:
                set_theme(base, token, "JupyterLab Dark")
            env = dict(
                os.environ,
                TNB_LAB_URL=base,
                TNB_LAB_TOKEN=token,
                TNB_OUTPUT=str(OUTPUT),
                TNB_NOTEBOOK=json.dumps(expectations(QUICKSTART)),
            )
            result = subprocess.run(
                ["node", str(HERE / "screenshot.mjs")], check=False, cwd=EXTENSION, env=env
            )
        finally:
            lab.terminate()
            try:
                lab.wait(timeout=20)
            except subprocess.TimeoutExpired:
                lab.kill()
            log.close()
    if result.returncode != 0:
        print(f"browser test FAILED (see {OUTPUT.relative_to(REPO)}/)", file=sys.stderr)
        return result.returncode
    if not (args.no_docs or args.dark):
        save_docs_png(OUTPUT / "line-mapping.png", DOCS_PNG)
        save_docs_png(OUTPUT / "line-mapping-cuda.png", DOCS_CUDA_PNG)
    print(f"browser test passed in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
