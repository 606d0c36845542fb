"""Rotary position embedding (Hugging Face Llama "rotate_half" / neox convention), in place.

For a head vector ``x`` of size ``D`` at position ``p``, with ``c = cos(p * f)`` and
``s = sin(p * f)`` for the ``D / 2`` frequencies ``f``::

    x1, x2 = x[:D/2], x[D/2:]
    x      = [x1 * c - x2 * s,  x2 * c + x1 * s]

``cos_sin_cache[p]`` holds ``[c | s]`` (``[max_positions, D]``), built by
:func:`build_cos_sin_cache`; the rotary dimension is the whole head.
"""

from __future__ import annotations

import math

import torch

from kernels.dispatch import use_triton


def _llama3_inv_freq(inv_freq: torch.Tensor, scaling: dict) -> torch.Tensor:
    # Llama 3.1: long wavelengths are slowed by `factor`, short ones kept, the band between
    # interpolated smoothly (same rule as Hugging Face's "llama3" rope type).
    factor = float(scaling["factor"])
    low = float(scaling.get("low_freq_factor", 1.0))
    high = float(scaling.get("high_freq_factor", 4.0))
    old_len = float(scaling["original_max_position_embeddings"])
    wavelen = 2 * math.pi / inv_freq
    smooth = ((old_len / wavelen - low) / (high - low)).clamp(0.0, 1.0)
    interpolated = (1 - smooth) * inv_freq / factor + smooth * inv_freq
    out = torch.where(wavelen > old_len / low, inv_freq / factor, interpolated)
    return torch.where(wavelen < old_len / high, inv_freq, out)


def build_cos_sin_cache(
    head_dim: int,
    max_positions: int,
    theta: float,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float32,
    scaling: dict | None = None,
) -> torch.Tensor:
    """The ``[max_positions, head_dim]`` table ``[cos | sin]`` for :func:`rotary_embedding`.

    ``scaling`` is a Hugging Face ``rope_scaling`` dict: ``None``, ``rope_type`` "default",
    "linear" (positions divided by ``factor``), "llama3", or "freq_factors": each frequency
    divided by its entry of ``factors`` (``head_dim / 2`` of them: llama.cpp's
    ``rope_freqs.weight``, which its converter writes for Llama 3.1+ in place of "llama3").
    """
    if head_dim % 2:
        raise ValueError(f"rotary head_dim {head_dim} is odd")
    exponents = torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim
    inv_freq = 1.0 / (theta**exponents)  # [head_dim / 2], float32 as in Hugging Face
    spec = scaling or {}
    kind = spec.get("rope_type", spec.get("type", "default"))
    if kind == "linear":
        inv_freq = inv_freq / float(spec["factor"])
    elif kind == "llama3":
        inv_freq = _llama3_inv_freq(inv_freq, spec)
    elif kind == "freq_factors":
        factors = torch.tensor(spec["factors"], dtype=torch.float32)
        if factors.shape != inv_freq.shape:
            raise ValueError(f"{factors.numel()} rope frequency factors for {head_dim // 2} "
                             "frequencies")
        inv_freq = inv_freq / factors
    elif kind != "default":
        raise NotImplementedError(f"rope scaling type {kind!r}")
    freqs = torch.outer(torch.arange(max_positions, dtype=torch.float32), inv_freq)
    return torch.cat((freqs.cos(), freqs.sin()), dim=-1).to(device=device, dtype=dtype)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> None:
    half = x.shape[-1] // 2
    xf = x.float()
    x1, x2 = xf[..., :half], xf[..., half:]
    x.copy_(torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1))


def rotary_embedding_reference(
    positions: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    cos_sin_cache: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Plain PyTorch rotary; same contract as :func:`rotary_embedding`."""
    cos_sin = cos_sin_cache.index_select(0, positions).float().unsqueeze(1)  # [T, 1, D]
    half = cos_sin.shape[-1] // 2
    cos, sin = cos_sin[..., :half], cos_sin[..., half:]
    _rotate(q, cos, sin)
    _rotate(k, cos, sin)
    return q, k


def rotary_embedding(
    positions: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    cos_sin_cache: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotate ``q`` ``[T, H, D]`` and ``k`` ``[T, KVH, D]`` in place by ``positions`` ``[T]``
    (int64); returns ``(q, k)``."""
    if use_triton(q):
        from kernels._triton.rotary import rotary_embedding_triton

        return rotary_embedding_triton(positions, q, k, cos_sin_cache)
    return rotary_embedding_reference(positions, q, k, cos_sin_cache)
