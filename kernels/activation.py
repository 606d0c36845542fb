"""SiLU-and-multiply for the SwiGLU MLP.

Math, for ``x = [gate | up]`` (``[num_tokens, 2 * d]``)::

    out = silu(gate) * up = gate / (1 + exp(-gate)) * up        # [num_tokens, d]

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
