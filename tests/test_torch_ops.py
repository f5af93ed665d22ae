"""tile_nb kernels as torch custom ops (tile_nb/torch/ops.py): the schema (mutated arguments, outputs), eager
calls through the op, fake tensors, make_fx, torch.compile(fullgraph=True) on eager / aot_eager / inductor
with no graph break, dynamic shapes, and the kernels that cannot be ops. The GPU twins are marked gpu."""
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import tile_nb
import tile_nb.language as T
import tile_nb.torch as tt
from tile_nb.torch import TorchOpError


@tile_nb.jit
def scaled_mul(X, W, scale: float = 1.0, block: int = 64):
    N = T.const('N')
    X: T.Tensor[[N], T.float32]
    W: T.Tensor[[N], T.float32]
    out = T.empty((N,), T.float32)
    with T.Kernel(T.ceildiv(N, block)) as bx:
        for i in T.Parallel(block):
            if bx * block + i < N:
                out[bx * block + i] = scale * X[bx * block + i] * W[bx * block + i]
    return out


@tile_nb.jit
def add_into(X, Y, block: int = 64):
    """Writes Y in place (no T.empty): the op mutates Y, not X."""
    N = T.dynamic('N')
    X: T.Tensor[[N], T.float32]
    Y: T.Tensor[[N], T.float32]
    with T.Kernel(T.ceildiv(N, block)) as bx:
        for i in T.Parallel(block):
            if bx * block + i < N:
                Y[bx * block + i] = Y[bx * block + i] + X[bx * block + i]


@tile_nb.jit
def row_stats(X, alpha: T.float32, out_dtype: T.dtype = T.float32, block_M: int = 4, block_N: int = 32):
    """Two outputs, a runtime scalar, a compile-time dtype: (alpha * row sums
    (M,), X cast and scaled (M, N))."""
    M, N = T.const('M, N')
    X: T.Tensor[[M, N], T.float32]
    sums = T.empty((M,), out_dtype)
    scaled = T.empty((M, N), out_dtype)
    with T.Kernel(T.ceildiv(M, block_M)) as bx:
        tile = T.alloc_fragment((block_M, block_N), T.float32)
        acc = T.alloc_fragment((block_M,), T.float32)
        T.copy(X[bx * block_M, 0], tile)
        T.reduce_sum(tile, acc, dim=1)
        for i in T.Parallel(block_M):
            if bx * block_M + i < M:
                sums[bx * block_M + i] = T.cast(alpha * acc[i], out_dtype)
        for i, j in T.Parallel(block_M, block_N):
            if bx * block_M + i < M and j < N:
                scaled[bx * block_M + i, j] = T.cast(alpha * tile[i, j], out_dtype)
    return sums, scaled


@tile_nb.jit
def dyn_scale(X, block: int = 64):
    """A T.dynamic dim in the output shape."""
    N = T.dynamic('N')
    X: T.Tensor[[N], T.float32]
    out = T.empty((N,), T.float32)
    with T.Kernel(T.ceildiv(N, block)) as bx:
        for i in T.Parallel(block):
            if bx * block + i < N:
                out[bx * block + i] = X[bx * block + i] * 2.0
    return out


def rand(*shape, seed=0, dtype=torch.float32, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype=dtype, device=device)


def graph_breaks() -> dict:
    from torch._dynamo.utils import counters

    return dict(counters["graph_break"])


@pytest.fixture
def fresh_dynamo():
    import torch._dynamo
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    yield
    torch._dynamo.reset()


# ---- the op and its schema ---------------------------------------------------------------------------------
def test_schema_functional_op():
    entry = tt.op(scaled_mul).entry({"scale": 2.0})
    assert entry.schema == "(Tensor X, Tensor W) -> Tensor"
    assert entry.mutated == ()
    assert entry.qualname.startswith("tile_nb::scaled_mul")
    assert tt.op(scaled_mul) is tt.op(scaled_mul)
    assert tt.op(scaled_mul).entry({"scale": 2.0}) is entry       # one op per compile-time key
    assert tt.op(scaled_mul).entry({"scale": 3.0}) is not entry


def test_schema_mutated_args_from_the_ir():
    entry = tt.op(add_into).entry({})
    assert entry.schema == "(Tensor X, Tensor(a!) Y) -> ()"      # Y written, X only read
    assert entry.mutated == ("Y",)


@tile_nb.jit
def col_sums(X, S, block_M: int = 4):
    """Writes S through T.atomic_add only."""
    M, N = T.const('M, N')
    X: T.Tensor[[M, N], T.float32]
    S: T.Tensor[[N], T.float32]
    with T.Kernel(T.ceildiv(M, block_M)) as bx:
        for i, j in T.Parallel(block_M, N):
            if bx * block_M + i < M:
                T.atomic_add(S[j], X[bx * block_M + i, j])


def test_schema_atomic_writes_are_mutations(fresh_dynamo):
    assert tt.op(col_sums).entry({}).schema == "(Tensor X, Tensor(a!) S) -> ()"

    def f(x, s):
        col_sums(x, s)
        return s * 2

    x, s1, s2 = rand(8, 5), torch.zeros(5), torch.zeros(5)
    torch.testing.assert_close(torch.compile(f, fullgraph=True, backend="aot_eager")(x, s2), f(x, s1))
    torch.testing.assert_close(s2, x.sum(0))


def test_schema_scalars_and_outputs():
    entry = tt.op(row_stats).entry({"out_dtype": T.float64})
    assert entry.schema == "(Tensor X, float alpha) -> (Tensor, Tensor)"


def test_op_call_equals_direct_call():
    x, w = rand(100), rand(100, seed=1)
    direct = scaled_mul(x, w, scale=2.0)
    through = tt.op(scaled_mul)(x, w, scale=2.0)
    via_dispatcher = tt.op(scaled_mul).torch_op(scale=2.0)(x, w)
    torch.testing.assert_close(through, direct)
    torch.testing.assert_close(via_dispatcher, direct)
    torch.testing.assert_close(direct, 2.0 * x * w)
    got = getattr(torch.ops.tile_nb, tt.op(scaled_mul).entry({"scale": 2.0}).opname).default(x, w)
    torch.testing.assert_close(got, direct)


def test_op_eager_path_goes_through_the_dispatcher_only_when_needed():
    """Plain tensors: the kernel's own call (no dispatcher); a tensor that requires
    grad with grad mode on: the op."""
    op = tt.op(scaled_mul)
    x, w = rand(16).requires_grad_(), rand(16, seed=1)
    with torch.no_grad():
        assert not op(x, w, scale=2.0).requires_grad
    y = op(x, w, scale=2.0)
    assert y.grad_fn is not None and "tile_nb" in y.grad_fn.name()


def test_a_writing_op_takes_the_direct_path_when_only_a_read_tensor_requires_grad(monkeypatch):
    """An op without outputs gives autograd nothing to attach: a read input that requires grad does not send
    the call through the dispatcher (which would only add its cost); a written one is refused."""
    from tile_nb.errors import RequiresGradError

    entry = tt.op(add_into).entry({})
    monkeypatch.setattr(entry, "dispatch", lambda runtime: pytest.fail("went through the dispatcher"))
    entry.__dict__.pop("eager", None)  # generated again with the patched dispatch
    x, y = rand(20).requires_grad_(), rand(20, seed=1)
    expected = y + x.detach()
    tt.op(add_into)(x, y)
    torch.testing.assert_close(y, expected)
    monkeypatch.undo()
    entry.__dict__.pop("eager", None)
    with pytest.raises(RequiresGradError):
        tt.op(add_into)(rand(20), rand(20, seed=1).requires_grad_())


def test_op_call_mutates_like_the_kernel():
    x, y = rand(70), rand(70, seed=1)
    expected = y + x
    assert tt.op(add_into).torch_op()(x, y) is None
    torch.testing.assert_close(y, expected)


@pytest.mark.parametrize("path", ["eager", "eager, keywords", "dispatcher"])
def test_op_bumps_the_version_of_written_tensors(path):
    """As torch's in-place ops: autograd notices that a tensor it saved was overwritten by the kernel."""
    a, b, x = rand(10).requires_grad_(), rand(10, seed=1), rand(10, seed=2)
    z = a * b                                                     # saves b for the backward
    version = b._version
    if path == "eager":
        tt.op(add_into)(x, b)
    elif path == "eager, keywords":
        tt.op(add_into)(X=x, Y=b, block=32)
    else:
        tt.op(add_into).torch_op()(x, b)
    assert b._version > version
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        z.sum().backward()


def test_op_scalars_and_two_outputs():
    x = rand(6, 32)
    sums, scaled = tt.op(row_stats).torch_op(out_dtype=T.float64)(x, 0.5)
    assert sums.dtype == scaled.dtype == torch.float64
    torch.testing.assert_close(sums, 0.5 * x.double().sum(1), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(scaled, 0.5 * x.double())


def _opcheck_cases(device="cpu"):
    return {
        "functional": (
            lambda: tt.op(scaled_mul).torch_op(scale=2.0),
            lambda: (rand(100, device=device), rand(100, seed=1, device=device)),
        ),
        "mutating": (
            lambda: tt.op(add_into).torch_op(),
            lambda: (rand(70, device=device), rand(70, seed=1, device=device)),
        ),
        "scalar, two outputs": (
            lambda: tt.op(row_stats).torch_op(out_dtype=T.float64),
            lambda: (rand(6, 32, device=device), 0.5),
        ),
        "atomic writes": (
            lambda: tt.op(col_sums).torch_op(),
            lambda: (rand(8, 5, device=device), torch.zeros(5, device=device)),
        ),
    }


@pytest.mark.parametrize("case", list(_opcheck_cases()))
def test_opcheck(case):
    """torch.library.opcheck: the schema's mutations are the real ones, the fake implementation agrees with
    the kernel, the autograd registration is sound, and AOT dispatch works with dynamic shapes."""
    make_op, make_args = _opcheck_cases()[case]
    torch.library.opcheck(make_op(), make_args())


# ---- fake tensors, make_fx ---------------------------------------------------------------------------------
def test_fake_tensor_shapes_dtypes_devices():
    from torch._subclasses.fake_tensor import FakeTensorMode

    op = tt.op(row_stats)
    with FakeTensorMode():
        x = torch.empty(37, 32)
        sums, scaled = op(x, 2.0, out_dtype=T.float64)
        assert sums.shape == (37,) and scaled.shape == (37, 32)
        assert sums.dtype == torch.float64 and scaled.device == x.device
        out = tt.op(dyn_scale)(torch.empty(1000))
        assert out.shape == (1000,) and out.dtype == torch.float32


def test_fake_tensor_checks_arguments():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        with pytest.raises(TorchOpError, match="'W' must have dtype torch.float32; got torch.float16"):
            tt.op(scaled_mul)(torch.empty(8), torch.empty(8, dtype=torch.float16))
        with pytest.raises(TorchOpError, match="'X' must have 1 dims"):
            tt.op(scaled_mul)(torch.empty(8, 2), torch.empty(8))
        with pytest.raises(RuntimeError, match="'W' dim 0 must be N = 8; got 9"):
            tt.op(scaled_mul)(torch.empty(8), torch.empty(9))


def test_make_fx_records_the_op():
    from torch.fx.experimental.proxy_tensor import make_fx

    gm = make_fx(lambda x, w: tt.op(scaled_mul)(x, w, scale=2.0) + 1)(rand(10), rand(10))
    targets = [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]
    assert any(t.startswith("tile_nb.scaled_mul") for t in targets), targets


# ---- torch.compile -----------------------------------------------------------------------------------------
def _model(x, w):
    return torch.relu(scaled_mul(x + 1, w, scale=2.0)) * 3       # the bare kernel, no wrapper


def _inductor_works() -> bool:
    import shutil

    return shutil.which("gcc") is not None or shutil.which("cc") is not None


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
def test_compile_bare_kernel_fullgraph(backend, fresh_dynamo):
    if backend == "inductor" and not _inductor_works():
        pytest.skip("inductor on the CPU needs a C++ compiler")
    x, w = rand(100), rand(100, seed=1)
    expected = _model(x, w)
    compiled = torch.compile(_model, fullgraph=True, backend=backend)
    torch.testing.assert_close(compiled(x, w), expected)
    torch.testing.assert_close(compiled(x, w), expected)
    assert graph_breaks() == {}


def test_compile_graph_holds_the_op(fresh_dynamo):
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    x, w = rand(16), rand(16, seed=1)
    torch.compile(_model, fullgraph=True, backend=backend)(x, w)
    (gm,) = graphs
    targets = [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]
    assert any("tile_nb.scaled_mul" in t for t in targets), targets


def test_compiled_calls_do_not_run_tile_nb_lookups(fresh_dynamo, monkeypatch):
    """Dynamo guards on the kernel's `__original_fn`, so every call of the compiled graph reads it: after the
    trace that read must be a dict lookup, not tile_nb's Python (as a property it ran two op lookups per
    call)."""
    from tile_nb.torch import dynamo

    looked_up = []
    dynamo_call = dynamo.dynamo_call
    monkeypatch.setattr(dynamo, "dynamo_call", lambda op_: looked_up.append(op_) or dynamo_call(op_))
    scaled_mul.__dict__.pop("__original_fn", None)  # as a kernel no compiled graph has used yet
    x, w = rand(16), rand(16, seed=1)
    compiled = torch.compile(_model, fullgraph=True, backend="eager")
    compiled(x, w)
    assert looked_up, "the trace reads __original_fn"
    looked_up.clear()
    for _ in range(3):
        torch.testing.assert_close(compiled(x, w), _model(x, w))
    assert looked_up == []


def test_op_names_are_the_same_in_every_process_and_name_what_the_op_does(tmp_path):
    """Inductor and AOTAutograd keep compiled graphs on disk and call ops by name, so a name must mean the
    same op in every process (with a per-process counter a graph compiled by one xdist worker called an op
    another did not have, seen on the H100), and differ when the kernel, its compile-time values or its
    pairing differ."""
    code = ("import sys; sys.path.insert(0, {tests!r}); import test_torch_ops as m; "
            "import tile_nb.torch as tt; {first}print(tt.op(m.scaled_mul).entry({{'scale': 2.0}}).qualname)")
    tests = str(Path(__file__).parent)
    names = [subprocess.run([sys.executable, "-c", code.format(tests=tests, first=first)],
                            capture_output=True, text=True, check=True).stdout.split()[-1]
             for first in ("", "tt.op(m.add_into).entry({}); tt.op(m.dyn_scale).entry({}); ")]
    assert names[0] == names[1] and names[0].startswith("tile_nb::scaled_mul_"), names
    here = tt.op(scaled_mul).entry({"scale": 2.0}).qualname
    assert here == names[0]
    others = {tt.op(scaled_mul).entry({"scale": 3.0}).qualname, tt.op(add_into).entry({}).qualname}
    assert here not in others and len(others) == 2


def test_a_kernel_reading_an_unstable_value_gets_a_name_no_other_process_has():
    class Opaque:  # its repr has an address: no stable text across processes
        pass

    opaque = Opaque()

    @tile_nb.jit
    def scale_by(X):
        N = T.const('N')
        X: T.Tensor[[N], T.float32]
        out = T.empty((N,), T.float32)
        with T.Kernel(T.ceildiv(N, 32)) as bx:
            for i in T.Parallel(32):
                if bx * 32 + i < N and opaque is not None:
                    out[bx * 32 + i] = X[bx * 32 + i] * 2.0
        return out

    assert not scale_by.identity()["persistable"]
    assert tt.op(scale_by).entry({}).opname.startswith("scale_by_u")
    torch.testing.assert_close(tt.op(scale_by)(rand(40)), rand(40) * 2.0)


def test_mutating_op_needs_no_python_autograd_kernel():
    """An op with no outputs falls through the Autograd key (nothing to attach a grad_fn to): its OpOverload
    still writes in place, also when the tensor it reads requires grad."""
    entry = tt.op(add_into).entry({})
    x, y = rand(20).requires_grad_(), rand(20, seed=1)
    expected = y + x.detach()
    assert entry.overload(x, y) is None
    torch.testing.assert_close(y, expected)
    dump = torch._C._dispatch_dump(entry.qualname).splitlines()
    autograd = [line for line in dump if line.startswith("Autograd")]
    assert len(autograd) == 1 and "fallthrough" in autograd[0], autograd
    functional = tt.op(scaled_mul).entry({"scale": 3.0}).qualname  # has outputs: the NoBackward kernel
    assert "fallthrough" not in torch._C._dispatch_dump(functional)


def test_compile_kernel_held_by_a_module(fresh_dynamo):
    class Scale(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.kernel = scaled_mul
            self.w = torch.nn.Parameter(rand(40, seed=1))

        def forward(self, x):
            return self.kernel(x, self.w, 3.0) - 1          # the compile-time scale given positionally

    module = Scale()
    x = rand(40)
    with torch.no_grad():
        expected = module(x)
        got = torch.compile(module, fullgraph=True, backend="aot_eager")(x)
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(expected, 3.0 * x * module.w.detach() - 1)
    assert graph_breaks() == {}


def test_compile_mutating_kernel(fresh_dynamo):
    def f(x, y):
        add_into(x * 2, y)
        return y + 1

    x, y1, y2 = rand(50), rand(50, seed=1), rand(50, seed=1)
    expected = f(x, y1)
    got = torch.compile(f, fullgraph=True, backend="aot_eager")(x, y2)
    torch.testing.assert_close(got, expected)
    # the in-place write reached the caller's tensor
    torch.testing.assert_close(y2, y1)
    assert graph_breaks() == {}


def test_writing_a_tensor_that_requires_grad_is_refused(fresh_dynamo):
    """As the bare kernel refuses it: the write would bypass autograd (torch refuses
    in-place ops on such leaves)."""
    from tile_nb.errors import RequiresGradError

    x, y = rand(10), rand(10, seed=1).requires_grad_()
    with pytest.raises(RequiresGradError, match="writes argument 'Y', which requires grad"):
        tt.op(add_into)(x, y)

    def f(x, y):
        add_into(x, y)
        return y * 2

    with pytest.raises(Exception, match="writes argument 'Y', which requires grad"):
        torch.compile(f, fullgraph=True, backend="aot_eager")(x, y)

    def g(x, y):
        with torch.no_grad():
            add_into(x, y)
        return y * 2

    expected = y.detach() + x
    torch.testing.assert_close(torch.compile(g, fullgraph=True, backend="aot_eager")(x, y), 2 * expected)
    torch.testing.assert_close(y.detach(), expected)


def test_compile_keyword_compile_time_values_and_scalars(fresh_dynamo):
    def f(x):
        sums, scaled = row_stats(x, 0.25, out_dtype=T.float64, block_M=8)
        return sums.sum() + scaled.sum()

    x = rand(12, 32)
    torch.testing.assert_close(torch.compile(f, fullgraph=True, backend="aot_eager")(x), f(x))
    assert graph_breaks() == {}


def test_compile_the_op_object(fresh_dynamo):
    op = tt.op(scaled_mul)
    custom = op.torch_op(scale=2.0)

    def f(x, w):
        return op(x, w, scale=2.0) + custom(x, w)

    x, w = rand(30), rand(30, seed=1)
    torch.testing.assert_close(torch.compile(f, fullgraph=True, backend="aot_eager")(x, w), 4.0 * x * w)
    assert graph_breaks() == {}


@pytest.mark.parametrize("kernel", ["dyn_scale", "scaled_mul"])
def test_compile_dynamic_shapes(kernel, fresh_dynamo):
    """dynamic=True: a T.dynamic dim and a T.const dim both stay symbolic in the
    graph (one graph, many sizes)."""
    from torch._dynamo.utils import counters

    fn = {"dyn_scale": lambda x: dyn_scale(x) + 1, "scaled_mul": lambda x: scaled_mul(x, x) + 1}[kernel]
    compiled = torch.compile(fn, fullgraph=True, backend="aot_eager", dynamic=True)
    for n in (17, 33, 130):
        x = rand(n)
        torch.testing.assert_close(compiled(x), fn(x))
    assert counters["stats"]["unique_graphs"] == 1
    assert graph_breaks() == {}


def test_import_loads_no_torch_dynamo():
    code = ("import sys, tile_nb, tile_nb.torch; "
            "print([m for m in ('torch', 'torch._dynamo', 'tvm') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@tile_nb.autotune(configs={"block": [32, 64]})
@tile_nb.jit
def tuned_scale(X, factor: float = 2.0, block: int = 64):
    N = T.const('N')
    X: T.Tensor[[N], T.float32]
    out = T.empty((N,), T.float32)
    with T.Kernel(T.ceildiv(N, block)) as bx:
        for i in T.Parallel(block):
            if bx * block + i < N:
                out[bx * block + i] = X[bx * block + i] * factor
    return out


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_autotuned_kernel_is_one_op(fresh_dynamo):
    """An autotuned kernel: one op per non-tuned compile-time key; its
    configuration is picked when it runs."""
    op = tt.op(tuned_scale)
    entry = op.entry({"factor": 3.0})
    assert "block" not in entry.static and entry.static["factor"] == 3.0
    x = rand(100)
    torch.testing.assert_close(op(x, factor=3.0), 3.0 * x)
    torch.testing.assert_close(op.torch_op(factor=3.0)(x), 3.0 * x)
    compiled = torch.compile(lambda t: tuned_scale(t, factor=3.0) + 1, fullgraph=True, backend="aot_eager")
    torch.testing.assert_close(compiled(x), 3.0 * x + 1)
    assert graph_breaks() == {}


# ---- kernels that cannot be ops ----------------------------------------------------------------------------
@tile_nb.jit
def data_dependent(X, block: int = 64):
    N = T.const('N')
    K = T.dynamic('K')
    X: T.Tensor[[N], T.float32]
    out = T.empty((K,), T.float32)
    with T.Kernel(1) as bx:
        for i in T.Parallel(block):
            if i < K and i < N:
                out[i] = X[i]
    return out


@tile_nb.jit
def via_pointer(A: T.ptr, block: int = 64):
    N = T.const('N')
    X = T.make_tensor(A, (N,), T.float32)
    with T.Kernel(T.ceildiv(N, block)) as bx:
        for i in T.Parallel(block):
            if bx * block + i < N:
                X[bx * block + i] = 0.0


@tile_nb.jit
def zero_through_table(ptrs, block: int = 64):
    G, N = T.const('G, N')
    ptrs: T.Tensor([G], T.ptr)
    with T.Kernel(G) as g:
        X = T.make_tensor(ptrs[g], (N,), T.float32)
        for i in T.Parallel(block):
            if i < N:
                X[i] = 0.0


def test_refuses_output_shape_known_only_at_run_time():
    with pytest.raises(
        TorchOpError,
        match=r"cannot have a fake implementation: the shape of its output 'out' "
        r"depends on K, which no argument's shape gives",
    ) as err:
        tt.op(data_dependent)(rand(8))
    assert err.value.hint and "K" in err.value.hint
    assert err.value.lineno is not None


def test_refuses_pointer_parameters():
    with pytest.raises(TorchOpError, match="'A' is a T.ptr"):
        tt.op(via_pointer).entry({"N": 8})
    with pytest.raises(TorchOpError, match="'ptrs' is a table of pointers"):
        tt.op(zero_through_table).entry({"G": 2, "N": 8})


def test_op_of_something_else():
    with pytest.raises(TypeError, match="takes a @tile_nb.jit kernel"):
        tt.op(lambda x: x)


# ---- GPU twins ---------------------------------------------------------------------------------------------
gpu = pytest.mark.gpu


@gpu
def test_gpu_op_call_equals_direct_call():
    x, w = rand(1000, device="cuda"), rand(1000, seed=1, device="cuda")
    direct = scaled_mul(x, w, scale=2.0)
    torch.testing.assert_close(tt.op(scaled_mul)(x, w, scale=2.0), direct)
    torch.testing.assert_close(tt.op(scaled_mul).torch_op(scale=2.0)(x, w), direct)
    y = rand(1000, seed=2, device="cuda")
    expected = y + x
    tt.op(add_into).torch_op()(x, y)
    torch.testing.assert_close(y, expected)


@gpu
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_gpu_compile_bare_kernel(backend, fresh_dynamo):
    x, w = rand(4096, device="cuda"), rand(4096, seed=1, device="cuda")
    compiled = torch.compile(_model, fullgraph=True, backend=backend)
    torch.testing.assert_close(compiled(x, w), _model(x, w))
    assert graph_breaks() == {}


@gpu
def test_gpu_compile_dynamic_and_mutating(fresh_dynamo):
    def f(x, y):
        add_into(dyn_scale(x), y)
        return y * 1

    compiled = torch.compile(f, fullgraph=True, backend="inductor", dynamic=True)
    for n in (100, 4096, 5000):
        x = rand(n, device="cuda")
        y1, y2 = rand(n, seed=1, device="cuda"), rand(n, seed=1, device="cuda")
        torch.testing.assert_close(compiled(x, y2), f(x, y1))
        torch.testing.assert_close(y2, y1)
    assert graph_breaks() == {}


@gpu
@pytest.mark.parametrize("case", list(_opcheck_cases()))
def test_gpu_opcheck(case):
    make_op, make_args = _opcheck_cases("cuda")[case]
    torch.library.opcheck(make_op(), make_args())


@gpu
def test_gpu_autotuned_kernel_under_compile(fresh_dynamo):
    x = rand(10000, device="cuda")
    compiled = torch.compile(lambda t: tuned_scale(t, factor=3.0) + 1, fullgraph=True, backend="inductor")
    torch.testing.assert_close(compiled(x), 3.0 * x + 1)
    assert graph_breaks() == {}


@gpu
def test_gpu_fake_device():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        out = tt.op(scaled_mul)(torch.empty(64, device="cuda"), torch.empty(64, device="cuda"))
        assert out.device.type == "cuda"



def test_bare_kernel_on_fake_tensors_and_under_make_fx():
    """The bare kernel (no tile_nb.torch.op) called on fake tensors goes through its op: FakeTensorMode gives
    the output shapes, make_fx (fake and symbolic tracing) records the op."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.proxy_tensor import make_fx

    with FakeTensorMode():
        out = dyn_scale(torch.empty(1000))
        assert out.shape == (1000,) and out.dtype == torch.float32
    for mode in ("fake", "symbolic"):
        gm = make_fx(lambda x: dyn_scale(x) + 1, tracing_mode=mode)(rand(10))
        targets = [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]
        assert any(t.startswith("tile_nb.dyn_scale") for t in targets), (mode, targets)
    x = rand(10)  # and real tensors afterwards still run the kernel itself
    torch.testing.assert_close(dyn_scale(x), tt.op(dyn_scale)(x))
