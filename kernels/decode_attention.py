"""Paged decode attention: one query token per sequence against its paged KV cache.

For sequence ``s`` with ``L = seq_lens[s]`` cached tokens (the current one included) and query
head ``h`` reading KV head ``g = h // (num_heads // num_kv_heads)`` (grouped-query attention)::

    K[t] = k_cache[block_tables[s, t // B], t % B, g]            t = 0 .. L-1
    out[s, h] = softmax(scale * K @ q[s, h]) @ V

Block-table entries past ``ceil(L / B)`` are never read.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from kernels.dispatch import use_triton


def block_index(
    block_tables: torch.Tensor, seq_lens: torch.Tensor, max_len: int, block_size: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Which blocks to read for ``max_len`` positions of every sequence.

    Returns ``(blocks, valid, invalid)``: ``blocks`` ``[num_seqs * W]`` int64 block ids
    (``W = ceil(max_len / block_size)``; table entries past a sequence's last block are replaced
    by its first block, which always exists, so junk entries are never read), ``valid``
    ``[num_seqs, W * block_size]`` marks positions below each length, ``invalid`` the flat row
    ids (``seq * W * block_size + position``) of the others.
    """
    width = -(-max_len // block_size)
    lens = seq_lens.to(device=block_tables.device, dtype=torch.int64)
    tables = block_tables[:, :width].to(torch.int64)
    starts = torch.arange(width, device=tables.device) * block_size
    tables = torch.where(starts[None, :] < lens[:, None], tables, tables[:, :1])
    valid = torch.arange(width * block_size, device=tables.device)[None, :] < lens[:, None]
    return tables.reshape(-1), valid, (~valid).view(-1).nonzero().squeeze(1)


_last_index: list = [None]  # (block_tables, seq_lens, key, result) of the latest call


def cached_block_index(
    block_tables: torch.Tensor, seq_lens: torch.Tensor, max_len: int, block_size: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``block_index`` computed once for the same tensors: every layer of a step passes the
    same block tables and lengths. The entry holds strong references to both tensors, so
    their ids cannot be reused while it lives, and checks their version counters against
    in-place changes (inference-mode tensors have none: those are not cached)."""
    if block_tables.is_inference() or seq_lens.is_inference():
        return block_index(block_tables, seq_lens, max_len, block_size)
    key = (block_tables._version, seq_lens._version, max_len, block_size)
    hit = _last_index[0]
    if hit is not None and hit[0] is block_tables and hit[1] is seq_lens and hit[2] == key:
        return hit[3]
    result = block_index(block_tables, seq_lens, max_len, block_size)
    _last_index[0] = (block_tables, seq_lens, key, result)
    return result


def gather_rows(cache: torch.Tensor, blocks: torch.Tensor, invalid: torch.Tensor,
                num_seqs: int) -> torch.Tensor:
    """The cache rows of ``block_index``'s blocks as a heads-first view ``[num_seqs,
    num_kv_heads, P, D]``; rows at ``invalid`` positions are zeroed (they may hold stale or
    unwritten values, and a masked softmax still multiplies them by zero)."""
    num_blocks, block_size, num_kv_heads, head_dim = cache.shape
    # whole blocks are contiguous runs of block_size * KVH * D elements: one cheap index_select
    rows = cache.view(num_blocks, -1).index_select(0, blocks)
    rows = rows.view(-1, num_kv_heads * head_dim)
    if invalid.numel():
        rows.index_fill_(0, invalid, 0.0)
    return rows.view(num_seqs, -1, num_kv_heads, head_dim).transpose(1, 2)


def gather_kv(
    cache: torch.Tensor, block_tables: torch.Tensor, seq_lens: torch.Tensor, max_len: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(kv, valid)``: every sequence's cache rows ``[num_seqs, num_kv_heads, P, D]`` (``P`` =
    ``max_len`` rounded up to whole blocks, invalid positions zero) and the ``[num_seqs, P]``
    mask of positions below each length."""
    blocks, valid, invalid = block_index(block_tables, seq_lens, max_len, cache.shape[1])
    return gather_rows(cache, blocks, invalid, block_tables.shape[0]), valid


def paged_decode_attention_reference(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """Plain PyTorch paged decode; same contract as :func:`paged_decode_attention`."""
    max_len = int(seq_lens.max())
    blocks, valid, invalid = cached_block_index(block_tables, seq_lens, max_len,
                                                k_cache.shape[1])
    k = gather_rows(k_cache, blocks, invalid, q.shape[0])  # [S, KVH, P, D]
    v = gather_rows(v_cache, blocks, invalid, q.shape[0])
    qs = q[:, :, None, :]  # [S, H, 1, D]: the heads of a KV group share its K/V (enable_gqa)
    if q.dtype != torch.float32 and not q.is_cuda:  # CPU half matmuls are slow and lossy
        qs, k, v = qs.float(), k.float(), v.float()
    out = F.scaled_dot_product_attention(
        qs, k.to(qs.dtype), v.to(qs.dtype), attn_mask=valid[:, None, None, :], scale=scale,
        enable_gqa=True)
    return out[:, :, 0, :].to(q.dtype)


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
