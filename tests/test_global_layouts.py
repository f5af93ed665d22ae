"""`T.annotate_layout({dQ: T.Layout(dQ.shape, fn)})` on a kernel parameter: the tensor's memory holds its
elements in the layout's order (element idx at the row-major position of fn(*idx) over the outputs' ranges),
as tilelang's FlashAttention backward stores dQ for its atomic adds and a second kernel reads it back with the
same layout. The interpreter honors it by a permuted copy around each call (tile_nb/runtime/layouts.py); a
CUDA kernel addresses the tensor through the layout itself where every use is one element at a time
(tile_nb/lower/emit/hand_layouts.py), else the launch gets the same copies. Checked here against permutations
computed independently, with plain index arithmetic; the sm_90a CUDA builds; the GPU twins are marked gpu."""
import linecache

import pytest
import torch

import tile_nb
import tile_nb.language as T
import tile_nb.tilelang as tilelang
from tile_nb.backend import toolchain
from tile_nb.errors import DSLError
from tile_nb.runtime.layouts import HandLayouts, LayoutError

needs_nvcc = pytest.mark.skipif(toolchain.find_tool("nvcc") is None, reason="needs nvcc to build cubins")


def make_dq_layout(dQ):
    """tilelang's dQ layout (example_gqa_bwd.py's rank-3 form): rows and columns in 8x8 MMA fragments."""
    return T.Layout(dQ.shape, lambda b, l, d: [b, l // 8, d // 8, d % 2, 4 * (l % 8) + (d % 8) // 2])


def _dq_positions(B, L, D) -> torch.Tensor:
    """The memory position of every dQ[b, l, d] under make_dq_layout, element by element in plain Python."""
    out = torch.empty(B, L, D, dtype=torch.int64)
    for b in range(B):
        for l in range(L):
            for d in range(D):
                o = (b, l // 8, d // 8, d % 2, 4 * (l % 8) + (d % 8) // 2)
                ext = (B, L // 8, D // 8, 2, 32)
                pos = 0
                for v, e in zip(o, ext, strict=True):
                    pos = pos * e + v
                out[b, l, d] = pos
    return out


@tilelang.jit(out_idx=[-1])
def _postprocess(batch, seq_len, dim, blk=16):
    """tilelang's postprocess kernel: dQ read through the layout, written out in half precision."""
    shape = [batch, seq_len, dim]

    @T.prim_func
    def post(dQ: T.Tensor(shape, T.float32), dQ_out: T.Tensor(shape, T.float16)):
        with T.Kernel(T.ceildiv(seq_len, blk), batch, threads=128) as (bx, bz):
            T.annotate_layout({dQ: make_dq_layout(dQ)})
            T.copy(dQ[bz, bx * blk:(bx + 1) * blk, :], dQ_out[bz, bx * blk:(bx + 1) * blk, :])

    return post


@tilelang.jit
def _accumulate(splits, batch, seq_len, dim, blk=64):
    """The backward kernel's pattern: blocks of `splits` add partial dQ tiles atomically into the annotated
    dQ (zero-filled by the caller)."""

    @T.prim_func
    def bwd(X: T.Tensor([splits, batch, seq_len, dim], T.float32), W: T.Tensor([dim, dim], T.float32),
            dQ: T.Tensor([batch, seq_len, dim], T.float32)):
        with T.Kernel(T.ceildiv(seq_len, blk), batch, splits, threads=128) as (bx, bz, s):
            T.annotate_layout({dQ: make_dq_layout(dQ)})
            x = T.alloc_shared((blk, dim), T.float32)
            w = T.alloc_shared((dim, dim), T.float32)
            dq = T.alloc_fragment((blk, dim), T.float32)
            T.copy(X[s, bz, bx * blk:(bx + 1) * blk, :], x)
            T.copy(W, w)
            T.clear(dq)
            T.gemm(x, w, dq)
            for i, j in T.Parallel(blk, dim):
                if bx * blk + i < seq_len:
                    T.atomic_add(dQ[bz, bx * blk + i, j], dq[i, j])

    return bwd


@tilelang.jit
def _staged(batch, seq_len, dim, blk=16):
    """dQ read through its layout by a tile copy into shared memory, then written out in logical order: the
    copy moves 16 bytes at a time (cp.async), which the layout's position is not exact for, so the CUDA
    launch permutes dQ around the kernel instead."""

    @T.prim_func
    def stage(dQ: T.Tensor([batch, seq_len, dim], T.float32),
              out: T.Tensor([batch, seq_len, dim], T.float32)):
        with T.Kernel(T.ceildiv(seq_len, blk), batch, threads=128) as (bx, bz):
            T.annotate_layout({dQ: make_dq_layout(dQ)})
            s = T.alloc_shared((blk, dim), T.float32)
            T.copy(dQ[bz, bx * blk:(bx + 1) * blk, :], s)
            T.copy(s, out[bz, bx * blk:(bx + 1) * blk, :])

    return stage


def _run_staged(B, L, D, device):
    torch.manual_seed(B * 100 + L + D)
    raw = torch.randn(B, L, D, device=device)  # dQ's memory, in the layout's order
    out = torch.full((B, L, D), float("nan"), device=device)
    _staged(B, L, D)(raw, out)
    pos = _dq_positions(B, L, D).to(device)
    torch.testing.assert_close(out, raw.reshape(-1)[pos.reshape(-1)].view(B, L, D), atol=0, rtol=0)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_a_tile_copy_of_several_elements_reads_through_the_layout(device):
    _run_staged(2, 24, 16, device)
    _run_staged(1, 8, 16, device)


def _run_pair(S, B, L, D, device):
    torch.manual_seed(S * 1000 + B * 100 + L + D)
    x = torch.randn(S, B, L, D, device=device)
    w = torch.randn(D, D, device=device) / D ** 0.5
    dq = torch.zeros(B, L, D, device=device)
    _accumulate(S, B, L, D)(x, w, dq)
    expected = (x.double() @ w.double()).sum(0)
    # the raw memory holds dQ in the layout's order
    pos = _dq_positions(B, L, D).to(device)
    torch.testing.assert_close(dq.reshape(-1)[pos.reshape(-1)].view(B, L, D).double(), expected,
                               atol=1e-4, rtol=1e-4)
    out = _postprocess(B, L, D)(dq)
    torch.testing.assert_close(out.double(), expected.half().double(), atol=2e-3, rtol=2e-3)
    return dq, expected


@pytest.mark.parametrize("S,B,L,D", [(3, 2, 24, 16), (1, 1, 8, 16), (2, 3, 136, 32)])
def test_backward_then_postprocess_on_the_interpreter(S, B, L, D):
    dq, expected = _run_pair(S, B, L, D, "cpu")
    _run_pair(S, B, L, D, "cpu")  # again: the cached call path
    if L * D > 64:  # a permutation that moves things: the memory in logical order would be wrong
        assert not torch.allclose(dq.double(), expected, atol=1e-3)


@pytest.mark.gpu
@pytest.mark.parametrize("S,B,L,D", [(3, 2, 24, 16), (1, 1, 8, 16), (4, 2, 200, 64)])
def test_backward_then_postprocess_on_gpu(S, B, L, D):
    _run_pair(S, B, L, D, "cuda")
    _run_pair(S, B, L, D, "cuda")  # again: the cached call path launches through the same permutation


# -- a layout that permits any size: a transpose of the first two dims, with a dynamic dim ----------------
@tile_nb.jit
def scale_into(X, Y, blk: int = 8):
    """Y[l, h, d] = 3 * X[l, h, d], Y stored as [h, l, d] (example_gqa_sink_bwd_varlen.py's dQ layout)."""
    L = T.dynamic("L")
    H, D = T.const("H, D")
    X: T.Tensor[[L, H, D], T.float32]
    Y: T.Tensor[[L, H, D], T.float32]
    with T.Kernel(T.ceildiv(L, blk), H, threads=32) as (bx, h):
        T.annotate_layout({Y: T.Layout(Y.shape, lambda l, h, d: [h, l, d])})
        for i, d in T.Parallel(blk, D):
            if bx * blk + i < L:
                Y[bx * blk + i, h, d] = X[bx * blk + i, h, d] * 3.0


@tile_nb.jit
def read_back(Y, Z, blk: int = 8):
    """Z = Y + 1, Y read through the same layout."""
    L = T.dynamic("L")
    H, D = T.const("H, D")
    Y: T.Tensor[[L, H, D], T.float32]
    Z: T.Tensor[[L, H, D], T.float32]
    with T.Kernel(T.ceildiv(L, blk), H, threads=32) as (bx, h):
        T.annotate_layout({Y: T.Layout(Y.shape, lambda l, h, d: [h, l, d])})
        for i, d in T.Parallel(blk, D):
            if bx * blk + i < L:
                Z[bx * blk + i, h, d] = Y[bx * blk + i, h, d] + 1.0


def _transposed(L, H, D, device):
    torch.manual_seed(L * 7 + H * 3 + D)
    x = torch.randn(L, H, D, device=device)
    y = torch.full((L, H, D), float("nan"), device=device)
    scale_into(x, y)
    # memory order [h, l, d]: the tensor's storage read as (H, L, D) is x transposed
    torch.testing.assert_close(y.reshape(-1).view(H, L, D), (3 * x).transpose(0, 1))
    z = torch.empty_like(x)
    read_back(y, z)
    torch.testing.assert_close(z, 3 * x + 1)


@pytest.mark.parametrize("L,H,D", [(13, 3, 5), (1, 1, 1), (1, 4, 7), (9, 1, 3)])
def test_any_size_layout_with_a_dynamic_dim(L, H, D):
    _transposed(L, H, D, "cpu")
    _transposed(L + 6, H, D, "cpu")  # another value of the T.dynamic dim: one kernel, a new permutation


@pytest.mark.gpu
@pytest.mark.parametrize("L,H,D", [(13, 3, 5), (1, 1, 1), (1000, 4, 33)])
def test_any_size_layout_on_gpu(L, H, D):
    _transposed(L, H, D, "cuda")


# -- refusals ----------------------------------------------------------------------------------------------
def test_sizes_the_layout_cannot_permute_are_refused_naming_the_buffer():
    dq = torch.zeros(1, 12, 8)  # 12 rows: l // 8 and l % 8 span 2 x 8 = 16 rows
    with pytest.raises(LayoutError) as info:
        _postprocess(1, 12, 8)(dq)
    err = info.value
    assert "'dQ'" in err.message and "wrong size" in err.message and "l // T.int64(8)" in err.message
    assert "annotate_layout" in linecache.getline(err.filename, err.lineno)


@tile_nb.jit
def not_bijective(X, how: str = "fold"):
    N = T.const("N")
    X: T.Tensor[[N, 4], T.float32]
    with T.Kernel(1, threads=32):
        if how == "fold":
            T.annotate_layout({X: T.Layout(X.shape, lambda i, j: [i, j % 2, j // 3])})
        elif how == "negative":
            T.annotate_layout({X: T.Layout(X.shape, lambda i, j: [i, j - 1])})
        for i, j in T.Parallel(N, 4):
            X[i, j] = X[i, j] * 2.0


def test_a_layout_that_is_not_a_bijection_is_refused():
    x = torch.randn(3, 4)
    before = x.clone()
    collision = r"'X'.*not a bijection: the elements \(0, 0\) and \(0, 2\) both land at position 0"
    with pytest.raises(LayoutError, match=collision):
        not_bijective(x)
    with pytest.raises(LayoutError, match="negative value -1"):
        not_bijective(x, how="negative")
    assert torch.equal(x, before)  # refused before anything ran


@tile_nb.jit
def refused(X, how: str):
    N = T.const("N")
    X: T.Tensor[[N], T.float32]
    with T.Kernel(1, threads=32):
        s = T.alloc_shared((N,), T.float32)
        f = T.alloc_fragment((N,), T.float32)
        if how == "fragment":
            T.annotate_layout({X: T.Fragment(X.shape, forward_thread_fn=lambda i: i % 32)})
        elif how == "shared":
            T.annotate_layout({s: T.Layout(s.shape, lambda i: [N - 1 - i])})
        elif how == "local":
            T.annotate_layout({f: T.Layout(f.shape, lambda i: [i])})
        elif how == "load":
            T.annotate_layout({X: T.Layout(X.shape, lambda i: [T.cast(X[i], "int32")])})
        elif how == "rank":
            T.annotate_layout({X: T.Layout(X.shape, lambda i, j: [i])})
        elif how == "twice":
            T.annotate_layout({X: T.Layout(X.shape, lambda i: [i])})
            T.annotate_layout({X: T.Layout(X.shape, lambda i: [N - 1 - i])})
        T.copy(X, s)
        T.copy(s, f)
        T.copy(f, X)


@pytest.mark.parametrize("how,message", [
    ("fragment", "'X' (global) with T.Fragment(...) is not supported"),
    ("shared", "(shared.dyn) with T.Layout"),
    ("local", "(local.fragment) with T.Layout"),
    ("load", "uses TensorLoad (X[i])"),
    ("rank", "its function must take 1 indices"),
    ("twice", "already has another T.Layout"),
])
def test_other_hand_layouts_are_refused_at_the_line(how, message):
    with pytest.raises(DSLError) as info:
        refused(torch.randn(8), how=how)
    err = info.value
    assert message in err.message
    assert "annotate_layout" in linecache.getline(err.filename, err.lineno)


def test_an_input_that_requires_grad_is_read_through_its_layout():
    """A tensor the kernel only reads may require grad (as for any kernel): its permuted copy-back is not an
    autograd operation."""
    y = torch.randn(5, 2, 3).requires_grad_()
    z = torch.empty(5, 2, 3)
    read_back(y, z)
    torch.testing.assert_close(z, y.detach().reshape(-1).view(2, 5, 3).transpose(0, 1) + 1)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_a_layout_with_a_dim_of_the_tensor(device):
    """`N - 1 - i` (a reversal) with N a T.dynamic dim read from the tensor at each call."""
    @tile_nb.jit
    def reverse_store(X, Y):
        N = T.dynamic("N")
        X: T.Tensor[[N], T.float32]
        Y: T.Tensor[[N], T.float32]
        with T.Kernel(T.ceildiv(N, 32), threads=32) as bx:
            T.annotate_layout({Y: T.Layout(Y.shape, lambda i: [N - 1 - i])})
            for i in T.Parallel(32):
                if bx * 32 + i < N:
                    Y[bx * 32 + i] = X[bx * 32 + i] + 0.5

    for n in (1, 7, 70):
        x = torch.randn(n, device=device)
        y = torch.empty(n, device=device)
        reverse_store(x, y)
        torch.testing.assert_close(y, (x + 0.5).flip(0))


def test_a_strided_or_aliased_tensor_is_refused_naming_the_parameter():
    y = torch.empty(4, 3, 2).transpose(0, 1)  # (3, 4, 2), not contiguous
    hand = HandLayouts.of_func(scale_into.specialize(torch.empty(3, 4, 2), torch.empty(3, 4, 2)))
    with pytest.raises(tile_nb.errors.NotContiguousError, match="argument 'Y' has a hand layout"):
        hand(lambda *a: None, [torch.empty(3, 4, 2), y])
    same = torch.empty(3, 4, 2)
    with pytest.raises(tile_nb.errors.ArgumentError, match="the same tensor is also argument 'X'"):
        scale_into(same, same)


# -- the decision: in the IR, the plan, the disk cache, and the CUDA ---------------------------------------
@needs_nvcc
def test_the_plan_keeps_the_layout_and_the_sm_90a_cuda_builds(tmp_path, monkeypatch):
    from tile_nb import runtime as rt

    monkeypatch.setenv("TILE_NB_CACHE_DIR", str(tmp_path))
    func = _accumulate(3, 2, 24, 16).tile_nb_kernel.specialize(torch.empty(3, 2, 24, 16), torch.empty(16, 16),
                                                torch.empty(2, 24, 16))
    assert "T.index_map(lambda b, l, d: (b, l // T.int64(8)" in func.script()
    kernel = rt.compile(func, "sm_90a")
    assert kernel.cubin is not None and "atomicAdd" in kernel.cuda_source
    note = "dQ: hand layout honored in the kernel (each access at the layout's position)"
    assert note in kernel.plan["notes"]
    assert [g["in_kernel"] for g in kernel.plan["global_layouts"]] == [True]
    rt.clear_memory_cache()
    cached = rt.compile(func, "sm_90a")
    assert cached.from_cache and cached.plan["global_layouts"] == kernel.plan["global_layouts"]
    # what a launch of the cached kernel applies is the permutation the interpreter applies
    from_plan = HandLayouts.of_plan(cached.name, cached.params, cached.plan)
    from_func = HandLayouts.of_func(func)
    t = torch.empty(2, 24, 16)
    (i, a), (j, b) = from_plan.positions[0], from_func.positions[0]
    assert i == j == 2
    assert torch.equal(from_plan.permutation(a, t), from_func.permutation(b, t))
    assert torch.equal(from_plan.permutation(a, t), _dq_positions(2, 24, 16).reshape(-1))


def test_the_phase_2_ir_text_round_trips():
    """Tuning workers parse the IR text and require it to print back the same."""
    import tvm

    func = scale_into.specialize(torch.empty(5, 2, 3), torch.empty(5, 2, 3))
    text = func.script()
    assert tvm.script.from_source(text).script() == text


@needs_nvcc
def test_a_compiled_kernel_launches_through_the_same_permutation(tmp_path, monkeypatch):
    """The GPU path without a GPU: a compiled kernel whose layout is not addressed in the kernel (the staged
    copy) launches (here a stand-in that does what the kernel does, on whatever tensors it is handed) through
    the permutation its plan lists, so it sees dQ in logical order, as the interpreter does; one addressed in
    the kernel (the atomic adds) is handed dQ's memory as it is."""
    from tile_nb import runtime as rt

    monkeypatch.setenv("TILE_NB_CACHE_DIR", str(tmp_path))
    B, L, D = 1, 16, 16
    torch.manual_seed(5)
    raw = torch.randn(B, L, D)  # not in logical order: the staged kernel must see it gathered
    func = _staged(B, L, D).tile_nb_kernel.specialize(raw, torch.empty(B, L, D))
    kernel = rt.compile(func, "sm_90a")
    assert [g["in_kernel"] for g in kernel.plan["global_layouts"]] == [False]
    assert "hand layouts not addressed in the kernel, which has the address of an element given to " \
           "tnb_cp_async_16" in kernel.plan["notes"]
    seen = []
    kernel._set_launch(None, lambda dQ, out: (seen.append(dQ.clone()), out.copy_(dQ)))
    out = torch.empty(B, L, D)
    try:
        kernel(raw, out)
    finally:
        rt.clear_memory_cache()  # the kernel with the stand-in launch must not serve another compile
    pos = _dq_positions(B, L, D).reshape(-1)
    torch.testing.assert_close(seen[0], raw.reshape(-1)[pos].view(B, L, D), atol=0, rtol=0)
    interpreted = torch.empty(B, L, D)
    _staged(B, L, D)(raw, interpreted)
    torch.testing.assert_close(out, interpreted, atol=0, rtol=0)

    S = 2
    x, w = torch.randn(S, B, L, D), torch.randn(D, D)
    func = _accumulate(S, B, L, D).tile_nb_kernel.specialize(x, w, torch.empty(B, L, D))
    kernel = rt.compile(func, "sm_90a")
    handed = []
    kernel._set_launch(None, lambda X, W, dQ: handed.append(dQ))
    dq = torch.randn(B, L, D)
    try:
        kernel(x, w, dq)
    finally:
        rt.clear_memory_cache()
    assert handed[0] is dq


def test_in_kernel_positions_are_the_layouts():
    """The position the CUDA kernel computes for each element (emit/hand_layouts.linear_index, simplified by
    TVM's analyzer as the emitter does) is the one plain index arithmetic gives, for every element."""
    import tvm
    import tvm.sym
    from tvm import tirx

    from tile_nb.lower.analysis.global_layouts import global_layouts
    from tile_nb.lower.emit.hand_layouts import LaidOut, laid_out, linear_index

    B, L, D = 2, 24, 16
    func = _accumulate(1, B, L, D).tile_nb_kernel.specialize(torch.empty(1, B, L, D), torch.empty(D, D),
                                                              torch.empty(B, L, D))
    (layout,) = global_layouts(func)
    param = next(p for p in func.params if p.name == "dQ")
    extents = laid_out(param, layout)
    assert extents == (B, L // 8, D // 8, 2, 32)
    entry = LaidOut(param, None, layout, extents)
    b, l, d = (tirx.Var(n, "int32") for n in "bld")
    analyzer = tvm.sym.Analyzer()
    position = analyzer.simplify(linear_index(entry, [b, l, d]))
    expected = _dq_positions(B, L, D)
    got = torch.empty(B, L, D, dtype=torch.int64)
    for i in range(B):
        for j in range(L):
            for k in range(D):
                value = tvm.sym.Analyzer().simplify(tirx.Let(b, i, tirx.Let(l, j, tirx.Let(d, k, position))))
                got[i, j, k] = int(value)
    assert torch.equal(got, expected)


@needs_nvcc
def test_a_layout_that_does_not_permute_keeps_the_copies_and_is_refused_at_the_call(tmp_path, monkeypatch):
    """12 rows under the 8-row layout: not addressed in the kernel (it would write out of place); the launch
    refuses it as the interpreter does (test_sizes_the_layout_cannot_permute_are_refused_naming_the_buffer).
    """
    from tile_nb import runtime as rt

    monkeypatch.setenv("TILE_NB_CACHE_DIR", str(tmp_path))
    func = _postprocess(1, 12, 8).tile_nb_kernel.specialize(torch.zeros(1, 12, 8))
    kernel = rt.compile(func, "sm_90a")
    assert [g["in_kernel"] for g in kernel.plan["global_layouts"]] == [False]
    kernel._set_launch(None, lambda *args: None)
    try:
        with pytest.raises(LayoutError, match="wrong size"):
            kernel(torch.zeros(1, 12, 8), torch.zeros(1, 12, 8).half())
    finally:
        rt.clear_memory_cache()


@tilelang.jit
def _accumulate_then_copy(batch, seq_len, dim, blk=16):
    """Two T.Kernel over one annotated dQ: the first adds into it element by element (addressable through the
    layout in the kernel), the second stages it with a T.copy into shared memory (not): planned apart, they
    would disagree."""
    shape = [batch, seq_len, dim]

    @T.prim_func
    def both(X: T.Tensor(shape, T.float32), dQ: T.Tensor(shape, T.float32), out: T.Tensor(shape, T.float32)):
        with T.Kernel(T.ceildiv(seq_len, blk), batch, threads=128) as (bx, bz):
            T.annotate_layout({dQ: make_dq_layout(dQ)})
            for i, j in T.Parallel(blk, dim):
                if bx * blk + i < seq_len:
                    T.atomic_add(dQ[bz, bx * blk + i, j], X[bz, bx * blk + i, j] * 2.0)
        with T.Kernel(T.ceildiv(seq_len, blk), batch, threads=128) as (bx, bz):
            T.annotate_layout({dQ: make_dq_layout(dQ)})
            s = T.alloc_shared((blk, dim), T.float32)
            T.copy(dQ[bz, bx * blk:(bx + 1) * blk, :], s)  # 16 bytes at a time (cp.async): not addressable
            T.copy(s, out[bz, bx * blk:(bx + 1) * blk, :])

    return both


@needs_nvcc
def test_kernels_of_one_function_that_disagree_on_a_hand_layout_all_leave_it_to_the_call():
    """Each T.Kernel is planned on its own (lowering.py); where one would address dQ through its layout and
    the other not, both leave it to the call's permuted copies (one permutation around the whole function,
    seen the same way by both), not the first through the layout of a tensor the call has already permuted."""
    from tile_nb import runtime as rt

    kernel = _accumulate_then_copy(1, 16, 16)
    x, dq, out = torch.randn(1, 16, 16), torch.zeros(1, 16, 16), torch.empty(1, 16, 16)
    kernel(x, dq, out)  # the interpreter: dQ = 2 x (in the layout's order in memory), read back in order
    torch.testing.assert_close(out, 2 * x)
    assert torch.equal(dq.reshape(-1)[_dq_positions(1, 16, 16).reshape(-1)], (2 * x).reshape(-1))
    func = kernel.tile_nb_kernel.specialize(x, dq, out)
    compiled = rt.compile(func, "sm_90a", options={"cache": False})
    assert [g["in_kernel"] for g in compiled.plan["global_layouts"]] == [False]
    each = [[g["in_kernel"] for g in k["global_layouts"]] for k in compiled.plan["kernels"]]
    assert each == [[False], [False]]


@pytest.mark.gpu
@pytest.mark.parametrize("L", [16, 40])
def test_kernels_that_disagree_on_a_hand_layout_on_gpu(L):
    torch.manual_seed(L)
    x = torch.randn(2, L, 16, device="cuda")
    dq, out = torch.zeros(2, L, 16, device="cuda"), torch.full((2, L, 16), float("nan"), device="cuda")
    _accumulate_then_copy(2, L, 16)(x, dq, out)
    torch.testing.assert_close(out, 2 * x)
    pos = _dq_positions(2, L, 16).reshape(-1).cuda()
    torch.testing.assert_close(dq.reshape(-1)[pos], (2 * x).reshape(-1))
