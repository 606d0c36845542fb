"""Triton KV-cache write; layout and math in :mod:`kernels.kv_cache`."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels._triton.common import check_rows, check_same_device, next_pow2


@triton.jit
def _write_kv_kernel(
    key_ptr, value_ptr, k_cache_ptr, v_cache_ptr, slot_ptr,
    key_tok_stride, key_head_stride, value_tok_stride, value_head_stride, slot_stride,
    num_kv_heads, head_dim,
    BLOCK_H: tl.constexpr, BLOCK_D: tl.constexpr,
):
    """One token per program: ``cache.view(-1, H, D)[slot] = key``; ``slot < 0`` writes nothing.

    ``slot_stride`` is the cache's stride between consecutive slots (``H * D``).
    """
    tok = tl.program_id(0).to(tl.int64)
    slot = tl.load(slot_ptr + tok).to(tl.int64)
    heads = tl.arange(0, BLOCK_H)[:, None]
    dims = tl.arange(0, BLOCK_D)[None, :]
    mask = (heads < num_kv_heads) & (dims < head_dim) & (slot >= 0)
    dst = slot * slot_stride + heads * head_dim + dims
    key = tl.load(key_ptr + tok * key_tok_stride + heads * key_head_stride + dims, mask=mask)
    tl.store(k_cache_ptr + dst, key.to(k_cache_ptr.dtype.element_ty), mask=mask)
    value = tl.load(value_ptr + tok * value_tok_stride + heads * value_head_stride + dims,
                    mask=mask)
    tl.store(v_cache_ptr + dst, value.to(v_cache_ptr.dtype.element_ty), mask=mask)


def write_kv_triton(
    key: torch.Tensor,
    value: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> None:
    """Launch :func:`_write_kv_kernel`; same contract as :func:`kernels.write_kv`."""
    check_rows("write_kv key", key, 3)
    check_rows("write_kv value", value, 3)
    check_same_device(key, value, k_cache, v_cache, slot_mapping)
    num_tokens, num_kv_heads, head_dim = key.shape
    cache_shape = tuple(k_cache.shape)
    if value.shape != key.shape or tuple(v_cache.shape) != cache_shape:
        raise ValueError(f"write_kv: key {tuple(key.shape)} value {tuple(value.shape)} "
                         f"k_cache {cache_shape} v_cache {tuple(v_cache.shape)}")
    if cache_shape[2:] != (num_kv_heads, head_dim):
        raise ValueError(f"write_kv: cache {cache_shape} vs key {tuple(key.shape)}")
    if not (k_cache.is_contiguous() and v_cache.is_contiguous()):
        raise ValueError("write_kv: caches must be contiguous")
    if slot_mapping.shape != (num_tokens,):
        raise ValueError(f"write_kv: slot_mapping {tuple(slot_mapping.shape)}")
    slot_mapping = slot_mapping.contiguous()
    if num_tokens:
        _write_kv_kernel[(num_tokens,)](
            key, value, k_cache, v_cache, slot_mapping,
            key.stride(0), key.stride(1), value.stride(0), value.stride(1),
            num_kv_heads * head_dim,
            num_kv_heads, head_dim,
            BLOCK_H=next_pow2(num_kv_heads), BLOCK_D=next_pow2(head_dim),
            num_warps=4,
        )
