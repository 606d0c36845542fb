"""Triton rotary embedding, in place; math in :mod:`kernels.rotary`."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels._triton.common import check_rows, check_same_device, next_pow2


@triton.jit
def _rotate_heads(x_ptr, tok, tok_stride, head_stride, num_heads, half, cos, sin,
                  BLOCK_H: tl.constexpr, BLOCK_HALF: tl.constexpr):
    heads = tl.arange(0, BLOCK_H)
    dims = tl.arange(0, BLOCK_HALF)
    mask = (heads[:, None] < num_heads) & (dims[None, :] < half)
    first = x_ptr + tok * tok_stride + heads[:, None] * head_stride + dims[None, :]
    x1 = tl.load(first, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(first + half, mask=mask, other=0.0).to(tl.float32)
    out_ty = x_ptr.dtype.element_ty
    tl.store(first, (x1 * cos[None, :] - x2 * sin[None, :]).to(out_ty), mask=mask)
    tl.store(first + half, (x2 * cos[None, :] + x1 * sin[None, :]).to(out_ty), mask=mask)


@triton.jit
def _rotary_kernel(
    pos_ptr, q_ptr, k_ptr, cache_ptr,
    q_tok_stride, q_head_stride, k_tok_stride, k_head_stride, cache_stride,
    num_q_heads, num_k_heads, half,
    BLOCK_QH: tl.constexpr, BLOCK_KH: tl.constexpr, BLOCK_HALF: tl.constexpr,
):
    """One token per program: ``[x1, x2] <- [x1 c - x2 s, x2 c + x1 s]`` for all its q and k
    heads, with ``[c | s] = cache[pos]``."""
    tok = tl.program_id(0).to(tl.int64)
    pos = tl.load(pos_ptr + tok).to(tl.int64)
    dims = tl.arange(0, BLOCK_HALF)
    cos = tl.load(cache_ptr + pos * cache_stride + dims, mask=dims < half, other=0.0)
    sin = tl.load(cache_ptr + pos * cache_stride + half + dims, mask=dims < half, other=0.0)
    cos, sin = cos.to(tl.float32), sin.to(tl.float32)
    _rotate_heads(q_ptr, tok, q_tok_stride, q_head_stride, num_q_heads, half, cos, sin,
                  BLOCK_QH, BLOCK_HALF)
    _rotate_heads(k_ptr, tok, k_tok_stride, k_head_stride, num_k_heads, half, cos, sin,
                  BLOCK_KH, BLOCK_HALF)


def rotary_embedding_triton(
    positions: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    cos_sin_cache: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Launch :func:`_rotary_kernel`; same contract as :func:`kernels.rotary_embedding`.

    ``q``/``k`` may be strided views (e.g. slices of a fused QKV output) as long as the head
    dim is contiguous.
    """
    check_rows("rotary q", q, 3)
    check_rows("rotary k", k, 3)
    check_rows("rotary cos_sin_cache", cos_sin_cache, 2)
    check_same_device(positions, q, k, cos_sin_cache)
    num_tokens, num_q_heads, head_dim = q.shape
    if k.shape[0] != num_tokens or k.shape[2] != head_dim or positions.shape != (num_tokens,):
        raise ValueError(f"rotary: q {tuple(q.shape)}, k {tuple(k.shape)}, "
                         f"positions {tuple(positions.shape)}")
    if cos_sin_cache.shape[1] != head_dim or head_dim % 2:
        raise ValueError(f"rotary: cache {tuple(cos_sin_cache.shape)} vs head_dim {head_dim}")
    positions = positions.contiguous()
    half = head_dim // 2
    if num_tokens:
        _rotary_kernel[(num_tokens,)](
            positions, q, k, cos_sin_cache,
            q.stride(0), q.stride(1), k.stride(0), k.stride(1), cos_sin_cache.stride(0),
            num_q_heads, k.shape[1], half,
            BLOCK_QH=next_pow2(num_q_heads), BLOCK_KH=next_pow2(k.shape[1]),
            BLOCK_HALF=next_pow2(half),
            num_warps=4,
        )
    return q, k
