"""A pipelined loop whose copies are placed by a value the body reads (`blk = Idx[k]`) and run under an `if`
(block-sparse attention's form): they are issued ahead with the value computed again for their iteration and
only where the condition holds (lower/analysis/schedule.py, AheadIssue); the copies that cannot be stay in
order, with the reason in the plan. A tile used after the loop stays in order too: the code there would read
stage 0, not the stage of the last iteration."""
from __future__ import annotations

import pytest
import torch

import tile_nb
import tile_nb.language as T
from tile_nb.backend import toolchain

needs_nvcc = pytest.mark.skipif(toolchain.find_tool("nvcc") is None, reason="needs nvcc to build cubins")
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


@tile_nb.jit
def selected_blocks(Q, K, Idx, num_stages=2):
    """Sum over the 32-row blocks of K that Idx names (a negative entry: none) of Q @ block^T."""
    N = T.dynamic("N")
    Q: T.Tensor[[16, 64], T.float16]
    K: T.Tensor[[256, 64], T.float16]
    Idx: T.Tensor[[N], T.int32]
    Y = T.empty((16, 32), T.float32)
    with T.Kernel(1, threads=64) as _:
        q = T.alloc_shared((16, 64), T.float16)
        k_s = T.alloc_shared((32, 64), T.float16)
        acc = T.alloc_fragment((16, 32), T.float32)
        T.copy(Q, q)
        T.clear(acc)
        for k in T.Pipelined(N, num_stages=num_stages):
            blk = Idx[k]
            if blk >= 0:
                T.copy(K[blk * 32:(blk + 1) * 32, :], k_s)
                T.gemm(q, k_s, acc, transpose_B=True)
        T.copy(acc, Y)
    return Y


@tile_nb.jit
def selected_rows_sum(K, Idx, Cols):
    """Per 32-row block of K that Idx names (negative: none), the sum of each row's first Cols[k] columns
    (a gather-style kernel whose copy and condition read values fixed outside the loop, on 17 rows)."""
    N = T.dynamic("N")
    K: T.Tensor[[170, 48], T.float32]
    Idx: T.Tensor[[N], T.int32]
    Cols: T.Tensor[[N], T.int32]
    Y = T.empty((17, 48), T.float32)
    with T.Kernel(1, threads=128) as _:
        k_s = T.alloc_shared((17, 48), T.float32)
        acc = T.alloc_fragment((17, 48), T.float32)
        T.clear(acc)
        for k in T.Pipelined(N, num_stages=3):
            blk = Idx[k]
            width = Cols[k]
            if blk >= 0 and width > 0:
                T.copy(K[blk * 17:(blk + 1) * 17, :], k_s)
                for i, j in T.Parallel(17, 48):
                    acc[i, j] += T.if_then_else(j < width, k_s[i, j], 0.0)
        T.copy(acc, Y)
    return Y


def _plan(kernel, *args):
    from tile_nb.backend.target import resolve_target
    from tile_nb.lower.analysis.plan import make_plan

    return make_plan(kernel.specialize(*args), resolve_target("sm_90a"))


def _selected_blocks_reference(q, k, idx):
    y = torch.zeros(16, 32)
    for b in idx.tolist():
        if b >= 0:
            y += q.float() @ k[32 * b:32 * b + 32].float().T
    return y


def test_the_copy_under_the_if_is_issued_ahead_where_its_condition_holds():
    q, k = torch.randn(16, 64).half(), torch.randn(256, 64).half()
    idx = torch.tensor([1, -1], dtype=torch.int32)
    (pipeline,) = _plan(selected_blocks, q, k, idx).summary()["pipelines"]
    assert pipeline["prefetched"] == ["k_s"] and pipeline["in_order"] == []
    assert pipeline["guarded"] == {"k_s": "blk >= 0"}


@needs_nvcc
def test_the_issue_reads_the_index_of_its_own_iteration_and_tests_its_condition():
    q, k = torch.randn(16, 64).half(), torch.randn(256, 64).half()
    idx = torch.tensor([1, -1], dtype=torch.int32)
    source = selected_blocks.compile(q, k, idx, target="sm_90a").cuda_source
    loop = source[source.index("for (int k = 0;"):]
    assert "int blk_ahead_1 = Idx_ptr[(k + 1)];" in loop, loop[:1500]
    assert "if (0 <= blk_ahead_1) {" in loop, loop[:1500]
    # the consumer's copy is gone: the only cp.async of the loop is the issue ahead
    consumer = loop.index("int blk = Idx_ptr[k];")
    assert loop.index("if (0 <= blk_ahead_1)") < consumer
    assert "tnb_cp_async" not in loop[consumer:loop.index("\n  }\n")]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("num_stages", [1, 2, 3])
@pytest.mark.parametrize("idx", [[3, -1, 0, 7, -1, 2, 5], [6], [-1], [-1, -1, 4, -1], [2, 2, 2]])
def test_selected_blocks_agree_with_torch(device, num_stages, idx):
    torch.manual_seed(0)
    q, k = torch.randn(16, 64).half(), torch.randn(256, 64).half()
    idx = torch.tensor(idx, dtype=torch.int32)
    y = selected_blocks(q.to(device), k.to(device), idx.to(device), num_stages=num_stages)
    torch.testing.assert_close(y.cpu(), _selected_blocks_reference(q, k, idx), atol=2e-2, rtol=2e-3)


@pytest.mark.parametrize("device", DEVICES)
def test_a_copy_under_a_compound_condition_with_odd_rows_agrees_with_torch(device):
    torch.manual_seed(1)
    k = torch.randn(170, 48)
    idx = torch.tensor([9, -1, 0, 4, 9, -1, 2, 3], dtype=torch.int32)
    cols = torch.tensor([48, 5, 0, 1, 17, 48, 33, 47], dtype=torch.int32)
    (pipeline,) = _plan(selected_rows_sum, k, idx, cols).summary()["pipelines"]
    assert pipeline["prefetched"] == ["k_s"] and pipeline["guarded"] == {"k_s": "blk >= 0 and width > 0"}
    y = selected_rows_sum(k.to(device), idx.to(device), cols.to(device))
    expect = torch.zeros(17, 48)
    for b, w in zip(idx.tolist(), cols.tolist(), strict=True):
        if b >= 0 and w > 0:
            expect[:, :w] += k[17 * b:17 * b + 17, :w]
    torch.testing.assert_close(y.cpu(), expect)


@tile_nb.jit
def tile_used_outside_the_if(Q, K, Idx):
    Q: T.Tensor[[16, 64], T.float16]
    K: T.Tensor[[256, 64], T.float16]
    Idx: T.Tensor[[4], T.int32]
    Y = T.empty((16, 32), T.float32)
    with T.Kernel(1, threads=64) as _:
        q = T.alloc_shared((16, 64), T.float16)
        k_s = T.alloc_shared((32, 64), T.float16)
        acc = T.alloc_fragment((16, 32), T.float32)
        T.copy(Q, q)
        T.clear(acc)
        for k in T.Pipelined(4, num_stages=2):
            blk = Idx[k]
            if blk >= 0:
                T.copy(K[blk * 32:(blk + 1) * 32, :], k_s)
            T.gemm(q, k_s, acc, transpose_B=True)  # a skipped block reuses the last one copied
        T.copy(acc, Y)
    return Y


@tile_nb.jit
def condition_the_body_writes(Q, K, Idx):
    Q: T.Tensor[[16, 64], T.float16]
    K: T.Tensor[[256, 64], T.float16]
    Idx: T.Tensor[[4], T.int32]
    Y = T.empty((16, 32), T.float32)
    with T.Kernel(1, threads=64) as _:
        q = T.alloc_shared((16, 64), T.float16)
        k_s = T.alloc_shared((32, 64), T.float16)
        acc = T.alloc_fragment((16, 32), T.float32)
        seen = T.alloc_var(T.int32)
        seen = 0
        T.copy(Q, q)
        T.clear(acc)
        for k in T.Pipelined(4, num_stages=2):
            blk = Idx[k]
            if blk >= seen:
                T.copy(K[blk * 32:(blk + 1) * 32, :], k_s)
                T.gemm(q, k_s, acc, transpose_B=True)
                seen = blk
        T.copy(acc, Y)
    return Y


@pytest.mark.parametrize("kernel, reason", [
    (tile_used_outside_the_if, "k_s is copied in order: `k_s` is used outside the `if` its copy sits in"),
    (condition_the_body_writes,
     "k_s is copied in order: the condition of its `if` reads `seen`, which the loop body writes"),
])
def test_copies_that_cannot_be_issued_ahead_stay_in_order_with_the_reason(kernel, reason):
    q, k, idx = torch.randn(16, 64).half(), torch.randn(256, 64).half(), torch.tensor([1, -1, 3, 2])
    (pipeline,) = _plan(kernel, q, k, idx.int()).summary()["pipelines"]
    assert pipeline["prefetched"] == [] and pipeline["in_order"] == [reason]


@pytest.mark.parametrize("device", DEVICES)
def test_in_order_copies_under_an_if_agree_with_torch(device):
    q, k, idx = torch.randn(16, 64).half(), torch.randn(256, 64).half(), torch.tensor([1, -1, 3, 2]).int()
    y = tile_used_outside_the_if(q.to(device), k.to(device), idx.to(device))
    blocks = [1, 1, 3, 2]  # the skipped block reuses block 1
    expect = sum(q.float() @ k[32 * b:32 * b + 32].float().T for b in blocks)
    torch.testing.assert_close(y.cpu(), expect, atol=2e-2, rtol=2e-3)
    y = condition_the_body_writes(q.to(device), k.to(device), idx.to(device))
    expect = sum(q.float() @ k[32 * b:32 * b + 32].float().T for b in [1, 3])  # 2 < seen = 3
    torch.testing.assert_close(y.cpu(), expect, atol=2e-2, rtol=2e-3)


@tile_nb.jit
def last_block_read_after_the_loop(K, Idx):
    """The tile a pipelined loop copies into, read after the loop: it must hold the last iteration's block."""
    N = T.dynamic("N")
    K: T.Tensor[[256, 64], T.float16]
    Idx: T.Tensor[[N], T.int32]
    Y = T.empty((32, 64), T.float16)
    Z = T.empty((32, 64), T.float32)
    with T.Kernel(1, threads=64) as _:
        k_s = T.alloc_shared((32, 64), T.float16)
        acc = T.alloc_fragment((32, 64), T.float32)
        T.clear(acc)
        for k in T.Pipelined(N, num_stages=2):
            blk = Idx[k]
            T.copy(K[blk * 32:(blk + 1) * 32, :], k_s)
            for i, j in T.Parallel(32, 64):
                acc[i, j] += k_s[i, j]
        T.copy(k_s, Y)
        T.copy(acc, Z)
    return Y, Z


def test_a_tile_read_after_the_loop_is_copied_in_order():
    k, idx = torch.randn(256, 64).half(), torch.tensor([3, 1], dtype=torch.int32)
    (pipeline,) = _plan(last_block_read_after_the_loop, k, idx).summary()["pipelines"]
    assert pipeline["in_order"] == ["k_s is copied in order: `k_s` is used after the loop"]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("idx", [[3, 1, 0, 7, 2, 5], [3, 1, 0, 7, 2], [6]])
def test_the_tile_after_the_loop_holds_the_last_block(device, idx):
    """Six iterations over two stages put the last block in stage 1; the code after the loop used to read
    stage 0 there (the block before it) on the GPU."""
    k, idx = torch.randn(256, 64).half(), torch.tensor(idx, dtype=torch.int32)
    y, z = last_block_read_after_the_loop(k.to(device), idx.to(device))
    last = int(idx[-1])
    torch.testing.assert_close(y.cpu(), k[32 * last:32 * last + 32])
    torch.testing.assert_close(z.cpu(), sum(k[32 * b:32 * b + 32].float() for b in idx.tolist()))


def test_the_notebook_plan_view_names_the_condition():
    from tile_nb.notebook.plan import plan_text

    q, k = torch.randn(16, 64).half(), torch.randn(256, 64).half()
    text = plan_text(_plan(selected_blocks, q, k, torch.tensor([1, -1], dtype=torch.int32)).summary())
    assert "T.Pipelined loop k: 2 stages, prefetches k_s" in text
    assert "k_s is copied ahead only where `blk >= 0` holds for its iteration" in text
