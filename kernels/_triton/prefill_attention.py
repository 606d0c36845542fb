"""Triton paged prefill attention over a varlen batch (flash-attention style); math in
:mod:`kernels.prefill_attention`.

One program per (sequence, block of ``BLOCK_M`` query rows, query head). It walks the
sequence's cache from position 0 to the block's last query position in tiles of ``BLOCK_N``
tokens addressed through the block table, with a causal mask and an online softmax. Programs
whose query block lies past their sequence's chunk exit at once (decodes in a mixed batch use
only block 0).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels._triton.common import (
    LOG2E,
    check_rows,
    check_same_device,
    dot_precision,
    next_pow2,
)


@triton.jit
def _paged_prefill_kernel(
    q_ptr, k_cache_ptr, v_cache_ptr, block_tables_ptr, query_start_loc_ptr, seq_lens_ptr,
    out_ptr, scale_log2,
    q_tok_stride, q_head_stride, cache_block_stride, cache_tok_stride, cache_head_stride,
    bt_stride, out_tok_stride, out_head_stride,
    group, head_dim,
    PAGE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):
    """Row ``j`` of sequence ``s`` sits at ``p = seq_len - q_len + j`` and gets
    ``softmax(scale * K[:p+1] q_j) V[:p+1]``; scores in log2 units (``exp2``)."""
    seq = tl.program_id(0).to(tl.int64)
    m_block = tl.program_id(1)
    head = tl.program_id(2)
    q_start = tl.load(query_start_loc_ptr + seq)
    q_len = tl.load(query_start_loc_ptr + seq + 1) - q_start
    if m_block * BLOCK_M >= q_len:
        return
    seq_len = tl.load(seq_lens_ptr + seq)
    prefix = seq_len - q_len
    kv_head = head // group
    offs_m = m_block * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    m_mask = offs_m < q_len
    d_mask = offs_d < head_dim
    q_rows = (q_start + offs_m).to(tl.int64)
    q_off = q_rows[:, None] * q_tok_stride + head * q_head_stride + offs_d[None, :]
    q = tl.load(q_ptr + q_off, mask=m_mask[:, None] & d_mask[None, :], other=0.0)
    pos_q = prefix + offs_m  # absolute positions of the rows
    end = tl.minimum(seq_len, prefix + (m_block + 1) * BLOCK_M)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    for tile in range(0, end, BLOCK_N):
        tok = tile + offs_n
        t_mask = tok < end
        block = tl.load(block_tables_ptr + seq * bt_stride + tok // PAGE, mask=t_mask, other=0)
        row = (block.to(tl.int64) * cache_block_stride + (tok % PAGE) * cache_tok_stride
               + kv_head * cache_head_stride)
        kv_off = row[:, None] + offs_d[None, :]
        kv_mask = t_mask[:, None] & d_mask[None, :]
        k = tl.load(k_cache_ptr + kv_off, mask=kv_mask, other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * scale_log2  # [M, N]
        # token 0 is in the first tile for every row, so no row's running max stays -inf
        s = tl.where(t_mask[None, :] & (tok[None, :] <= pos_q[:, None]), s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        p = tl.exp2(s - m_new[:, None])
        alpha = tl.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(v_cache_ptr + kv_off, mask=kv_mask, other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=DOT_PRECISION)
        m_i = m_new
    out = acc / l_i[:, None]
    o_off = q_rows[:, None] * out_tok_stride + head * out_head_stride + offs_d[None, :]
    tl.store(out_ptr + o_off, out.to(out_ptr.dtype.element_ty),
             mask=m_mask[:, None] & d_mask[None, :])


def paged_prefill_attention_triton(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    block_m: int = 64,
    block_n: int = 64,
) -> torch.Tensor:
    """Launch :func:`_paged_prefill_kernel`; same contract as
    :func:`kernels.paged_prefill_attention`. Reads the longest chunk length to the host once
    (grid size); ``block_m``/``block_n`` are exposed for tests and tuning."""
    check_rows("prefill q", q, 3)
    check_same_device(q, k_cache, v_cache, block_tables, query_start_loc, seq_lens)
    num_tokens, num_heads, head_dim = q.shape
    _, page, num_kv_heads, cache_dim = k_cache.shape
    if v_cache.shape != k_cache.shape or cache_dim != head_dim or num_heads % num_kv_heads:
        raise ValueError(f"prefill: q {tuple(q.shape)}, caches {tuple(k_cache.shape)} / "
                         f"{tuple(v_cache.shape)}")
    if not (k_cache.is_contiguous() and v_cache.is_contiguous()):
        raise ValueError("prefill: caches must be contiguous")
    num_seqs = seq_lens.shape[0]
    if query_start_loc.shape != (num_seqs + 1,) or block_tables.shape[0] != num_seqs:
        raise ValueError(f"prefill: query_start_loc {tuple(query_start_loc.shape)}, "
                         f"block_tables {tuple(block_tables.shape)}, seq_lens {num_seqs}")
    block_tables = block_tables.to(torch.int32).contiguous()
    query_start_loc = query_start_loc.to(torch.int32).contiguous()
    seq_lens = seq_lens.to(torch.int32).contiguous()
    out = torch.empty((num_tokens, num_heads, head_dim), dtype=q.dtype, device=q.device)
    if num_tokens == 0:
        return out
    max_q_len = int((query_start_loc[1:] - query_start_loc[:-1]).max())
    grid = (num_seqs, triton.cdiv(max_q_len, block_m), num_heads)
    _paged_prefill_kernel[grid](
        q, k_cache, v_cache, block_tables, query_start_loc, seq_lens,
        out, scale * LOG2E,
        q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        block_tables.stride(0), out.stride(0), out.stride(1),
        num_heads // num_kv_heads, head_dim,
        PAGE=page, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_D=next_pow2(head_dim),
        DOT_PRECISION=dot_precision(q.dtype),
        num_warps=4,
    )
    return out
