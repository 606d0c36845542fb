"""Grouped-query self-attention over a paged KV cache."""

from __future__ import annotations

import torch
from torch import nn

import kernels
from kernels import _cpu

from .config import ModelConfig
from .metadata import AttentionMetadata

# Steps whose prompt chunks are at most this long run their attention, decodes included, as the
# C kernel (a decode-style pass per query row, linear in the context); a longer chunk's
# quadratic work goes to the PyTorch path's SDPA, and the step's decodes with it.
NATIVE_CHUNK_ROWS = 64


class Attention(nn.Module):
    """Fused-QKV attention with rotary embeddings; K/V are written into the paged cache.

    The Q/K/V projections live in one `[q_size + 2 * kv_size, hidden]` weight so a step does one
    matmul instead of three; q/k/v are views into its output (no copies).
    """

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.num_heads = config.num_heads
        self.num_kv_heads = config.num_kv_heads
        self.head_dim = config.head_dim
        self.q_size = config.q_size
        self.kv_size = config.kv_size
        self.scale = config.head_dim ** -0.5
        qkv_out = self.q_size + 2 * self.kv_size
        self.qkv_weight = nn.Parameter(torch.empty(qkv_out, config.hidden_size),
                                       requires_grad=False)
        self.qkv_bias = (nn.Parameter(torch.empty(qkv_out), requires_grad=False)
                         if config.attention_bias else None)
        self.o_weight = nn.Parameter(torch.empty(config.hidden_size, self.q_size),
                                     requires_grad=False)
        self.qkv_packed: torch.Tensor | None = None  # see LlamaModel.pack_linears
        self.o_packed: torch.Tensor | None = None

    def forward(self, positions: torch.Tensor, hidden: torch.Tensor, cos_sin_cache: torch.Tensor,
                kv_cache: tuple[torch.Tensor, torch.Tensor], meta: AttentionMetadata,
                packed: tuple[torch.Tensor | None, torch.Tensor | None] | None = None,
                native_act: torch.dtype | None = None) -> torch.Tensor:
        """`hidden` `[T, hidden]` -> `[T, hidden]`; writes this step's K/V into `kv_cache`.
        `packed` is the step's (qkv, o) packed weights (default: the layer's own).
        `native_act` (see `DecoderLayer._native_act`) runs rotary + cache write and the
        attention (of steps with prompt chunks up to `NATIVE_CHUNK_ROWS`) as C kernels, the
        attention reading the paged cache in place, and returns the O projection's raw
        product."""
        num_tokens = hidden.shape[0]
        qkv_packed, o_packed = packed or (self.qkv_packed, self.o_packed)
        raw = native_act is not None
        qkv = kernels.linear(hidden, self.qkv_weight, qkv_packed, self.qkv_bias, raw=raw)
        k_cache, v_cache = kv_cache
        if raw:
            q = _cpu.rope_write_kv(qkv.contiguous(), positions, cos_sin_cache, k_cache, v_cache,
                                   meta.slot_mapping, self.num_heads)
        else:
            q, k, v = qkv.split([self.q_size, self.kv_size, self.kv_size], dim=-1)
            q = q.view(num_tokens, self.num_heads, self.head_dim)      # [T, H, D]
            k = k.view(num_tokens, self.num_kv_heads, self.head_dim)   # [T, KVH, D]
            v = v.view(num_tokens, self.num_kv_heads, self.head_dim)
            kernels.rotary_embedding(positions, q, k, cos_sin_cache)
            kernels.write_kv(k, v, k_cache, v_cache, meta.slot_mapping)
        if raw and meta.max_query_len <= NATIVE_CHUNK_ROWS:
            out = _cpu.paged_attention(q, k_cache, v_cache, meta.block_tables, meta.seq_lens,
                                       self.scale, native_act,
                                       None if meta.is_decode_only else meta.query_start_loc)
        elif meta.is_decode_only:
            index = None if kernels.use_triton(q) else meta.decode_index(*k_cache.shape[1:])
            out = kernels.paged_decode_attention(q, k_cache, v_cache, meta.block_tables,
                                                 meta.seq_lens, self.scale, index)
        else:
            out = kernels.paged_prefill_attention(q, k_cache, v_cache, meta.block_tables,
                                                  meta.query_start_loc, meta.seq_lens, self.scale)
        return kernels.linear(out.reshape(num_tokens, self.q_size), self.o_weight, o_packed,
                              raw=raw)
