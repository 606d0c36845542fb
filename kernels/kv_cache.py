"""KV-cache write: store each token's key and value in its slot of the paged cache.

Caches are ``[num_blocks, block_size, num_kv_heads, head_dim]``; token ``t`` goes to
``slot = slot_mapping[t] = block_id * block_size + offset``, i.e. flat row ``slot`` of the cache
viewed as ``[num_blocks * block_size, num_kv_heads, head_dim]``. A negative slot (padding) is
skipped.
"""

from __future__ import annotations

import torch

from kernels.dispatch import use_triton


def write_kv_reference(
    key: torch.Tensor,
    value: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> None:
    """Plain PyTorch KV write; same contract as :func:`write_kv`."""
    # one reduction and one scalar read per call (every layer of every step): min() is about
    # half the cost of (slot_mapping >= 0).all(), which builds a mask first
    if slot_mapping.numel() and int(slot_mapping.min()) < 0:
        keep = slot_mapping >= 0
        key, value, slot_mapping = key[keep], value[keep], slot_mapping[keep]
    # flatten(0, 1) of a contiguous cache is a view, so index_copy_ writes into the cache
    k_cache.flatten(0, 1).index_copy_(0, slot_mapping, key.to(k_cache.dtype))
    v_cache.flatten(0, 1).index_copy_(0, slot_mapping, value.to(v_cache.dtype))


def write_kv(
    key: torch.Tensor,
    value: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> None:
    """Write ``key``/``value`` ``[num_tokens, num_kv_heads, head_dim]`` into the caches at
    ``slot_mapping`` ``[num_tokens]`` (int64; < 0 = skip). In place, returns nothing."""
    if not (k_cache.is_contiguous() and v_cache.is_contiguous()):
        raise ValueError("write_kv: caches must be contiguous")
    if use_triton(key):
        from kernels._triton.kv_cache import write_kv_triton

        write_kv_triton(key, value, k_cache, v_cache, slot_mapping)
        return
    write_kv_reference(key, value, k_cache, v_cache, slot_mapping)
