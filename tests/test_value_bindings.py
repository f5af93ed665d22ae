"""A name assigned a value read from memory inside a kernel keeps the value read there, as in tilelang: `v =
values[i]` then a store into `values` leaves `v` as it was (before, `v` stood for the expression and read the
new value at each use, so a swap through a temporary silently copied one element twice). One name and
several (`a, b = X[i], X[j]`), inside T.Parallel and at block level; interpreter against torch, and the GPU
(marked gpu)."""

import pytest
import torch

import tile_nb
import tile_nb.language as T

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


@tile_nb.jit
def swap_pairs(X, block: int = 64):
    """Swaps X[2k] and X[2k + 1] through a temporary, and with a tuple of names."""
    N = T.const("N")
    X: T.Tensor[[N], T.float32]
    with T.Kernel(T.ceildiv(N, block), threads=64) as bx:
        s = T.alloc_shared((block,), T.float32)
        T.copy(X[bx * block], s)
        for i in T.Parallel(block // 2):
            t = s[2 * i]
            s[2 * i] = s[2 * i + 1]
            s[2 * i + 1] = t
        for i in T.Parallel(block // 2):  # swapped back, then once more: a tuple of names
            a, b = s[2 * i], s[2 * i + 1]
            s[2 * i] = b
            s[2 * i + 1] = a
        for i in T.Parallel(block // 2):
            u = s[2 * i]
            s[2 * i] = s[2 * i + 1]
            s[2 * i + 1] = u
        T.copy(s, X[bx * block])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("N", [64, 2, 130])
def test_a_swap_through_temporaries(device, N):
    x = torch.randn(N, device=device)
    want = x.clone()
    pairs = N - N % 2
    want[:pairs] = want[:pairs].view(-1, 2).flip(1).reshape(-1)
    swap_pairs(x)
    torch.testing.assert_close(x, want)


@tile_nb.jit
def first_then_overwrite(X):
    """out[0] = X[0] as it was before X[0] is overwritten at block level."""
    N = T.const("N")
    X: T.Tensor[[N], T.float32]
    out = T.empty((1,), T.float32)
    with T.Kernel(1, threads=32) as bx:
        first = X[0]
        X[0] = first + 100.0
        out[0] = first
    return out


@tile_nb.jit
def running_sums(X, n: int = 6):
    """out[k] = X[0] + ... + X[k] with a Python name as the running sum (`total += X[k]`), X overwritten as
    it goes: the sum holds the values read, not expressions that read X again at the end."""
    X: T.Tensor[[n], T.float32]
    out = T.empty((n,), T.float32)
    with T.Kernel(1, threads=32) as bx:
        total = X[0]
        out[0] = total
        X[0] = -1.0
        for k in tuple(range(1, n)):  # a Python loop over a compile-time int: n statements
            total += X[k]
            X[k] = -1.0
            out[k] = total
    return out


@pytest.mark.parametrize("device", DEVICES)
def test_a_running_sum_in_a_python_name(device):
    x = torch.randn(6, device=device)
    want = torch.cumsum(x, 0)
    torch.testing.assert_close(running_sums(x), want)
    assert (x == -1.0).all()


@pytest.mark.parametrize("device", DEVICES)
def test_a_block_level_value_is_read_once(device):
    x = torch.randn(5, device=device)
    before = float(x[0])
    out = first_then_overwrite(x)
    assert float(out[0]) == pytest.approx(before)
    assert float(x[0]) == pytest.approx(before + 100.0)


def test_the_ir_binds_the_value_under_the_users_name():
    text = swap_pairs.specialize(N=64).script()
    assert "t: T.let[T.float32] = s[2 * i]" in text and "a: T.let[T.float32] = s[2 * i]" in text
    assert "b: T.let[T.float32] = s[2 * i + 1]" in text
