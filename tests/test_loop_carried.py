"""A Python name read and then rebound in a kernel loop (`acc = acc + x`)
would hold one iteration's expression:
the loop body runs once while the kernel is built. This gave silently wrong sums (the interpreter returned
0.0 + X[r, 4] for a 5-element row sum at 946c340..f4a076c); it is refused now, at the loop, with the fix in
the hint. Python loops (over a list, a compile-time range outside T.Kernel) carry values as Python does."""
import pytest
import torch

import tile_nb
import tile_nb.language as T
from tile_nb.errors import DSLError


@tile_nb.jit
def row_sum_rebinding(X, S):
    X: T.Tensor[[4, 5], T.float32]
    S: T.Tensor[[4], T.float32]
    with T.Kernel(4) as r:
        acc = 0.0
        for j in T.serial(5):
            acc = acc + X[r, j]
        S[r] = acc


@tile_nb.jit
def row_sum_augmented(X, S):
    X: T.Tensor[[4, 5], T.float32]
    S: T.Tensor[[4], T.float32]
    with T.Kernel(4) as r:
        acc = 0.0
        for j in range(5):   # inside T.Kernel, range() is a kernel loop
            acc += X[r, j]
        S[r] = acc


@pytest.mark.parametrize("kernel", [row_sum_rebinding, row_sum_augmented])
def test_value_carried_through_a_kernel_loop_is_refused(kernel):
    with pytest.raises(
        DSLError, match=r"`acc` is read and then reassigned in the kernel loop at line \d+"
    ) as info:
        kernel(torch.randn(4, 5), torch.empty(4))
    assert info.value.lineno == kernel.fn.__code__.co_firstlineno + 6
    assert "T.alloc_var" in info.value.hint and "acc = acc + ..." in info.value.hint


def test_kernel_variables_by_name_carry_through_loops_and_ifs():
    """tilelang's spelling: a name bound to T.alloc_var is a variable of the kernel; `x = v` and `x += v`
    store into it (in a loop, under a run-time `if`) and reading `x` reads it."""
    @tile_nb.jit
    def stats(X, S):
        X: T.Tensor[[4, 5], T.float32]
        S: T.Tensor[[4, 2], T.float32]
        with T.Kernel(4) as r:
            acc = T.alloc_var(T.float32)
            acc = 0.0
            for j in T.serial(5):
                acc = acc + X[r, j]
            positives = T.alloc_var(T.int32, 0)
            for j in T.serial(5):
                if X[r, j] > 0:
                    positives += 1
            S[r, 0] = acc
            S[r, 1] = positives

    x, s = torch.randn(4, 5), torch.empty(4, 2)
    stats(x, s)
    torch.testing.assert_close(s[:, 0], x.sum(1))
    torch.testing.assert_close(s[:, 1], (x > 0).sum(1).float())
    source = stats.compile(x, s, target="sm_90a").cuda_source
    assert "acc_ptr[0] = (acc_ptr[0] + X_ptr" in source


def test_the_hint_s_spelling_computes_the_sum():
    @tile_nb.jit
    def row_sum(X, S):
        X: T.Tensor[[4, 5], T.float32]
        S: T.Tensor[[4], T.float32]
        with T.Kernel(4) as r:
            acc = T.alloc_var(T.float32, init=0.0)
            for j in T.serial(5):
                acc[0] = acc[0] + X[r, j]
            S[r] = acc[0]

    x, s = torch.randn(4, 5), torch.empty(4)
    row_sum(x, s)
    torch.testing.assert_close(s, x.sum(1))


def test_python_loops_and_per_iteration_temporaries_are_fine():
    @tile_nb.jit
    def k(X, S, Y):
        X: T.Tensor[[4, 5], T.float32]
        S: T.Tensor[[4], T.float32]
        Y: T.Tensor[[4, 5], T.float32]
        with T.Kernel(4) as r:
            acc = 0.0
            for j in [0, 1, 2, 3, 4]:        # a Python loop: unrolled while the kernel is built
                acc += X[r, j]
            t = 1.0
            for j in T.serial(5):            # `t` is rebound before it is read: a per-iteration temporary
                t = X[r, j] * 2.0
                Y[r, j] = t
            S[r] = acc

    x, s, y = torch.randn(4, 5), torch.empty(4), torch.empty(4, 5)
    k(x, s, y)
    torch.testing.assert_close(s, x.sum(1))
    torch.testing.assert_close(y, 2 * x)


@pytest.mark.gpu
def test_kernel_variables_by_name_on_gpu():
    @tile_nb.jit
    def row_sum(X, S):
        X: T.Tensor[[4, 5], T.float32]
        S: T.Tensor[[4], T.float32]
        with T.Kernel(4, threads=32) as r:
            acc = T.alloc_var(T.float32, init=0.0)
            for j in T.serial(5):
                acc += X[r, j]
            S[r] = acc

    x, s = torch.randn(4, 5, device="cuda"), torch.empty(4, device="cuda")
    row_sum(x, s)
    torch.testing.assert_close(s, x.sum(1))


def test_loop_variables_in_a_runtime_if_branch_are_not_rebindings():
    """`for i in T.Parallel(...)` inside a run-time `if` makes new loop variables: reusing the name of an
    earlier loop's variable is not a leak (tilelang's sparse decoding examples do this)."""
    @tile_nb.jit
    def k(X, F, Y):
        X: T.Tensor[[6], T.float32]
        F: T.Tensor[[1], T.int32]
        Y: T.Tensor[[6], T.float32]
        with T.Kernel(1, threads=32) as _:
            for i in T.Parallel(6):
                Y[i] = X[i]
            if F[0] > 0:
                for i in T.Parallel(6):
                    Y[i] = Y[i] * 2.0

    x, y = torch.randn(6), torch.empty(6)
    k(x, torch.tensor([1], dtype=torch.int32), y)
    torch.testing.assert_close(y, 2 * x)
    k(x, torch.tensor([0], dtype=torch.int32), y)
    torch.testing.assert_close(y, x)
