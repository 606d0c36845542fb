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

# block_index and gather_rows: the prefill reference's per-sequence gather (whole blocks)


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


# gathered float32 K + V per SDPA call: past this, a chunk of sequences at a time keeps the
# gathered rows in cache between gather and attention (bench/cpu_kernels.py --seqs 64 --ctx 2048:
# 194 -> 55 ms per call); smaller chunks cost more calls than they save at 16 x 256
CHUNK_BYTES = 8 << 20


def decode_rows(
    block_tables: torch.Tensor, seq_lens: torch.Tensor, max_len: int, block_size: int,
    num_kv_heads: int, head_dim: int,
) -> tuple[torch.Tensor, torch.Tensor, tuple[tuple[int, int], ...]]:
    """The cache rows to read for ``max_len`` positions of every sequence, their mask, and the
    chunks of sequences to process together.

    Returns ``(rows, mask, chunks)``: ``rows`` ``[num_seqs * KVH * P]`` int64 row ids of the
    caches viewed as ``[num_blocks * block_size * KVH, head_dim]``, heads first (sequence, KV
    head, position), ``P = ceil(max_len / block_size) * block_size``; a position at or past a
    sequence's length reads the sequence's first row, which always holds a written token, so
    stale or unwritten rows - NaN or inf included - are never read and junk block-table entries
    never used. ``mask`` ``[num_seqs, 1, 1, P]`` float32 is 0 below each length and -inf past it
    (additive). ``chunks`` are ``(first, end)`` sequence ranges of at most ``CHUNK_BYTES`` of
    gathered float32 K and V each (one sequence at least).
    """
    width = -(-max_len // block_size)
    lens = seq_lens.to(device=block_tables.device, dtype=torch.int64)
    offsets = torch.arange(block_size, device=block_tables.device)
    rows = (block_tables[:, :width].to(torch.int64)[:, :, None] * block_size + offsets)
    rows = rows.view(lens.shape[0], width * block_size)
    valid = torch.arange(rows.shape[1], device=rows.device)[None, :] < lens[:, None]
    rows = torch.where(valid, rows, rows[:, :1])
    heads = torch.arange(num_kv_heads, device=rows.device)
    rows = rows[:, None, :] * num_kv_heads + heads[:, None]  # [S, KVH, P]
    mask = torch.zeros(valid.shape, device=rows.device).masked_fill_(~valid, float("-inf"))
    per_chunk = max(1, CHUNK_BYTES // (rows[0].numel() * head_dim * 4 * 2))  # float32 K and V
    num_seqs = lens.shape[0]
    chunks = tuple((i, min(i + per_chunk, num_seqs)) for i in range(0, num_seqs, per_chunk))
    return rows.view(-1), mask[:, None, None, :], chunks


def paged_decode_attention_reference(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    index: tuple[torch.Tensor, torch.Tensor, tuple[tuple[int, int], ...]] | None = None,
) -> torch.Tensor:
    """Plain PyTorch paged decode; same contract as :func:`paged_decode_attention`.

    The query heads of a KV head are its query rows: ``q`` ``[S, KVH * G, D]`` is viewed as
    ``[S, KVH, G, D]`` against K/V gathered heads first ``[S, KVH, P, D]`` (no transpose, no
    head repeat), one SDPA call with the step's additive mask per chunk of sequences.
    """
    num_seqs, num_heads, head_dim = q.shape
    num_kv_heads = k_cache.shape[2]
    if index is None:
        index = decode_rows(block_tables, seq_lens, int(seq_lens.max()), k_cache.shape[1],
                            num_kv_heads, head_dim)
    rows, mask, chunks = index
    # CPU half-precision matmuls are slow and lossy: compute in float32 there
    work = q.dtype if q.is_cuda else torch.float32
    qg = q.view(num_seqs, num_kv_heads, num_heads // num_kv_heads, head_dim)
    # no-op .to() calls still cost ~2 us each: convert only what differs (float32 needs none)
    if qg.dtype != work:
        qg = qg.to(work)
    if mask.dtype != work:
        mask = mask.to(work)
    keys, values = k_cache.view(-1, head_dim), v_cache.view(-1, head_dim)

    def attend(qc: torch.Tensor, ids: torch.Tensor, maskc: torch.Tensor) -> torch.Tensor:
        k = keys.index_select(0, ids).view(qc.shape[0], num_kv_heads, -1, head_dim)
        v = values.index_select(0, ids).view(qc.shape[0], num_kv_heads, -1, head_dim)
        if k.dtype != work:
            k, v = k.to(work), v.to(work)
        return F.scaled_dot_product_attention(qc, k, v, attn_mask=maskc, scale=scale)

    if len(chunks) == 1:
        out = attend(qg, rows, mask)
    else:
        per_seq = rows.shape[0] // num_seqs
        out = torch.empty_like(qg)
        for first, end in chunks:
            out[first:end] = attend(qg[first:end], rows[first * per_seq : end * per_seq],
                                    mask[first:end])
    out = out.reshape(num_seqs, num_heads, head_dim)
    return out if out.dtype == q.dtype else out.to(q.dtype)


def paged_decode_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    index: tuple[torch.Tensor, torch.Tensor, tuple[tuple[int, int], ...]] | None = None,
) -> torch.Tensor:
    """Attention of one query token per sequence over its paged KV cache.

    Args:
        q: ``[num_seqs, num_heads, head_dim]``, the query at each sequence's last position.
        k_cache, v_cache: ``[num_blocks, block_size, num_kv_heads, head_dim]``.
        block_tables: ``[num_seqs, max_blocks]`` int32; unused entries arbitrary.
        seq_lens: ``[num_seqs]`` int32, cached tokens including the current one (>= 1).
        scale: softmax scale, usually ``head_dim ** -0.5``.
        index: ``decode_rows(block_tables, seq_lens, max(seq_lens), block_size, num_kv_heads,
            head_dim)`` when the
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
