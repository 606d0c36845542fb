"""The gated MLP's activation-and-multiply: SiLU (SwiGLU) and tanh-GELU (GeGLU, Gemma).

Math, for ``x = [gate | up]`` (``[num_tokens, 2 * d]``)::

    silu_and_mul:  out = silu(gate) * up = gate / (1 + exp(-gate)) * up        # [num_tokens, d]
    gelu_and_mul:  out = 0.5 * gate * (1 + tanh(sqrt(2 / pi) * (gate + 0.044715 gate^3))) * up

computed in float32, stored in ``x.dtype``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from kernels.dispatch import use_triton


def silu_and_mul_reference(x: torch.Tensor) -> torch.Tensor:
    """Plain PyTorch SiLU-and-mul; same contract as :func:`silu_and_mul`."""
    d = x.shape[-1] // 2
    if x.dtype == torch.float32:
        return F.silu(x[..., :d]) * x[..., d:]
    xf = x.float()
    return (F.silu(xf[..., :d]) * xf[..., d:]).to(x.dtype)


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    """``silu(gate) * up`` for ``x`` = ``[num_tokens, 2 * d]`` = [gate | up]; returns a new
    ``[num_tokens, d]`` tensor."""
    if x.shape[-1] % 2:
        raise ValueError(f"silu_and_mul: last dim {x.shape[-1]} is odd")
    if use_triton(x):
        from kernels._triton.activation import silu_and_mul_triton

        return silu_and_mul_triton(x)
    return silu_and_mul_reference(x)


def gelu_and_mul_reference(x: torch.Tensor) -> torch.Tensor:
    """Plain PyTorch tanh-GELU-and-mul; same contract as :func:`gelu_and_mul`."""
    d = x.shape[-1] // 2
    xf = x.float()
    out = F.gelu(xf[..., :d], approximate="tanh") * xf[..., d:]
    return out if out.dtype == x.dtype else out.to(x.dtype)


def gelu_and_mul(x: torch.Tensor) -> torch.Tensor:
    """``gelu_tanh(gate) * up`` for ``x`` = ``[num_tokens, 2 * d]`` = [gate | up] (GeGLU);
    returns a new ``[num_tokens, d]`` tensor."""
    if x.shape[-1] % 2:
        raise ValueError(f"gelu_and_mul: last dim {x.shape[-1]} is odd")
    if use_triton(x):
        from kernels._triton.activation import gelu_and_mul_triton

        return gelu_and_mul_triton(x)
    return gelu_and_mul_reference(x)


def gate_and_mul(x: torch.Tensor, activation: str) -> torch.Tensor:
    """The gated MLP's ``activation`` (``silu`` or ``gelu_tanh``) of ``x`` = [gate | up]."""
    return silu_and_mul(x) if activation == "silu" else gelu_and_mul(x)
