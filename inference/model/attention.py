"""Grouped-query self-attention over a paged KV cache."""

from __future__ import annotations

import torch
from torch import nn

from kernels import O_PROJ, QKV, TorchOps

from .config import ModelConfig
from .metadata import AttentionMetadata


class Attention(nn.Module):
    """Fused-QKV attention with rotary embeddings; K/V are written into the paged cache.

    The Q/K/V projections live in one `[q_size + 2 * kv_size, hidden]` weight so a step does one
    matmul instead of three; q/k/v are views into its output (no copies). Per family
    (``config.spec``) and layer: q/k biases, an RMSNorm over each head of q and k before the
    rotary embedding (``q_norm``/``k_norm`` `[head_dim]`), a sliding ``window`` and a
    ``softcap`` of the scores.
    """

    def __init__(self, config: ModelConfig, layer: int = 0) -> None:
        super().__init__()
        self.num_heads = config.num_heads
        self.num_kv_heads = config.num_kv_heads
        self.head_dim = config.head_dim
        self.q_size = config.q_size
        self.kv_size = config.kv_size
        self.scale = config.attn_scale
        self.eps = config.rms_norm_eps
        self.window = config.layer_window(layer)
        self.softcap = config.attn_softcap
        qkv_out = self.q_size + 2 * self.kv_size
        self.qkv_weight = nn.Parameter(torch.empty(qkv_out, config.hidden_size),
                                       requires_grad=False)
        self.qkv_bias = (nn.Parameter(torch.empty(qkv_out), requires_grad=False)
                         if config.attention_bias else None)
        self.o_weight = nn.Parameter(torch.empty(config.hidden_size, self.q_size),
                                     requires_grad=False)
        self.q_norm: nn.Parameter | None = None
        self.k_norm: nn.Parameter | None = None
        if config.spec.qk_norm:
            self.q_norm = nn.Parameter(torch.empty(self.head_dim), requires_grad=False)
            self.k_norm = nn.Parameter(torch.empty(self.head_dim), requires_grad=False)

    @property
    def heads(self) -> tuple[int, int, int]:
        return self.num_heads, self.num_kv_heads, self.head_dim

    def forward(self, positions: torch.Tensor, hidden: torch.Tensor, cos_sin_cache: torch.Tensor,
                kv_cache: tuple[torch.Tensor, torch.Tensor], meta: AttentionMetadata,
                ops: TorchOps) -> torch.Tensor:
        """`hidden` `[T, hidden]` -> `[T, hidden]`; writes this step's K/V into `kv_cache`.
        `ops` is the step's op set (`kernels.backends.LayerBackend.ops`)."""
        num_tokens = hidden.shape[0]
        qkv = ops.linear(hidden, self.qkv_weight, QKV, self.qkv_bias)
        if self.q_norm is not None and self.k_norm is not None:
            ops.qk_norm(qkv, (self.q_norm, self.k_norm), self.eps, self.heads)
        q = ops.rope_write_kv(qkv, positions, cos_sin_cache, kv_cache, meta.slot_mapping,
                              self.heads)                                   # [T, H, D]
        out = ops.attention(q, kv_cache, meta, self.scale, self.window,
                            self.softcap)                                   # [T, H, D]
        return ops.linear(out.reshape(num_tokens, self.q_size), self.o_weight, O_PROJ)
