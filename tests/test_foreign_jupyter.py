"""`tutorials.sh --lab` with another Jupyter first on PATH (issue 34): the scripts run the environment's own
JupyterLab (`python -m jupyterlab`, `python -m jupyterlab.labextensions`), never a `jupyter-*` found on PATH.

Fast: the install scripts run against a stub python that logs its arguments. tests/foreign_jupyter.sh (run by
scripts/browser_test.sh) does the same with the real install and JupyterLab."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _executable(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(0o755)


def test_tutorials_lab_runs_the_environments_jupyterlab_with_a_foreign_jupyter_on_path(tmp_path):
    root = tmp_path / "repo"
    (root / "scripts").mkdir(parents=True)
    for name in ("tutorials.sh", "install.sh", "install_extension.sh"):
        shutil.copy(REPO / "scripts" / name, root / "scripts" / name)
    (root / "extension").symlink_to(REPO / "extension")  # read only: the scripts hash its sources
    prefix = tmp_path / "prefix"
    (prefix / "share/jupyter/labextensions/tile-nb-labextension").mkdir(parents=True)
    log = tmp_path / "python.log"
    python = tmp_path / "python"
    _executable(python, f"""#!/usr/bin/env bash
echo "$*" >> {log}
case "$*" in
  *"print(sys.prefix)"*) echo {prefix} ;;
  "-m jupyterlab.labextensions list") echo "tile-nb-labextension v0.1.0 enabled OK (python, tile_nb)" ;;
esac
""")
    _executable(root / "scripts" / "python.sh", f"#!/usr/bin/env bash\necho {python}\n")
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    for name in ("jupyter", "jupyter-lab", "jupyter-labextension", "jupyter-server"):
        _executable(foreign / name, f'#!/bin/sh\necho "foreign {name} $*"\nexit 1\n')
    env = dict(os.environ, PATH=f"{foreign}{os.pathsep}{os.environ['PATH']}")
    done = subprocess.run(["bash", str(root / "scripts" / "tutorials.sh"), "--lab", "--no-browser"],
                          capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "foreign" not in done.stdout + done.stderr
    calls = log.read_text().splitlines()
    assert "-m jupyterlab.labextensions list" in calls, calls
    assert calls[-1].startswith("-m jupyterlab ") and calls[-1].endswith("--no-browser notebooks/"), calls
    assert not [c for c in calls if c.startswith("-m jupyter ")], calls
