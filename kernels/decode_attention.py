"""Paged decode attention: one query token per sequence against its paged KV cache.

For sequence ``s`` with ``L = seq_lens[s]`` cached tokens (the current one included) and query
head ``h`` reading KV head ``g = h // (num_heads // num_kv_heads)`` (grouped-query attention)::

    K[t] = k_cache[block_tables[s, t // B], t % B, g]            t = 0 .. L-1
    out[s, h] = softmax(scale * K @ q[s, h]) @ V

Block-table entries past ``ceil(L / B)`` are never read.
"""

from __future__ import annotations

import torch

from kernels.dispatch import use_triton


def _slots(
    block_tables: torch.Tensor, seq_lens: torch.Tensor, max_len: int, block_size: int
) -> torch.Tensor:
    """``[num_seqs, max_len]`` int64 cache slots; positions at or past a sequence's length map
    to its position 0 (always written), so no unwritten slot or unused table entry is read."""
    pos = torch.arange(max_len, device=block_tables.device)
    pos = torch.where(pos[None, :] < seq_lens[:, None].to(pos.device), pos[None, :], 0)
    blocks = block_tables.long().gather(1, pos // block_size)
    return blocks * block_size + pos % block_size


def gather_kv(
    cache: torch.Tensor, block_tables: torch.Tensor, seq_lens: torch.Tensor, max_len: int
) -> torch.Tensor:
    """Each sequence's first ``max_len`` cache rows, heads first: ``[num_seqs, num_kv_heads,
    max_len, D]``, contiguous. Rows past a sequence's length repeat its row 0; mask them."""
    _, block_size, num_kv_heads, head_dim = cache.shape
    slots = _slots(block_tables, seq_lens, max_len, block_size)
    # one index_select over [slot * num_kv_heads + head] rows builds the heads-first layout
    # directly (much cheaper on CPU than advanced indexing plus a transpose copy)
    heads = torch.arange(num_kv_heads, device=slots.device)
    rows = slots[:, None, :] * num_kv_heads + heads[None, :, None]  # [S, KVH, L]
    flat = cache.view(-1, head_dim).index_select(0, rows.view(-1))
    return flat.view(slots.shape[0], num_kv_heads, max_len, head_dim)


def paged_decode_attention_reference(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """Plain PyTorch paged decode; same contract as :func:`paged_decode_attention`."""
    num_seqs, num_heads, head_dim = q.shape
    num_kv_heads = k_cache.shape[2]
    max_len = int(seq_lens.max())
    k = gather_kv(k_cache, block_tables, seq_lens, max_len)  # [S, KVH, L, D]
    v = gather_kv(v_cache, block_tables, seq_lens, max_len)
    # the heads of one KV group act as that group's "query rows": no K/V repeat needed
    qg = q.reshape(num_seqs, num_kv_heads, num_heads // num_kv_heads, head_dim)
    if q.dtype != torch.float32 and not q.is_cuda:  # CPU half matmuls are slow and lossy
        qg, k, v = qg.float(), k.float(), v.float()
    scores = torch.matmul(qg, k.transpose(-1, -2)).mul_(scale)  # [S, KVH, G, L]
    if int(seq_lens.min()) < max_len:
        pad = torch.arange(max_len, device=q.device)[None, :] >= seq_lens[:, None].to(q.device)
        scores.masked_fill_(pad[:, None, None, :], float("-inf"))
    out = torch.matmul(torch.softmax(scores, dim=-1), v)  # [S, KVH, G, D]
    return out.reshape(num_seqs, num_heads, head_dim).to(q.dtype)


def paged_decode_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """Attention of one query token per sequence over its paged KV cache.

    Args:
        q: ``[num_seqs, num_heads, head_dim]``, the query at each sequence's last position.
        k_cache, v_cache: ``[num_blocks, block_size, num_kv_heads, head_dim]``.
        block_tables: ``[num_seqs, max_blocks]`` int32; unused entries arbitrary.
        seq_lens: ``[num_seqs]`` int32, cached tokens including the current one (>= 1).
        scale: softmax scale, usually ``head_dim ** -0.5``.

    Returns:
        ``[num_seqs, num_heads, head_dim]`` in ``q.dtype``.
    """
    if q.shape[1] % k_cache.shape[2]:
        raise ValueError(f"{q.shape[1]} query heads do not group over {k_cache.shape[2]} kv heads")
    if use_triton(q):
        from kernels._triton.decode_attention import paged_decode_attention_triton

        return paged_decode_attention_triton(q, k_cache, v_cache, block_tables, seq_lens, scale)
    return paged_decode_attention_reference(q, k_cache, v_cache, block_tables, seq_lens, scale)
