"""The conformance runner's flash_attn stand-in (benchmarks/stand_ins/flash_attn) against torch's own
attention, an implementation it does not share: F.scaled_dot_product_attention in float64, with torch's
lower-right causal bias for flash-attn's bottom-right alignment, GQA by enable_gqa, and the varlen / paged
layouts unpacked here."""
import importlib.util
import pathlib

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention.bias import causal_lower_right

STAND_IN = pathlib.Path(__file__).parent.parent / "benchmarks" / "stand_ins" / "flash_attn" / "__init__.py"


@pytest.fixture(scope="module")
def flash_attn():
    spec = importlib.util.spec_from_file_location("flash_attn_stand_in", STAND_IN)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def sdpa(q, k, v, causal, scale=None):
    """torch's attention for one sequence, [L, H, D] layout, float64; a row that sees no key gives zeros."""
    q, k, v = (t.double().transpose(0, 1)[None] for t in (q, k, v))
    mask = causal_lower_right(q.shape[2], k.shape[2]) if causal else None
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale,
                                         enable_gqa=q.shape[1] != k.shape[1])
    return out[0].transpose(0, 1).nan_to_num(0.0)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("heads_q, heads_kv", [(4, 4), (6, 2)])
def test_varlen_matches_torch_per_sequence(flash_attn, causal, heads_q, heads_kv):
    torch.manual_seed(0)
    # equal lengths, fewer queries than keys, a one-row sequence
    lengths_q, lengths_k = [5, 1, 17, 9], [5, 3, 23, 9]
    cu_q = torch.tensor([0] + lengths_q).cumsum(0).int()
    cu_k = torch.tensor([0] + lengths_k).cumsum(0).int()
    q = torch.randn(int(cu_q[-1]), heads_q, 16, dtype=torch.float16)
    k = torch.randn(int(cu_k[-1]), heads_kv, 16, dtype=torch.float16)
    v = torch.randn(int(cu_k[-1]), heads_kv, 8, dtype=torch.float16)
    out = flash_attn.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max(lengths_q), max(lengths_k), 0.0,
                                            causal=causal)
    assert out.shape == (q.shape[0], heads_q, 8) and out.dtype == torch.float16
    for b in range(len(lengths_q)):
        rows, keys = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
        want = sdpa(q[rows], k[keys], v[keys], causal)
        torch.testing.assert_close(out[rows].double(), want, atol=2e-3, rtol=2e-3)


def test_causal_is_aligned_to_the_bottom_right(flash_attn):
    """Two queries over five keys: the last sees all five, the first four (top-left would give 1 and 2)."""
    q = torch.randn(2, 1, 4, dtype=torch.float32)
    k = torch.randn(5, 1, 4, dtype=torch.float32)
    v = torch.eye(5, dtype=torch.float32)[:, None, :]        # value j is the one-hot e_j: out = the weights
    cu_q, cu_k = torch.tensor([0, 2]).int(), torch.tensor([0, 5]).int()
    weights = flash_attn.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 2, 5, causal=True)[:, 0]
    assert (weights[0, 4] == 0) and (weights[0, :4] > 0).all() and (weights[1] > 0).all()


def test_a_query_that_sees_no_key_gives_zeros(flash_attn):
    q, k, v = torch.randn(3, 1, 4), torch.randn(1, 1, 4), torch.randn(1, 1, 4)
    cu_q, cu_k = torch.tensor([0, 3]).int(), torch.tensor([0, 1]).int()
    out = flash_attn.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 3, 1, causal=True)
    assert torch.equal(out[:2], torch.zeros(2, 1, 4)) and out[2].abs().sum() > 0


@pytest.mark.parametrize("lengths", [[7, 1, 32], 32])
def test_kvcache_reads_each_sequence_to_its_length(flash_attn, lengths):
    torch.manual_seed(1)
    q = torch.randn(3, 1, 8, 16, dtype=torch.float16)
    k_cache = torch.randn(3, 32, 2, 16, dtype=torch.float16)
    v_cache = torch.randn(3, 32, 2, 16, dtype=torch.float16)
    seqlens = torch.tensor(lengths).int() if isinstance(lengths, list) else lengths
    out = flash_attn.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=seqlens, softmax_scale=0.3)
    for b, n in enumerate(lengths if isinstance(lengths, list) else [lengths] * 3):
        want = sdpa(q[b], k_cache[b, :n], v_cache[b, :n], causal=False, scale=0.3)
        torch.testing.assert_close(out[b].double(), want, atol=2e-3, rtol=2e-3)


def test_paged_kvcache_follows_the_block_table(flash_attn):
    torch.manual_seed(2)
    page, pages = 4, 9
    k_pages = torch.randn(pages, page, 2, 16)
    v_pages = torch.randn(pages, page, 2, 16)
    block_table = torch.tensor([[7, 2, 5, 0], [3, 8, -1, -1]]).int()   # unused slots hold -1
    seqlens = torch.tensor([13, 6]).int()
    q = torch.randn(2, 1, 4, 16)
    out = flash_attn.flash_attn_with_kvcache(q, k_pages, v_pages, cache_seqlens=seqlens,
                                             block_table=block_table)
    for b, n in enumerate(seqlens.tolist()):
        used = block_table[b, :(n + page - 1) // page].long()
        keys, values = k_pages[used].flatten(0, 1)[:n], v_pages[used].flatten(0, 1)[:n]
        want = sdpa(q[b], keys, values, causal=False)
        torch.testing.assert_close(out[b].double(), want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("argument", [{"dropout_p": 0.1}, {"window_size": (8, 0)},
                                      {"alibi_slopes": torch.ones(1)}])
def test_an_unimplemented_argument_is_refused_by_name(flash_attn, argument):
    q = torch.randn(3, 1, 4)
    cu = torch.tensor([0, 3]).int()
    with pytest.raises(NotImplementedError, match=next(iter(argument))):
        flash_attn.flash_attn_varlen_func(q, q, q, cu, cu, 3, 3, **argument)
