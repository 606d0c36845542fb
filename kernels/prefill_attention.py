"""Paged prefill attention over a variable-length batch of query chunks (chunked prefill).

Sequence ``i`` owns query rows ``query_start_loc[i] : query_start_loc[i + 1]`` (``q_len_i``
rows), its *last* ``q_len_i`` positions; ``L_i = seq_lens[i]`` counts its cached tokens including
this chunk (already written by ``write_kv``). Query row ``j`` sits at position
``p = L_i - q_len_i + j`` and attends causally to cache positions ``0 .. p``::

    out[row, h] = softmax(scale * K_i[:p+1] @ q[row, h]) @ V_i[:p+1]      (KV head h // group)

Decodes (``q_len_i == 1``) and prefill chunks may be mixed in one call.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from kernels.decode_attention import block_index, gather_rows, paged_decode_attention_reference
from kernels.dispatch import use_triton


def _chunk_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float
) -> torch.Tensor:
    """One sequence: q ``[n, H, D]`` (its last n positions), k/v ``[KVH, L, D]``.

    SDPA gets 4-D tensors (a batch of one): on a CPU only those reach its fused (flash)
    kernel; 3-D ones took its unfused path, 6-8x slower for a prompt of 512-2,000 tokens
    (``bench/model_forward.py --prefill``)."""
    n, total = q.shape[0], k.shape[1]
    qt, k, v = q.transpose(0, 1)[None], k[None], v[None]  # [1, H, n, D], [1, KVH, L, D]
    if n == total:
        out = F.scaled_dot_product_attention(qt, k, v, is_causal=True, scale=scale,
                                             enable_gqa=True)
        return out[0].transpose(0, 1)
    rows = torch.arange(total - n, total, device=q.device)[:, None]
    mask = torch.arange(total, device=q.device)[None, :] <= rows  # [n, L]
    out = F.scaled_dot_product_attention(qt, k, v, attn_mask=mask, scale=scale, enable_gqa=True)
    return out[0].transpose(0, 1)


def paged_prefill_attention_reference(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """Plain PyTorch paged prefill; same contract as :func:`paged_prefill_attention`.

    Sequences with one query row go through the batched decode reference in one call; the
    others loop over sequences (not tokens), each one SDPA call on its gathered cache.
    """
    starts = query_start_loc.tolist()
    lens = seq_lens.tolist()
    q_lens = [b - a for a, b in zip(starts[:-1], starts[1:])]
    out = torch.empty_like(q)
    singles = [i for i, n in enumerate(q_lens) if n == 1]
    if singles:
        idx = torch.tensor(singles, device=q.device)
        rows = query_start_loc[:-1].to(q.device).long()[idx]
        out[rows] = paged_decode_attention_reference(
            q[rows], k_cache, v_cache, block_tables[idx], seq_lens[idx], scale
        )
    if len(singles) == len(q_lens):
        return out
    work = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) and not q.is_cuda else None
    for i, n in enumerate(q_lens):
        if n <= 1:
            continue
        blocks, _, invalid = block_index(block_tables[i : i + 1], seq_lens[i : i + 1], lens[i],
                                         k_cache.shape[1])
        k = gather_rows(k_cache, blocks, invalid, 1)[0, :, : lens[i]]  # [KVH, L, D]
        v = gather_rows(v_cache, blocks, invalid, 1)[0, :, : lens[i]]
        qi = q[starts[i] : starts[i + 1]]
        if work is not None:
            qi, k, v = qi.to(work), k.to(work), v.to(work)
        elif k.dtype != qi.dtype:  # a float16 cache under float32 queries (the CPU default)
            k, v = k.to(qi.dtype), v.to(qi.dtype)
        out[starts[i] : starts[i + 1]] = _chunk_attention(qi, k, v, scale).to(q.dtype)
    return out


def paged_prefill_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """Causal attention of a flat varlen batch of query chunks over their paged KV caches.

    Args:
        q: ``[num_tokens, num_heads, head_dim]``; sequence i owns rows
            ``query_start_loc[i]:query_start_loc[i+1]``, its last positions.
        k_cache, v_cache: ``[num_blocks, block_size, num_kv_heads, head_dim]``.
        block_tables: ``[num_seqs, max_blocks]`` int32; unused entries arbitrary.
        query_start_loc: ``[num_seqs + 1]`` int32, row offsets (``[0] == 0``).
        seq_lens: ``[num_seqs]`` int32, cached tokens including this chunk.
        scale: softmax scale.

    Returns:
        ``[num_tokens, num_heads, head_dim]`` in ``q.dtype``.
    """
    if q.shape[1] % k_cache.shape[2]:
        raise ValueError(f"{q.shape[1]} query heads do not group over {k_cache.shape[2]} kv heads")
    if use_triton(q):
        from kernels._triton.prefill_attention import paged_prefill_attention_triton

        return paged_prefill_attention_triton(
            q, k_cache, v_cache, block_tables, query_start_loc, seq_lens, scale
        )
    return paged_prefill_attention_reference(
        q, k_cache, v_cache, block_tables, query_start_loc, seq_lens, scale
    )
