"""Build the prebuilt JupyterLab extension (npm), only when its sources changed.

One builder for every way the extension is packaged:
- the `tile_nb` wheel and sdist (the repository root's `hatch_build.py` calls `ensure_built`, then ships the result
  under `share/jupyter/labextensions/tile-nb-labextension`);
- the `tile_nb_labextension` package of this folder (`pip install ./extension`, binder), through the hatch build hook
  below;
- `scripts/install_extension.sh`, which runs this file as a script (`python extension/labextension_build.py`).

Freshness is a sha256 of the sources (`SOURCES`), stored beside the output as `tile_nb_labextension/.source_hash`,
not file times: a git checkout or an unpacked sdist gives every file a new or equal time. The sdist carries the
output and its hash, so a wheel built from the sdist needs no node. npm is run as `npm ci` (the lock file as it is,
never rewritten) only when `node_modules` lacks the builder, then `npm run build:prod`.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUTPUT = "tile_nb_labextension/labextension"  # package.json's jupyterlab.outputDir
STAMP = "tile_nb_labextension/.source_hash"
# What the build reads: a change to any of these rebuilds.
SOURCES = ("package.json", "package-lock.json", "tsconfig.json", "src", "style")
# What a usable build holds (checked after every build, and before shipping a prebuilt one).
TARGETS = (f"{OUTPUT}/package.json", f"{OUTPUT}/static/style.js")


def source_hash(root: Path = HERE) -> str:
    digest = hashlib.sha256()
    for name in SOURCES:
        path = root / name
        files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
        for file in files:
            digest.update(file.relative_to(root).as_posix().encode() + b"\0")
            digest.update(file.read_bytes() + b"\0")
    return digest.hexdigest()


def is_current(root: Path = HERE) -> bool:
    stamp = root / STAMP
    return (
        all((root / t).is_file() for t in TARGETS)
        and stamp.is_file()
        and stamp.read_text().strip() == source_hash(root)
    )


def ensure_built(root: Path = HERE, log=print) -> bool:
    """Build the extension into `root/OUTPUT` unless the build there matches the sources; True if it built."""
    if is_current(root):
        log(f"tile_nb JupyterLab extension: prebuilt {OUTPUT} matches the sources, npm not run")
        return False
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError(
            f"the tile_nb JupyterLab extension in {root} is not built (or its sources changed) and npm is not on "
            "PATH: building it needs node >= 20.19 and npm (installing a built wheel, or building one from the "
            "sdist, does not)"
        )
    if not (root / "node_modules" / "@jupyter" / "builder").is_dir():
        log("tile_nb JupyterLab extension: npm ci")
        subprocess.run([npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=root, check=True)
    log("tile_nb JupyterLab extension: npm run build:prod")
    (root / STAMP).unlink(missing_ok=True)
    subprocess.run([npm, "run", "--silent", "build:prod"], cwd=root, check=True)
    missing = [t for t in TARGETS if not (root / t).is_file()]
    if missing:
        raise RuntimeError(f"npm run build:prod did not produce {', '.join(missing)} in {root}")
    (root / STAMP).write_text(source_hash(root) + "\n")
    return True


try:
    from hatchling.builders.hooks.plugin.interface import BuildHookInterface
except ImportError:  # run as a script (scripts/install_extension.sh): no hatchling needed
    BuildHookInterface = None

if BuildHookInterface is not None:

    class LabExtensionBuildHook(BuildHookInterface):
        """`pip install ./extension`: build before the wheel's shared-data (pyproject.toml) is collected."""

        def initialize(self, version, build_data):
            if version == "standard":
                ensure_built(Path(self.root), log=self.app.display_info)


if __name__ == "__main__":
    try:
        ensure_built()
    except (RuntimeError, subprocess.CalledProcessError) as error:
        print(error, file=sys.stderr)
        sys.exit(1)
