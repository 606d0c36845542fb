"""Paged attention with a sliding window and attention-logit soft-capping (Gemma 2/3, and
Mistral or Phi-3 checkpoints whose config sets a window).

The rows and cache are those of :func:`kernels.paged_prefill_attention` (decodes and prompt
chunks mixed). Query row ``r`` of sequence ``s`` sits at position ``p`` (its sequence's last
``q_len`` positions); with ``W = window`` (None: unbounded) and ``c = softcap``::

    score[t] = scale * q[r, h] . K_s[t]
    score[t] = c * tanh(score[t] / c)                        (only with a soft-cap)
    out[r, h] = softmax(score[t] for t in (p - W, p]) @ V_s     (t >= 0)

the window keeping the ``W`` latest positions, the query's own included (Hugging Face's and
llama.cpp's rule).
"""

from __future__ import annotations

import torch

from kernels.decode_attention import CHUNK_BYTES, block_index, gather_rows
from kernels.dispatch import use_triton


def _window_rows(block_tables: torch.Tensor, seq_lens: torch.Tensor, block_size: int,
                 num_kv_heads: int, span: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Cache rows ``[S, KVH, span]`` of each sequence's last ``span`` positions (heads first,
    the caches viewed as ``[rows * KVH, D]``) and their additive mask ``[S, 1, 1, span]``:
    positions before 0 read position 0 (always written) under -inf."""
    device = block_tables.device
    pos = seq_lens.long()[:, None] - span + torch.arange(span, device=device)  # [S, span]
    valid = pos >= 0
    pos = pos.clamp(min=0)
    rows = block_tables.long().gather(1, pos // block_size) * block_size + pos % block_size
    heads = torch.arange(num_kv_heads, device=device)
    mask = torch.zeros(valid.shape, device=device).masked_fill_(~valid, float("-inf"))
    return rows[:, None, :] * num_kv_heads + heads[:, None], mask[:, None, None, :]


def _decode_reference(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                      block_tables: torch.Tensor, seq_lens: torch.Tensor, scale: float,
                      window: int | None, softcap: float | None) -> torch.Tensor:
    """One query row per sequence (a decode step): the sequences batched, each reading only
    its window's rows, in chunks of at most ``CHUNK_BYTES`` of gathered K and V."""
    num_seqs, num_heads, head_dim = q.shape
    num_kv_heads = k_cache.shape[2]
    longest = int(seq_lens.max())
    span = min(window, longest) if window else longest
    rows, mask = _window_rows(block_tables, seq_lens, k_cache.shape[1], num_kv_heads, span)
    qg = q.float().view(num_seqs, num_kv_heads, num_heads // num_kv_heads, head_dim)
    keys, values = k_cache.view(-1, head_dim), v_cache.view(-1, head_dim)
    per_chunk = max(1, CHUNK_BYTES // (num_kv_heads * span * head_dim * 4 * 2))
    out = torch.empty_like(qg)
    for a in range(0, num_seqs, per_chunk):
        b = min(a + per_chunk, num_seqs)
        ids = rows[a:b].reshape(-1)
        k = keys.index_select(0, ids).view(b - a, num_kv_heads, span, head_dim).float()
        v = values.index_select(0, ids).view(b - a, num_kv_heads, span, head_dim).float()
        scores = qg[a:b] @ k.transpose(-1, -2) * scale  # [s, KVH, G, span]
        if softcap:
            scores = torch.tanh(scores / softcap) * softcap
        out[a:b] = (scores + mask[a:b]).softmax(-1) @ v
    return out.view(num_seqs, num_heads, head_dim).to(q.dtype)


def paged_window_attention_reference(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables: torch.Tensor,
    query_start_loc: torch.Tensor, seq_lens: torch.Tensor, scale: float,
    window: int | None = None, softcap: float | None = None,
) -> torch.Tensor:
    """Plain PyTorch in float32: a decode step's sequences batched, prompt chunks one sequence
    at a time; same contract as :func:`paged_window_attention`."""
    if q.shape[0] == seq_lens.shape[0]:  # one row per sequence: its last position
        return _decode_reference(q, k_cache, v_cache, block_tables, seq_lens, scale, window,
                                 softcap)
    starts, lens = query_start_loc.tolist(), seq_lens.tolist()
    group = q.shape[1] // k_cache.shape[2]
    out = torch.empty_like(q)
    for i, total in enumerate(lens):
        a, b = starts[i], starts[i + 1]
        blocks, _, invalid = block_index(block_tables[i:i + 1], seq_lens[i:i + 1], total,
                                         k_cache.shape[1])
        k = gather_rows(k_cache, blocks, invalid, 1)[0, :, :total].float()  # [KVH, L, D]
        v = gather_rows(v_cache, blocks, invalid, 1)[0, :, :total].float()
        k, v = k.repeat_interleave(group, 0), v.repeat_interleave(group, 0)  # [H, L, D]
        scores = q[a:b].float().transpose(0, 1) @ k.transpose(1, 2) * scale  # [H, n, L]
        if softcap:
            scores = torch.tanh(scores / softcap) * softcap
        pos = torch.arange(total - (b - a), total, device=q.device)[:, None]
        keys = torch.arange(total, device=q.device)[None, :]
        allowed = keys <= pos
        if window:
            allowed &= keys > pos - window
        probs = scores.masked_fill(~allowed, float("-inf")).softmax(-1)
        out[a:b] = (probs @ v).transpose(0, 1).to(q.dtype)
    return out


def paged_window_attention(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables: torch.Tensor,
    query_start_loc: torch.Tensor, seq_lens: torch.Tensor, scale: float,
    window: int | None = None, softcap: float | None = None,
) -> torch.Tensor:
    """Causal attention of a flat varlen batch over paged caches, each row limited to the
    ``window`` latest positions and its scores soft-capped at ``softcap`` (module doc).

    Args: as :func:`kernels.paged_prefill_attention` (``q`` ``[T, H, D]``, caches ``[blocks,
    block_size, KVH, D]``, ``block_tables`` ``[S, max_blocks]`` int32, ``query_start_loc``
    ``[S + 1]`` int32, ``seq_lens`` ``[S]`` int32), plus ``window`` (positions, None: all)
    and ``softcap`` (None: none). Returns ``[T, H, D]`` in ``q.dtype``.
    """
    if q.shape[1] % k_cache.shape[2]:
        raise ValueError(f"{q.shape[1]} query heads do not group over {k_cache.shape[2]} kv heads")
    if window is not None and window <= 0:
        raise ValueError(f"sliding window {window} must be positive")
    if use_triton(q):
        from kernels._triton.window_attention import paged_window_attention_triton

        return paged_window_attention_triton(q, k_cache, v_cache, block_tables,
                                             query_start_loc, seq_lens, scale, window, softcap)
    return paged_window_attention_reference(q, k_cache, v_cache, block_tables, query_start_loc,
                                            seq_lens, scale, window, softcap)
