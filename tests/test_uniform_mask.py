"""Masks tested once per block (lower/emit/uniform.py): the condition `never_true` derives must imply that the
mask is false at every point of the nest; checked exhaustively on small grids, and in the generated CUDA."""
import itertools

import pytest
import tvm.sym as sym
from tvm import tirx

from tile_nb.lower.emit.uniform import never_true
from tile_nb.lower.exprs import rewrite

I, J, K, BX, S = (tirx.Var(n, "int32") for n in ("i", "j", "k", "bx", "S"))
EXTENTS = {I: 8, J: 4}

MASKS = {  # the same formula over ints (brute force) and over IR variables (the analysis)
    "causal": lambda i, j, k, bx, s: (k * 4 + j >= s) | (k * 4 + j > bx * 8 + i),
    "ragged": lambda i, j, k, bx, s: k * 4 + j >= s,
    "not": lambda i, j, k, bx, s: ~(k * 4 + j < s) if not isinstance(k, int) else not (k * 4 + j < s),
    "and": lambda i, j, k, bx, s: (i - j > k) & (j + bx < s),
    "window": lambda i, j, k, bx, s: (bx * 8 + i - (k * 4 + j) >= s) | (k * 4 + j > bx * 8 + i),
}


def _value(expr, env) -> bool:
    return bool(
        int(sym.Analyzer().simplify(rewrite(expr, {v: tirx.const(x, "int32") for v, x in env.items()})))
    )


@pytest.mark.parametrize("name", MASKS)
def test_never_true_implies_the_mask_is_false_everywhere(name):
    mask = MASKS[name]
    never = never_true(mask(I, J, K, BX, S), EXTENTS)
    assert never is not None
    taken = 0
    for k, bx, s in itertools.product(range(-2, 6), range(0, 4), range(-3, 30, 3)):
        if not _value(never, {K: k, BX: bx, S: s}):
            continue
        taken += 1
        assert not any(mask(i, j, k, bx, s) for i in range(8) for j in range(4)), (k, bx, s)
    assert taken, "the condition never held: the test would prove nothing"


def test_the_condition_is_tight_for_flash_attention_blocks():
    """Causal, 128x128 tiles: every block left of the diagonal is unmasked, the diagonal one is not."""
    never = never_true(MASKS["causal"](I, J, K, BX, S), EXTENTS)
    assert _value(never, {K: 3, BX: 2, S: 1000}) and not _value(never, {K: 4, BX: 2, S: 1000})


def test_conditions_the_bounds_cannot_decide():
    assert never_true(tirx.floormod(I, 3) == 0, EXTENTS) is None  # an equality: no interval bound decides it
    load = tirx.BufferLoad(tirx.decl_buffer((8,), "int32", name="x"), [I])
    assert never_true(load > K, EXTENTS) is None  # reads memory


def test_flash_attention_tests_its_causal_mask_once_per_block():
    from kernels.cuda import cuda_source
    from kernels.reference import flash_attention

    f = flash_attention.specialize(B=1, H=2, S=1000, D=64, block_M=128, block_N=128, threads=256, causal=True)
    src = cuda_source(f.with_attr("tile_nb.heavy_first", 0), "sm_90a")  # bx is blockIdx.x (not reversed)
    assert "if ((k < 7) && ((k - ((int)blockIdx.x)) < 0)) {" in src
