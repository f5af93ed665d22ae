"""tile_nb: write tile-level GPU kernels in Python, in a notebook.

```python
import tile_nb
import tile_nb.language as T

@tile_nb.jit
def gemm(A, B, C, block_M: int = 128, block_N: int = 128, block_K: int = 32):
    M, N, K = T.const('M, N, K')
    A: T.Tensor[[M, K], T.float16]
    ...
gemm(A, B, C)                 # compiles on first call (CUDA tensors) or interprets (CPU tensors)
gemm.template().script()      # phase 1: TVMScript with M, N, K symbolic
gemm.specialize(M=1024, N=1024, K=1024)   # phase 2: the PrimFunc for those shapes
```
Lowering options (TMA, persistent CTAs, stream-K, ...): `tile_nb.LoweringOptions`, per kernel with
`@tile_nb.jit(options={"tma": False})`, for the process with `tile_nb.set_options(...)` or
`with tile_nb.options(...)`. Importing tile_nb loads no Jupyter, widget or plotting package; the notebook
pieces load on `%load_ext tile_nb`.
"""
import sys as _sys

from .autotune import Autotuner, autotune
from .errors import TileNBError
from .frontend.source import register_source, run_source
from .jit import JITFunction, NotLowerableWarning, jit, lazy_jit
from .lower.options import LoweringOptions, options, reset_options, set_options
from .torch.dynamo import install_dynamo_hook as _install_dynamo_hook

# kernels called inside torch.compile become their custom ops (tile_nb/torch; no import)
_install_dynamo_hook()

__version__ = "0.1.0"

__all__ = [
    "jit",
    "lazy_jit",
    "JITFunction",
    "NotLowerableWarning",
    "autotune",
    "Autotuner",
    "TileNBError",
    "run_source",
    "register_source",
    "__version__",
    "load_ipython_extension",
    "LoweringOptions",
    "options",
    "set_options",
    "reset_options",
]


def load_ipython_extension(ip):
    """`%load_ext tile_nb`: registers the `%%tilekernel` cell magic."""
    from .notebook import load_ipython_extension as load

    load(ip)


class _Face:
    """A method of `JITFunction` that a layer above jit provides (`gemm.bench`, `.sweep`, `.tune` from
    tile_nb/bench/faces.py; `gemm.show` from tile_nb/notebook/faces.py). jit.py imports neither
    layer: the first use of a face imports its layer's faces module and puts those methods on the
    class in place of these stand-ins, so `import tile_nb` stays light and the methods work where the
    user never imported those layers."""

    def __init__(self, name: str, load):
        self.name, self.load = name, load

    def __get__(self, obj, owner=None):
        faces = self.load()
        for name, method in faces.items():
            setattr(JITFunction, name, method)
        method = faces[self.name]
        return method if obj is None else method.__get__(obj, owner)


def _bench_faces() -> dict:
    from .bench.faces import FACES

    return FACES


def _notebook_faces() -> dict:
    from .notebook.faces import FACES

    return FACES


for _name in ("bench", "sweep", "tune"):
    setattr(JITFunction, _name, _Face(_name, _bench_faces))
JITFunction.show = _Face("show", _notebook_faces)


def _connect_notebook() -> None:
    """Imported inside a running IPython: let it display bench results (HTML tables, plots) and tuning
    progress (a widget bar) without `%load_ext tile_nb`. Registers lazy hooks only: nothing heavy is imported
    here, and outside IPython (IPython not already loaded) this does nothing."""
    ipython = _sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None and hasattr(ipython, "get_ipython") else None
    if shell is None:
        return
    from .notebook.hooks import connect

    connect(shell)


_connect_notebook()
