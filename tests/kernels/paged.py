"""Test helpers: random paged KV caches and a dense attention oracle built independently."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    """``||out - ref|| / ||ref||`` in float64 (NaN anywhere makes it NaN)."""
    out, ref = out.double(), ref.double()
    return float((out - ref).norm() / ref.norm())


def make_paged(
    seq_lens: list[int],
    block_size: int,
    num_kv_heads: int,
    head_dim: int,
    dtype: torch.dtype = torch.float32,
    spare_blocks: int = 3,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Caches whose blocks are handed out in random order, filled with random values where a
    sequence has tokens and NaN elsewhere (so reading an unwritten slot shows); block-table
    entries past each sequence's blocks hold junk (-1 and out-of-range ids)."""
    need = [math.ceil(n / block_size) for n in seq_lens]
    num_blocks = sum(need) + spare_blocks
    shape = (num_blocks, block_size, num_kv_heads, head_dim)
    k_cache = torch.full(shape, float("nan"), dtype=dtype)
    v_cache = torch.full(shape, float("nan"), dtype=dtype)
    order = torch.randperm(num_blocks).tolist()
    max_blocks = max(need) + 2
    tables = torch.full((len(seq_lens), max_blocks), -1, dtype=torch.int32)
    tables[:, -1] = num_blocks + 7
    for s, (n, nb) in enumerate(zip(seq_lens, need)):
        ids = [order.pop() for _ in range(nb)]
        tables[s, :nb] = torch.tensor(ids, dtype=torch.int32)
        for t in range(n):
            b, o = ids[t // block_size], t % block_size
            k_cache[b, o] = torch.randn(num_kv_heads, head_dim).to(dtype)
            v_cache[b, o] = torch.randn(num_kv_heads, head_dim).to(dtype)
    return k_cache, v_cache, tables


def dense_kv(cache: torch.Tensor, table: torch.Tensor, length: int) -> torch.Tensor:
    """One sequence's ``[length, KVH, D]`` rows, read token by token from the block table."""
    block_size = cache.shape[1]
    rows = [cache[int(table[t // block_size]), t % block_size] for t in range(length)]
    return torch.stack(rows)


def dense_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float
) -> torch.Tensor:
    """q ``[n, H, D]`` = the last n positions of a sequence whose k/v are ``[L, KVH, D]``;
    causal SDPA in float64 with K/V repeated per group."""
    n, total = q.shape[0], k.shape[0]
    group = q.shape[1] // k.shape[1]
    qt = q.double().transpose(0, 1)
    kt = k.double().repeat_interleave(group, 1).transpose(0, 1)
    vt = v.double().repeat_interleave(group, 1).transpose(0, 1)
    mask = torch.ones(n, total, dtype=torch.bool).tril(diagonal=total - n)
    out = F.scaled_dot_product_attention(qt, kt, vt, attn_mask=mask, scale=scale)
    return out.transpose(0, 1)
