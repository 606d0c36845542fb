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


def paged_decode_attention_reference(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    index: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
) -> torch.Tensor:
    """Plain PyTorch paged decode; same contract as :func:`paged_decode_attention`."""
    if index is None:
        index = block_index(block_tables, seq_lens, int(seq_lens.max()), k_cache.shape[1])
    blocks, valid, invalid = index
    # CPU half-precision matmuls are slow and lossy: compute in float32 there
    work = q.dtype if q.is_cuda else torch.float32
    k = gather_rows(k_cache, blocks, invalid, q.shape[0]).to(work)  # [S, KVH, P, D]
    v = gather_rows(v_cache, blocks, invalid, q.shape[0]).to(work)
    qs = q[:, :, None, :].to(work)  # [S, H, 1, D]: the heads of a KV group share it (enable_gqa)
    out = F.scaled_dot_product_attention(qs, k, v, attn_mask=valid[:, None, None, :],
                                         scale=scale, enable_gqa=True)
    return out[:, :, 0, :].to(q.dtype)


def paged_decode_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    index: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
) -> torch.Tensor:
    """Attention of one query token per sequence over its paged KV cache.

    Args:
        q: ``[num_seqs, num_heads, head_dim]``, the query at each sequence's last position.
        k_cache, v_cache: ``[num_blocks, block_size, num_kv_heads, head_dim]``.
        block_tables: ``[num_seqs, max_blocks]`` int32; unused entries arbitrary.
        seq_lens: ``[num_seqs]`` int32, cached tokens including the current one (>= 1).
        scale: softmax scale, usually ``head_dim ** -0.5``.
        index: ``block_index(block_tables, seq_lens, max(seq_lens), block_size)`` when the
            caller has it (it is the same for every layer of a step); the reference path
            computes it otherwise, the Triton kernel does not use it.

    Returns:
        ``[num_seqs, num_heads, head_dim]`` in ``q.dtype``.
    """
    if q.shape[1] % k_cache.shape[2]:
        raise ValueError(f"{q.shape[1]} query heads do not group over {k_cache.shape[2]} kv heads")
    if use_triton(q):
        from kernels._triton.decode_attention import paged_decode_attention_triton

        return paged_decode_attention_triton(q, k_cache, v_cache, block_tables, seq_lens, scale)
    return paged_decode_attention_reference(q, k_cache, v_cache, block_tables, seq_lens, scale,
                                            index)
