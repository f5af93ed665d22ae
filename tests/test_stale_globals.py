"""Never a stale kernel: a notebook cell that changes what a kernel's elaboration reads (a helper
redefined, a global only a helper reads, a class or module attribute, a numpy array or a tensor
changed in place) must rebuild it.

Each "cell" is source run into one namespace with its text registered in linecache, as IPython
does. The kernels bake a value read at elaboration into the IR (`Y[i] = X[i] * scale()`), so a
stale kernel gives the old result.
"""
import textwrap
import types

import numpy as np
import pytest
import torch

import tile_nb
from tile_nb.errors import UnhashableArgumentError

BACKENDS = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]

KERNEL = """
@tile_nb.jit
def scaled(X, Y):
    N = T.const('N')
    X: T.Tensor[[N], T.float32]
    Y: T.Tensor[[N], T.float32]
    with T.Kernel(1, threads=32):
        for i in T.Parallel(N):
            Y[i] = X[i] * {expr}
"""


class Notebook:
    """Cells run one after another in one namespace, each under its own registered file name."""

    def __init__(self):
        self.ns = {}
        self.count = 0
        self.run(
            "import tile_nb\nimport tile_nb.language as T\nimport numpy as np\nimport torch\nimport types\n"
        )

    def run(self, text: str) -> dict:
        self.count += 1
        tile_nb.run_source(textwrap.dedent(text), self.ns, filename=f"<cell-{self.count}-{id(self)}>")
        return self.ns

    def kernel(self, expr: str):
        self.run(KERNEL.format(expr=expr))
        return self.ns["scaled"]


def check(kernel, backend: str, expected: float, n: int = 5, seed: int = 0):
    """The kernel on random X of odd length against the torch reference X * expected."""
    device = "cuda" if backend == "cuda" else "cpu"
    x = torch.randn(n, generator=torch.Generator().manual_seed(seed)).to(device)
    y = torch.empty_like(x)
    kernel(x, y)
    torch.testing.assert_close(y.cpu(), x.cpu() * expected)


@pytest.mark.parametrize("backend", BACKENDS)
def test_helper_redefined_in_a_later_cell(backend):
    nb = Notebook()
    nb.run("def scale():\n    return 2.0\n")
    k = nb.kernel("scale()")
    check(k, backend, 2.0)
    nb.run("def scale():\n    return 3.0\n")
    check(k, backend, 3.0)
    check(k, backend, 3.0, n=1)


@pytest.mark.parametrize("backend", BACKENDS)
def test_global_read_only_by_a_helper(backend):
    nb = Notebook()
    nb.run("FACTOR = 2.0\ndef inner():\n    return FACTOR\ndef scale():\n    return inner() * 1.0\n")
    k = nb.kernel("scale()")
    check(k, backend, 2.0)
    nb.run("FACTOR = 3.0\n")  # read two calls down, by the same helper objects
    check(k, backend, 3.0)
    nb.run("def inner():\n    return FACTOR + 1.0\n")  # the helper's helper redefined
    check(k, backend, 4.0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_class_attribute(backend):
    nb = Notebook()
    nb.run("class Cfg:\n    value = 2.0\n    def doubled(self):\n        return self.value * 2\n")
    k = nb.kernel("Cfg.value")
    check(k, backend, 2.0)
    nb.run("Cfg.value = 3.0\n")
    check(k, backend, 3.0)
    nb.run("cfg = Cfg()\n")
    k = nb.kernel("cfg.doubled()")  # a method reading an attribute of its instance
    check(k, backend, 6.0)
    nb.run("cfg.value = 0.5\n")
    check(k, backend, 1.0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_module_attribute(backend):
    nb = Notebook()
    nb.run("settings = types.ModuleType('settings')\nsettings.SCALE = 2.0\n")
    k = nb.kernel("settings.SCALE")
    check(k, backend, 2.0)
    nb.run("settings.SCALE = 3.0\n")
    check(k, backend, 3.0)
    nb.run("settings.pick = lambda: 5.0\n")
    k = nb.kernel("settings.pick()")  # a helper reached through a module
    check(k, backend, 5.0)
    nb.run("settings.pick = lambda: 7.0\n")
    check(k, backend, 7.0)


def test_values_passed_whole_to_a_helper():
    """A module or object handed to a helper is read through the helper's
    parameter, which no analysis follows:
    what it holds is keyed in full (a class attribute read through an instance included)."""
    nb = Notebook()
    nb.run("""
        settings = types.ModuleType('settings')
        settings.SCALE = 2.0
        class Cfg:
            extra = 0.0
        cfg = Cfg()
        def scale_of(mod, c):
            return mod.SCALE + c.extra
    """)
    k = nb.kernel("scale_of(settings, cfg)")
    check(k, "cpu", 2.0)
    nb.run("settings.SCALE = 3.0\n")
    check(k, "cpu", 3.0)
    nb.run("Cfg.extra = 1.0\n")
    check(k, "cpu", 4.0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_numpy_array_changed_in_place(backend):
    nb = Notebook()
    nb.run("W = np.array([2.0, 10.0])\n")
    k = nb.kernel("float(W[0])")
    check(k, backend, 2.0)
    nb.run("W[0] = 3.0\n")
    check(k, backend, 3.0)
    nb.run("W[1] = 11.0\n")  # an element the kernel does not read: keyed all the same (the whole array is)
    check(k, backend, 3.0)
    assert k.stats["templates"] == 3


@pytest.mark.parametrize("backend", BACKENDS)
def test_tensor_changed_in_place(backend):
    nb = Notebook()
    nb.run("W = torch.tensor([2.0])\n")
    k = nb.kernel("float(W[0])")
    check(k, backend, 2.0)
    nb.run("W.fill_(3.0)\n")
    check(k, backend, 3.0)
    nb.run("W[0] = 4.0\n")
    check(k, backend, 4.0)
    nb.run("W = torch.tensor([5.0])\n")  # rebound: a new tensor, maybe at the freed one's address
    check(k, backend, 5.0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_closure_config_object_and_helper(backend):
    nb = Notebook()
    nb.run("""
        class Cfg:
            def __init__(self, s):
                self.s = s
        def make(cfg, pick):
            @tile_nb.jit
            def scaled(X, Y):
                N = T.const('N')
                X: T.Tensor[[N], T.float32]
                Y: T.Tensor[[N], T.float32]
                with T.Kernel(1, threads=32):
                    for i in T.Parallel(N):
                        Y[i] = X[i] * pick(cfg)
            return scaled
        cfg = Cfg(2.0)
        BIAS = 0.0
        k = make(cfg, lambda c: c.s + BIAS)
    """)
    k = nb.ns["k"]
    check(k, backend, 2.0)
    nb.run("cfg.s = 3.0\n")
    check(k, backend, 3.0)
    nb.run("BIAS = 1.0\n")  # read by the lambda held in the closure
    check(k, backend, 4.0)


def test_an_unchanged_environment_keeps_hitting_the_cache():
    nb = Notebook()
    nb.run("""
        FACTOR = 2.0
        TABLE = (1.0, 2.0)
        W = np.array([1.0])
        T_W = torch.tensor([1.0])
        class Cfg:
            value = 1.0
    """)
    helper_cell = "def scale():\n    return FACTOR * TABLE[0] * float(W[0]) * float(T_W[0]) * Cfg.value\n"
    nb.run(helper_cell)
    k = nb.kernel("scale()")
    for n in (5, 5, 5):
        check(k, "cpu", 2.0, n=n)
    assert k.stats == {"templates": 1, "specializations": 1, "compilations": 0}
    assert k._environment_key() == k._environment_key()
    # The helper's cell run again unchanged: a new function object with equal code, still the same kernel.
    nb.run(helper_cell)
    check(k, "cpu", 2.0)
    assert k.stats["templates"] == 1 and k.stats["specializations"] == 1
    nb.run("FACTOR = 2\n")  # equal in Python, another type in the IR: a new template
    check(k, "cpu", 2.0)
    assert k.stats["templates"] == 2


@pytest.mark.parametrize("backend", BACKENDS)
def test_library_value_types_keyed_at_once_still_rebuild(backend):
    # a T.dtype and a tvm value read by the body: after the first call the key takes their type as a value
    # type (environment._VALUE_TYPES, no walk through the general path), and a change still rebuilds
    from tile_nb.frontend import environment

    nb = Notebook()
    nb.run("""
        ACC = T.float32
        BIG = tile_nb.language.float32(2.0)
        @tile_nb.jit
        def scaled(X, Y):
            N = T.const('N')
            X: T.Tensor[[N], T.float32]
            Y: T.Tensor[[N], T.float32]
            with T.Kernel(1, threads=32):
                for i in T.Parallel(N):
                    Y[i] = T.cast(X[i], ACC) * BIG
    """)
    k = nb.ns["scaled"]
    check(k, backend, 2.0)
    assert type(nb.ns["ACC"]) in environment._VALUE_TYPES and type(nb.ns["BIG"]) in environment._VALUE_TYPES
    check(k, backend, 2.0)
    assert k.stats["templates"] == 1
    nb.run("BIG = tile_nb.language.float32(3.0)\n")
    check(k, backend, 3.0)
    nb.run("ACC = T.float16\n")  # X * 3 rounded to float16 on the way
    device = "cuda" if backend == "cuda" else "cpu"
    x = torch.randn(5, generator=torch.Generator().manual_seed(3)).to(device)
    y = torch.empty_like(x)
    k(x, y)
    torch.testing.assert_close(y.cpu(), x.cpu().half().float() * 3.0)
    assert k.stats["templates"] == 3


def test_library_values_are_constants_not_followed():
    import math

    from tile_nb.frontend.environment import _library_value

    nb = Notebook()
    nb.run("import math\n")
    k = nb.kernel("math.pi")
    check(k, "cpu", math.pi)
    assert _library_value(math) and _library_value(torch.exp) and _library_value(np.ndarray)
    assert not _library_value(types.ModuleType("mine")) and not _library_value(check)  # user code: followed
    described = k.identity()["environment"]
    assert not any("global T" == key or key.startswith("global math") for key in described)
    assert k.identity()["persistable"]


def _package(root, name: str, dist_info: dict | None):
    """`root/name/__init__.py` defining a class and a function, and, when `dist_info` is given, the metadata
    of a distribution installed there (what `pip install --target root` leaves)."""
    (root / name).mkdir()
    source = "class Thing:\n    size = 4\n\ndef helper():\n    return Thing\n"
    (root / name / "__init__.py").write_text(source)
    if dist_info is not None:
        info = root / f"{name}-1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
        (info / "top_level.txt").write_text(name + "\n")
        (info / "RECORD").write_text(f"{name}/__init__.py,,\n")
        for file, text in dist_info.items():
            (info / file).write_text(text)


@pytest.mark.parametrize("installed, editable", [(True, False), (True, True), (False, False), ("egg", False)])
def test_a_distribution_installed_on_the_path_is_library_code(tmp_path, monkeypatch, installed, editable):
    """A package installed outside site-packages (`pip install --target`, then PYTHONPATH: how the GPU kit
    brings TVM) is library code, compared by identity; walking it class by class cost 3 ms a call. A folder
    of modules with no distribution, an editable install, or a project's own `.egg-info` (`setup.py develop`:
    no installer's RECORD) is the user's code: followed."""
    import importlib
    import sys

    from tile_nb.frontend import environment as E

    name = f"tnb_pkg_{installed}{int(editable)}"
    editable_url = '{"url": "file:///src", "dir_info": {"editable": true}}'
    direct_url = {"direct_url.json": editable_url} if editable else {}
    _package(tmp_path, name, direct_url if installed else None)
    if installed == "egg":  # setup.py develop's metadata: PKG-INFO and top_level.txt, no RECORD
        info = tmp_path / f"{name}-1.0.dist-info"
        egg = tmp_path / f"{name}.egg-info"
        (info / "RECORD").unlink()
        (info / "METADATA").rename(info / "PKG-INFO")
        info.rename(egg)
    monkeypatch.syspath_prepend(str(tmp_path))
    E._installed_elsewhere.cache_clear()
    E._library_file.cache_clear()
    try:
        module = importlib.import_module(name)
        library = installed is True and not editable
        assert E._library_value(module.Thing) is library
        assert E._library_value(module.helper) is library
        assert E._library_value(module) is library
    finally:
        sys.modules.pop(name, None)
        E._LIBRARY_MODULES.clear()
        E._installed_elsewhere.cache_clear()
        E._library_file.cache_clear()


def test_recursive_helper_terminates():
    nb = Notebook()
    nb.run("def fact(n):\n    return 1.0 if n <= 1 else n * fact(n - 1)\n")
    k = nb.kernel("fact(3)")
    check(k, "cpu", 6.0)
    key = k._environment_key()
    assert key == k._environment_key()


def test_helper_not_yet_defined_at_decoration():
    nb = Notebook()
    k = nb.kernel("later()")
    nb.run("def later():\n    return 2.5\n")
    check(k, "cpu", 2.5)
    nb.run("def later():\n    return 1.5\n")
    check(k, "cpu", 1.5)


def test_a_large_numpy_array_raises_naming_it():
    nb = Notebook()
    nb.run("BIG = np.zeros(300_000)\ndef first():\n    return float(BIG[0]) + 1.0\n")
    k = nb.kernel("first()")
    x = torch.randn(3)
    with pytest.raises(UnhashableArgumentError) as info:
        k(x, torch.empty(3))
    text = str(info.value)
    assert "'BIG'" in text and "function 'first'" in text and "2.3 MiB" in text
    assert "return float(BIG[0]) + 1.0" in text  # the caret line: where the helper reads it
    assert "pass it to the kernel as a tensor argument" in text
    nb.run("BIG = tuple(BIG[:4].tolist())\n")  # the hint's way out
    check(k, "cpu", 1.0, n=3)


def test_identity_follows_helpers_and_contents():
    nb = Notebook()
    nb.run("FACTOR = 2.0\nW = np.array([1.0, 2.0])\ndef scale():\n    return FACTOR * float(W[0])\n")
    k = nb.kernel("scale()")
    first = k.identity()
    env = first["environment"]
    assert first["persistable"], first["why"]
    assert env["global scale -> global FACTOR"] == "builtins.float:2.0"
    assert env["global scale"].startswith("function scale code ")
    assert "global scale -> global W" in env
    nb.run("W[0] = 5.0\n")
    assert k.identity()["environment"]["global scale -> global W"] != env["global scale -> global W"]
    nb.run("def scale():\n    return FACTOR * float(W[1])\n")
    assert k.identity()["environment"]["global scale"] != env["global scale"]
    # Another process (or cell) with the same code and values has the same identity.
    again = Notebook()
    again.run("FACTOR = 2.0\nW = np.array([1.0, 2.0])\ndef scale():\n    return FACTOR * float(W[0])\n")
    assert again.kernel("scale()").identity() == first


def test_key_is_cheap_for_a_kernel_reading_only_the_language():
    """A kernel whose body reads only `T` pays one identity check per call; the key stays empty."""
    nb = Notebook()
    k = nb.kernel("2.0")
    assert k._environment_key() == ()
    nb.run("T = types.ModuleType('T')\n")  # rebinding a library root keys everything the general way
    assert k._environment_key() != ()
