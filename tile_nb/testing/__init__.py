"""Testing notebooks that use tile_nb: the rules shared by the pytest plugin (`tile_nb.testing.pytest_plugin`,
registered as the `tile_nb` pytest plugin when tile_nb is installed) and by scripts that execute notebooks.

- A code cell **needs a GPU** when its metadata tags include `gpu` or a line of it is the
  comment `# TILE_NB_GPU`. Under `pytest --nbval` it runs where torch sees a CUDA device and is
  skipped, with that reason, elsewhere.
- `SANITIZE_FILE` holds the output sanitizers for what tile_nb prints (cell file names in error
  locations, execution counts, memory addresses), in nbval's `--nbval-sanitize-with` format; the
  plugin applies them to every notebook.

```python
from tile_nb.testing import needs_gpu, sanitize_patterns
needs_gpu({"cell_type": "code", "source": "# TILE_NB_GPU\\n...", "metadata": {}})   # True
```
Nothing here imports torch, nbval or Jupyter at import time.
"""
from __future__ import annotations

import functools
import re
from pathlib import Path

__all__ = ["GPU_TAG", "GPU_MARKER", "SANITIZE_FILE", "needs_gpu", "sanitize_patterns", "cuda_device"]

GPU_TAG = "gpu"
GPU_MARKER = "# TILE_NB_GPU"
SANITIZE_FILE = Path(__file__).with_name("nbval_sanitize.cfg")


def _source(cell) -> str:
    source = cell.get("source", "") if isinstance(cell, dict) else getattr(cell, "source", "")
    return "".join(source) if isinstance(source, list) else source


def needs_gpu(cell) -> bool:
    """Whether a notebook cell (an nbformat node or a plain dict) is marked as needing a GPU."""
    metadata = cell.get("metadata", {}) if isinstance(cell, dict) else getattr(cell, "metadata", {})
    tags = metadata.get("tags") or []
    if GPU_TAG in tags:
        return True
    return any(line.strip() == GPU_MARKER for line in _source(cell).splitlines())


def sanitize_patterns(path: str | Path = SANITIZE_FILE) -> list[tuple[str, str]]:
    """The (regex, replacement) pairs of a sanitizer file in nbval's format
    (`regex: ...` then `replace: ...`)."""
    text = Path(path).read_text()
    pairs = re.findall(r"^regex: (.*)$\n^replace: (.*)$", text, flags=re.MULTILINE)
    for regex, _ in pairs:
        re.compile(regex)  # a bad rule fails here, naming nothing else
    return pairs


@functools.cache
def cuda_device() -> str | None:
    """The name of the CUDA device torch sees (device 0), or None: no torch, no CUDA build, no device, or
    CUDA_VISIBLE_DEVICES hiding them. Memoized; never raises."""
    try:
        import torch

        if not torch.cuda.is_available():
            return None
        return torch.cuda.get_device_name(0)
    except Exception:  # noqa: BLE001 - a broken torch install means no GPU to run on
        return None
