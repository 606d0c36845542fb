"""The ops a decoder layer runs between its matmuls, as one object per step: the public
``kernels.*`` ops (:class:`TorchOps`: the PyTorch reference, Triton on CUDA) or the C kernels
of ``kernels/_cpu`` (:class:`CpuOps`). A :class:`kernels.backends.LayerBackend` hands the
model one of them for each step; the model calls the same methods in the same order either way.

The ops only some families use (``inference.model.arch``): ``norm`` (Gemma's norms around
attention and MLP), ``qk_norm`` (Qwen 3, Gemma 3), ``gate_and_mul`` with ``gelu_tanh``
(GeGLU), and ``attention`` with a sliding window or soft-capped scores
(``kernels.window_attention``): Triton on CUDA, the PyTorch reference elsewhere; on the C
kernels' op set the norms and the GeGLU run in C, the q/k norms and windowed or capped
attention on the references.

Projections are named by index (``QKV``, ``O_PROJ``, ``GATE_UP``, ``DOWN``): the op set holds the
step's packed copy of each (see ``kernels.backends``), the model passes the plain weight.
"""

from __future__ import annotations

import torch

from kernels import _cpu
from kernels.activation import gate_and_mul, silu_and_mul
from kernels.decode_attention import paged_decode_attention
from kernels.dispatch import use_triton
from kernels.kv_cache import write_kv
from kernels.linear import linear
from kernels.prefill_attention import paged_prefill_attention
from kernels.rms_norm import rms_norm
from kernels.rotary import rotary_embedding
from kernels.window_attention import paged_window_attention

QKV, O_PROJ, GATE_UP, DOWN = range(4)
# Steps whose prompt chunks are at most this long run their attention, decodes included, as the
# C kernel (a decode-style pass per query row, linear in the context); a longer chunk's
# quadratic work goes to the PyTorch path's SDPA, and the step's decodes with it.
NATIVE_CHUNK_ROWS = 64


def effective_window(window: int | None, meta) -> int | None:
    """``window``, or None where no sequence of the step is longer than it (every row then
    sees its whole context: the plain attention kernels serve)."""
    return window if window and meta.max_seq_len > window else None


class TorchOps:
    """The ``kernels.*`` ops over the step's packs ``(qkv, o, gate_up, down)`` (or Nones);
    ``one_rows``: the step's decode rows before its prompt chunks (``kernels.linear``)."""

    __slots__ = ("packs", "one_rows")

    def __init__(self, packs: tuple, one_rows: int = 0) -> None:
        self.packs, self.one_rows = packs, one_rows

    def linear(self, x: torch.Tensor, weight: torch.Tensor, which: int,
               bias: torch.Tensor | None = None) -> torch.Tensor:
        """``x @ weight.T (+ bias)`` on the step's pack of projection ``which``."""
        return linear(x, weight, self.packs[which], bias, one_rows=self.one_rows)

    def add_norm(self, x: torch.Tensor, weight: torch.Tensor, eps: float,
                 residual: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        """``(norm(x + residual), x + residual)``; the first layer's ``x`` is its own residual."""
        if residual is None:
            return rms_norm(x, weight, eps), x
        return rms_norm(x, weight, eps, residual)

    def norm(self, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        """RMSNorm of ``x`` alone (no residual stream)."""
        return self.add_norm(x, weight, eps, None)[0]

    def silu_and_mul(self, x: torch.Tensor) -> torch.Tensor:
        return silu_and_mul(x)

    def gate_and_mul(self, x: torch.Tensor, activation: str) -> torch.Tensor:
        """The gated MLP's activation (``silu`` or ``gelu_tanh``) of ``[gate | up]``."""
        if activation == "silu":
            return self.silu_and_mul(x)
        return gate_and_mul(x, activation)

    def qk_norm(self, qkv: torch.Tensor, weights: tuple[torch.Tensor, torch.Tensor],
                eps: float, heads: tuple[int, int, int]) -> None:
        """RMSNorm over each head of q and of k in ``qkv`` ``[T, (H + 2 KVH) D]``, in place,
        with the ``[D]`` weights ``(q_norm, k_norm)``."""
        num_heads, num_kv_heads, head_dim = heads
        tokens, start = qkv.shape[0], 0
        for count, weight in zip((num_heads, num_kv_heads), weights, strict=True):
            part = qkv[:, start:start + count * head_dim]
            rows = part.reshape(tokens * count, head_dim)
            part.copy_(rms_norm(rows, weight, eps).view(tokens, count * head_dim))
            start += count * head_dim

    def rope_write_kv(self, qkv: torch.Tensor, positions: torch.Tensor, cos_sin: torch.Tensor,
                      kv_cache: tuple[torch.Tensor, torch.Tensor], slots: torch.Tensor,
                      heads: tuple[int, int, int]) -> torch.Tensor:
        """Rotate q and k of ``qkv`` ``[T, (H + 2 KVH) D]``, write k and v into the cache at
        ``slots``; returns q ``[T, H, D]``. ``heads`` is (H, KVH, D)."""
        num_heads, num_kv_heads, head_dim = heads
        num_tokens = qkv.shape[0]
        q, k, v = qkv.split([num_heads * head_dim, num_kv_heads * head_dim,
                             num_kv_heads * head_dim], dim=-1)
        q = q.view(num_tokens, num_heads, head_dim)      # [T, H, D]
        k = k.view(num_tokens, num_kv_heads, head_dim)   # [T, KVH, D]
        v = v.view(num_tokens, num_kv_heads, head_dim)
        rotary_embedding(positions, q, k, cos_sin)
        write_kv(k, v, kv_cache[0], kv_cache[1], slots)
        return q

    def attention(self, q: torch.Tensor, kv_cache: tuple[torch.Tensor, torch.Tensor], meta,
                  scale: float, window: int | None = None,
                  softcap: float | None = None) -> torch.Tensor:
        """Causal attention of q ``[T, H, D]`` over the paged cache; ``[T, H, D]``. A
        ``window`` (the latest positions a row sees) or a ``softcap`` of the scores takes
        ``kernels.window_attention``."""
        k_cache, v_cache = kv_cache
        window = effective_window(window, meta)
        if window or softcap:
            return paged_window_attention(q, k_cache, v_cache, meta.block_tables,
                                          meta.query_start_loc, meta.seq_lens, scale, window,
                                          softcap)
        if meta.is_decode_only:
            index = None if use_triton(q) else meta.decode_index(*k_cache.shape[1:])
            return paged_decode_attention(q, k_cache, v_cache, meta.block_tables, meta.seq_lens,
                                          scale, index)
        return paged_prefill_attention(q, k_cache, v_cache, meta.block_tables,
                                       meta.query_start_loc, meta.seq_lens, scale)


class CpuOps(TorchOps):
    """The C kernels (float32 model and cache on a CPU where they build): the same math, the
    residual stream updated in place, and activations travelling between matmuls in ``act``
    (bfloat16 under bfloat16-packed weights, what the matmul rounds them to anyway)."""

    __slots__ = ("act",)

    def __init__(self, packs: tuple, act: torch.dtype, one_rows: int = 0) -> None:
        super().__init__(packs, one_rows)
        self.act = act

    def linear(self, x: torch.Tensor, weight: torch.Tensor, which: int,
               bias: torch.Tensor | None = None) -> torch.Tensor:
        return linear(x, weight, self.packs[which], bias, raw=True, one_rows=self.one_rows)

    def add_norm(self, x: torch.Tensor, weight: torch.Tensor, eps: float,
                 residual: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        out = _cpu.add_rms_norm(x, weight, eps, residual, self.act)
        return out, x if residual is None else residual

    def silu_and_mul(self, x: torch.Tensor) -> torch.Tensor:
        return _cpu.silu_and_mul(x, self.act)

    def gate_and_mul(self, x: torch.Tensor, activation: str) -> torch.Tensor:
        return _cpu.silu_and_mul(x, self.act, gelu=activation == "gelu_tanh")

    def rope_write_kv(self, qkv: torch.Tensor, positions: torch.Tensor, cos_sin: torch.Tensor,
                      kv_cache: tuple[torch.Tensor, torch.Tensor], slots: torch.Tensor,
                      heads: tuple[int, int, int]) -> torch.Tensor:
        return _cpu.rope_write_kv(qkv.contiguous(), positions, cos_sin, kv_cache[0],
                                  kv_cache[1], slots, heads[0])

    def attention(self, q: torch.Tensor, kv_cache: tuple[torch.Tensor, torch.Tensor], meta,
                  scale: float, window: int | None = None,
                  softcap: float | None = None) -> torch.Tensor:
        if meta.max_query_len > NATIVE_CHUNK_ROWS or effective_window(window, meta) or softcap:
            return super().attention(q, kv_cache, meta, scale, window, softcap)
        return _cpu.paged_attention(q, kv_cache[0], kv_cache[1], meta.block_tables,
                                    meta.seq_lens, scale, self.act,
                                    None if meta.is_decode_only else meta.query_start_loc)
