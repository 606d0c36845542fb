"""Triton paged attention with a sliding window and soft-capped scores; math in
:mod:`kernels.window_attention`.

One program per (query row, query head): it walks only the row's window of the context, in
tiles of ``BLOCK_N`` tokens addressed through the block table, with an online softmax. The
scores are a row-by-tile product (no ``tl.dot``), so any head size and group size work; the
families that need this op have few heads per step next to the matmuls.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels._triton.common import check_rows, check_same_device, next_pow2
from kernels.rows import row_positions


@triton.jit
def _window_attention_kernel(
    q_ptr, k_cache_ptr, v_cache_ptr, block_tables_ptr, row_seq_ptr, row_pos_ptr, out_ptr,
    scale, softcap, window,
    q_row_stride, q_head_stride, cache_block_stride, cache_tok_stride, cache_head_stride,
    bt_stride, out_row_stride, out_head_stride, group, head_dim,
    PAGE: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    SOFTCAP: tl.constexpr, WINDOW: tl.constexpr,
):
    """``out[r, h] = softmax(cap(scale * K q[r, h]))`` over ``(pos - window, pos]`` times V."""
    row = tl.program_id(0).to(tl.int64)
    head = tl.program_id(1)
    kv_head = head // group
    seq = tl.load(row_seq_ptr + row).to(tl.int64)
    pos = tl.load(row_pos_ptr + row)
    lo = tl.maximum(pos - window + 1, 0) if WINDOW else pos * 0
    offs_d = tl.arange(0, BLOCK_D)
    offs_n = tl.arange(0, BLOCK_N)
    d_mask = offs_d < head_dim
    q = tl.load(q_ptr + row * q_row_stride + head * q_head_stride + offs_d, mask=d_mask,
                other=0.0).to(tl.float32)
    m_i = tl.max(tl.full([BLOCK_N], float("-inf"), tl.float32), 0)
    l_i = tl.sum(tl.zeros([BLOCK_N], tl.float32), 0)
    acc = tl.zeros([BLOCK_D], tl.float32)
    for tile in range(lo, pos + 1, BLOCK_N):
        tok = tile + offs_n
        t_mask = tok <= pos
        block = tl.load(block_tables_ptr + seq * bt_stride + tok // PAGE, mask=t_mask, other=0)
        kv_row = (block.to(tl.int64) * cache_block_stride + (tok % PAGE) * cache_tok_stride
                  + kv_head * cache_head_stride)
        kv_off = kv_row[:, None] + offs_d[None, :]
        kv_mask = t_mask[:, None] & d_mask[None, :]
        k = tl.load(k_cache_ptr + kv_off, mask=kv_mask, other=0.0).to(tl.float32)
        s = tl.sum(k * q[None, :], 1) * scale  # [N]
        if SOFTCAP:  # c * tanh(s / c), tanh(z) = 2 sigmoid(2 z) - 1
            s = softcap * (2.0 * tl.sigmoid(2.0 * s / softcap) - 1.0)
        s = tl.where(t_mask, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 0))
        p = tl.exp(s - m_new)
        alpha = tl.exp(m_i - m_new)
        v = tl.load(v_cache_ptr + kv_off, mask=kv_mask, other=0.0).to(tl.float32)
        l_i = l_i * alpha + tl.sum(p, 0)
        acc = acc * alpha + tl.sum(p[:, None] * v, 0)
        m_i = m_new
    out = acc / l_i
    tl.store(out_ptr + row * out_row_stride + head * out_head_stride + offs_d,
             out.to(out_ptr.dtype.element_ty), mask=d_mask)


def paged_window_attention_triton(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables: torch.Tensor,
    query_start_loc: torch.Tensor, seq_lens: torch.Tensor, scale: float,
    window: int | None = None, softcap: float | None = None,
) -> torch.Tensor:
    """Launch :func:`_window_attention_kernel`; same contract as
    :func:`kernels.window_attention.paged_window_attention`."""

    check_rows("window attention q", q, 3)
    check_same_device(q, k_cache, v_cache, block_tables, query_start_loc, seq_lens)
    if not (k_cache.is_contiguous() and v_cache.is_contiguous()):
        raise ValueError("window attention: caches must be contiguous")
    num_rows, num_heads, head_dim = q.shape
    _, page, num_kv_heads, _ = k_cache.shape
    out = torch.empty_like(q)
    if num_rows == 0:
        return out
    row_seq, row_pos = row_positions(query_start_loc, seq_lens, num_rows)
    _window_attention_kernel[(num_rows, num_heads)](
        q, k_cache, v_cache, block_tables, row_seq, row_pos, out,
        float(scale), float(softcap or 1.0), int(window or 0),
        q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        block_tables.stride(0), out.stride(0), out.stride(1), num_heads // num_kv_heads,
        head_dim, PAGE=page, BLOCK_N=32, BLOCK_D=next_pow2(head_dim),
        SOFTCAP=bool(softcap), WINDOW=bool(window), num_warps=4)
    return out
