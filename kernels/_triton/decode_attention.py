"""Triton paged decode attention (split-K "flash decoding"); math in
:mod:`kernels.decode_attention`.

One program per (sequence, KV head, context split): the ``group`` query heads that share a KV
head are the rows of one ``[BLOCK_G, D]`` tile, so each KV row is read once per group. The
program walks its split of the context in tiles of ``BLOCK_N`` tokens, each token addressed
through the block table (tiles may span pages), with an online softmax. With several splits a
second kernel merges the partial (max, sum, accumulator) triples.
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
    sm_count,
)


@triton.jit
def _paged_decode_kernel(
    q_ptr, k_cache_ptr, v_cache_ptr, block_tables_ptr, seq_lens_ptr,
    out_ptr, part_acc_ptr, part_m_ptr, part_l_ptr,
    scale_log2, partition, num_splits,
    q_seq_stride, q_head_stride, cache_block_stride, cache_tok_stride, cache_head_stride,
    bt_stride, out_seq_stride, out_head_stride,
    num_heads, group, head_dim,
    PAGE: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_G: tl.constexpr, BLOCK_D: tl.constexpr,
    SPLIT: tl.constexpr, DOT_PRECISION: tl.constexpr,
):
    """``out[s, h] = softmax(scale * K_s q[s, h]) V_s`` over tokens ``[split * partition,
    min((split + 1) * partition, seq_len))``; scores kept in log2 units (``exp2``)."""
    seq = tl.program_id(0).to(tl.int64)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)
    seq_len = tl.load(seq_lens_ptr + seq)
    start = split * partition
    end = tl.minimum(start + partition, seq_len)
    offs_g = tl.arange(0, BLOCK_G)
    offs_d = tl.arange(0, BLOCK_D)
    offs_n = tl.arange(0, BLOCK_N)
    heads = kv_head * group + offs_g
    g_mask = offs_g < group
    d_mask = offs_d < head_dim
    q_off = seq * q_seq_stride + heads[:, None] * q_head_stride + offs_d[None, :]
    q = tl.load(q_ptr + q_off, mask=g_mask[:, None] & d_mask[None, :], other=0.0)
    m_i = tl.full([BLOCK_G], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_G], tl.float32)
    acc = tl.zeros([BLOCK_G, BLOCK_D], tl.float32)
    for tile in range(start, end, BLOCK_N):
        tok = tile + offs_n
        t_mask = tok < end
        block = tl.load(block_tables_ptr + seq * bt_stride + tok // PAGE, mask=t_mask, other=0)
        row = (block.to(tl.int64) * cache_block_stride + (tok % PAGE) * cache_tok_stride
               + kv_head * cache_head_stride)
        kv_off = row[:, None] + offs_d[None, :]
        kv_mask = t_mask[:, None] & d_mask[None, :]
        k = tl.load(k_cache_ptr + kv_off, mask=kv_mask, other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * scale_log2  # [G, N]
        s = tl.where(t_mask[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        p = tl.exp2(s - m_new[:, None])
        alpha = tl.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(v_cache_ptr + kv_off, mask=kv_mask, other=0.0)
        pv = tl.dot(p.to(v.dtype), v, input_precision=DOT_PRECISION)
        acc = acc * alpha[:, None] + pv
        m_i = m_new
    if SPLIT:
        # partials are [num_seqs, num_heads, num_splits(, D)]; empty splits store (-inf, 0, 0)
        part = (seq * num_heads + heads) * num_splits + split
        tl.store(part_m_ptr + part, m_i, mask=g_mask)
        tl.store(part_l_ptr + part, l_i, mask=g_mask)
        tl.store(part_acc_ptr + part[:, None] * head_dim + offs_d[None, :], acc,
                 mask=g_mask[:, None] & d_mask[None, :])
    else:
        out = acc / l_i[:, None]
        o_off = seq * out_seq_stride + heads[:, None] * out_head_stride + offs_d[None, :]
        tl.store(out_ptr + o_off, out.to(out_ptr.dtype.element_ty),
                 mask=g_mask[:, None] & d_mask[None, :])


@triton.jit
def _decode_merge_kernel(
    part_acc_ptr, part_m_ptr, part_l_ptr, out_ptr,
    num_splits, num_heads, head_dim, out_seq_stride, out_head_stride,
    BLOCK_S: tl.constexpr, BLOCK_D: tl.constexpr,
):
    """``out = sum_i 2^(m_i - M) acc_i / sum_i 2^(m_i - M) l_i`` with ``M = max_i m_i``."""
    seq = tl.program_id(0).to(tl.int64)
    head = tl.program_id(1)
    offs_s = tl.arange(0, BLOCK_S)
    offs_d = tl.arange(0, BLOCK_D)
    s_mask = offs_s < num_splits
    part = (seq * num_heads + head) * num_splits + offs_s
    m = tl.load(part_m_ptr + part, mask=s_mask, other=float("-inf"))
    l = tl.load(part_l_ptr + part, mask=s_mask, other=0.0)  # noqa: E741
    w = tl.exp2(m - tl.max(m, 0))
    acc = tl.load(part_acc_ptr + part[:, None] * head_dim + offs_d[None, :],
                  mask=s_mask[:, None] & (offs_d[None, :] < head_dim), other=0.0)
    out = tl.sum(acc * w[:, None], 0) / tl.sum(l * w, 0)
    tl.store(out_ptr + seq * out_seq_stride + head * out_head_stride + offs_d,
             out.to(out_ptr.dtype.element_ty), mask=offs_d < head_dim)


def _choose_splits(num_seqs: int, num_kv_heads: int, max_len: int, device: torch.device) -> int:
    # enough programs to fill the device about four times over, splits of >= 256 tokens
    want = triton.cdiv(4 * sm_count(device), max(num_seqs * num_kv_heads, 1))
    return max(1, min(want, triton.cdiv(max_len, 256)))


def paged_decode_attention_triton(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    num_splits: int | None = None,
    block_n: int = 64,
) -> torch.Tensor:
    """Launch the decode kernels; same contract as :func:`kernels.paged_decode_attention`.

    ``num_splits`` (default: from the device size and the block table's width, so no host
    sync on ``seq_lens``) and ``block_n`` are exposed for tests and tuning.
    """
    check_rows("decode q", q, 3)
    check_same_device(q, k_cache, v_cache, block_tables, seq_lens)
    num_seqs, num_heads, head_dim = q.shape
    num_blocks, page, num_kv_heads, cache_dim = k_cache.shape
    if v_cache.shape != k_cache.shape or cache_dim != head_dim or num_heads % num_kv_heads:
        raise ValueError(f"decode: q {tuple(q.shape)}, caches {tuple(k_cache.shape)} / "
                         f"{tuple(v_cache.shape)}")
    if not (k_cache.is_contiguous() and v_cache.is_contiguous()):
        raise ValueError("decode: caches must be contiguous")
    if block_tables.dim() != 2 or block_tables.shape[0] != num_seqs:
        raise ValueError(f"decode: block_tables {tuple(block_tables.shape)}")
    block_tables = block_tables.to(torch.int32).contiguous()
    seq_lens = seq_lens.to(torch.int32).contiguous()
    out = torch.empty((num_seqs, num_heads, head_dim), dtype=q.dtype, device=q.device)
    if num_seqs == 0:
        return out
    group = num_heads // num_kv_heads
    max_len = block_tables.shape[1] * page
    splits = num_splits or _choose_splits(num_seqs, num_kv_heads, max_len, q.device)
    partition = triton.cdiv(triton.cdiv(max_len, splits), block_n) * block_n
    splits = triton.cdiv(max_len, partition)
    block_d = next_pow2(head_dim)
    if splits > 1:
        part_m = torch.empty((num_seqs, num_heads, splits), dtype=torch.float32, device=q.device)
        part_l = torch.empty_like(part_m)
        part_acc = torch.empty((num_seqs, num_heads, splits, head_dim), dtype=torch.float32,
                               device=q.device)
    else:
        part_m = part_l = part_acc = out  # unused
    _paged_decode_kernel[(num_seqs, num_kv_heads, splits)](
        q, k_cache, v_cache, block_tables, seq_lens,
        out, part_acc, part_m, part_l,
        scale * LOG2E, partition, splits,
        q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        block_tables.stride(0), out.stride(0), out.stride(1),
        num_heads, group, head_dim,
        PAGE=page, BLOCK_N=block_n, BLOCK_G=max(16, next_pow2(group)), BLOCK_D=block_d,
        SPLIT=splits > 1, DOT_PRECISION=dot_precision(q.dtype),
        num_warps=4,
    )
    if splits > 1:
        _decode_merge_kernel[(num_seqs, num_heads)](
            part_acc, part_m, part_l, out,
            splits, num_heads, head_dim, out.stride(0), out.stride(1),
            BLOCK_S=next_pow2(splits), BLOCK_D=block_d,
        )
    return out
