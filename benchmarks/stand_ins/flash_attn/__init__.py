"""A torch stand-in for the two functions of Dao-AILab's flash-attn 2 that tilelang's examples call as their
reference or latency yardstick, for the conformance runner only: flash-attn must be built with CUDA and the
GPU machine has no network, so without this those examples stop at `import flash_attn`. It is put on a
case's path by the runner's `--deps` (docs/tilelang.md, "The references' own packages"); it is never
installed and never on tile_nb's path.

It computes what flash-attn 2.8's documentation says the functions return, in float32 with an explicit
softmax, one sequence at a time: softmax(scale * Q K^T) V, GQA heads sharing K / V heads by `h // (heads_q /
heads_kv)`, the causal mask aligned to the bottom right (query i of Lq sees key j when j <= i + Lk - Lq), and
a row that sees no key gives zeros. An argument it does not implement raises rather than being ignored. It is
checked against torch's own attention in tests/test_flash_attn_stand_in.py. It is not fast: the examples that
time it time a torch loop, not flash-attn.
"""
from __future__ import annotations

import sys

import torch

__version__ = "2.8.3+tile_nb.stand_in"

print("flash_attn: tile_nb's torch stand-in (benchmarks/stand_ins/flash_attn), not Dao-AILab's flash-attn",
      file=sys.stderr)


def _refuse_unimplemented(function: str, **given) -> None:
    """Raise for a feature the stand-in does not compute, naming it (the defaults are flash-attn's)."""
    defaults = {"dropout_p": 0.0, "window_size": (-1, -1), "softcap": 0.0, "alibi_slopes": None,
                "return_attn_probs": False, "k": None, "v": None, "rotary_cos": None, "rotary_sin": None,
                "cache_batch_idx": None, "cache_leftpad": None, "return_softmax_lse": False}
    for name, value in given.items():
        default = defaults[name]
        if (value is not None) if default is None else (value != default):
            raise NotImplementedError(f"{function}: tile_nb's flash_attn stand-in does not implement "
                                      f"{name}={value!r} (only {default!r})")


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, causal: bool) -> torch.Tensor:
    """One sequence: q [Lq, Hq, D], k [Lk, Hk, D], v [Lk, Hk, Dv] -> [Lq, Hq, Dv] in q's dtype."""
    heads_q, heads_kv = q.shape[1], k.shape[1]
    if heads_q % heads_kv:
        raise ValueError(f"flash_attn stand-in: {heads_q} query heads are not a multiple of "
                         f"{heads_kv} key heads")
    group = heads_q // heads_kv
    qf = q.float().transpose(0, 1)                                      # [Hq, Lq, D]
    kf = k.float().transpose(0, 1).repeat_interleave(group, dim=0)      # [Hq, Lk, D]
    vf = v.float().transpose(0, 1).repeat_interleave(group, dim=0)
    scores = torch.matmul(qf, kf.transpose(1, 2)) * scale               # [Hq, Lq, Lk]
    lq, lk = q.shape[0], k.shape[0]
    if causal:
        rows = torch.arange(lq, device=q.device)[:, None]
        cols = torch.arange(lk, device=q.device)[None, :]
        scores = scores.masked_fill(cols > rows + (lk - lq), float("-inf"))
    probs = torch.softmax(scores, dim=-1).nan_to_num(0.0)               # a row that sees no key: zeros
    return torch.matmul(probs, vf).transpose(0, 1).to(q.dtype)


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                           softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                           alibi_slopes=None, deterministic=False, return_attn_probs=False, block_table=None):
    """q [total_q, Hq, D], k / v [total_k, Hk, D]; sequence b is rows cu_seqlens[b]:cu_seqlens[b + 1]."""
    _refuse_unimplemented("flash_attn_varlen_func", dropout_p=dropout_p, window_size=tuple(window_size),
                          softcap=softcap, alibi_slopes=alibi_slopes, return_attn_probs=return_attn_probs)
    if block_table is not None:
        raise NotImplementedError("flash_attn_varlen_func: tile_nb's flash_attn stand-in does not implement "
                                  "block_table")
    scale = softmax_scale if softmax_scale is not None else q.shape[-1] ** -0.5
    out = torch.zeros(q.shape[:-1] + v.shape[-1:], dtype=q.dtype, device=q.device)
    starts_q, starts_k = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
    for b in range(len(starts_q) - 1):
        q0, q1, k0, k1 = starts_q[b], starts_q[b + 1], starts_k[b], starts_k[b + 1]
        if q1 > q0:
            out[q0:q1] = _attend(q[q0:q1], k[k0:k1], v[k0:k1], scale, causal)
    return out


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, rotary_cos=None, rotary_sin=None,
                            cache_seqlens=None, cache_batch_idx=None, cache_leftpad=None, block_table=None,
                            softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                            rotary_interleaved=True, alibi_slopes=None, num_splits=0,
                            return_softmax_lse=False):
    """q [B, Lq, Hq, D]; k_cache / v_cache [B, S, Hk, D], or pages [num_pages, page_size, Hk, D] that
    block_table [B, pages_per_sequence] names; sequence b sees its first cache_seqlens[b] keys (all S
    without)."""
    _refuse_unimplemented("flash_attn_with_kvcache", k=k, v=v, rotary_cos=rotary_cos, rotary_sin=rotary_sin,
                          cache_batch_idx=cache_batch_idx, cache_leftpad=cache_leftpad,
                          window_size=tuple(window_size), softcap=softcap, alibi_slopes=alibi_slopes,
                          return_softmax_lse=return_softmax_lse)
    batch = q.shape[0]
    scale = softmax_scale if softmax_scale is not None else q.shape[-1] ** -0.5
    if block_table is None:
        capacity = k_cache.shape[1]
    else:
        capacity = block_table.shape[1] * k_cache.shape[1]
    if cache_seqlens is None:
        lengths = [capacity] * batch
    elif isinstance(cache_seqlens, int):
        lengths = [cache_seqlens] * batch
    else:
        lengths = cache_seqlens.tolist()
    out = torch.empty(q.shape[:-1] + v_cache.shape[-1:], dtype=q.dtype, device=q.device)
    for b in range(batch):
        if block_table is None:
            keys, values = k_cache[b, :lengths[b]], v_cache[b, :lengths[b]]
        else:
            page_size = k_cache.shape[1]
            pages = block_table[b, :(lengths[b] + page_size - 1) // page_size].long()   # the pages it reads
            keys = k_cache[pages].flatten(0, 1)[:lengths[b]]
            values = v_cache[pages].flatten(0, 1)[:lengths[b]]
        out[b] = _attend(q[b], keys, values, scale, causal)
    return out
