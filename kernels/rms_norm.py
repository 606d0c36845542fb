"""Fused RMSNorm with optional residual add.

Math, per row of ``x`` (``[num_tokens, hidden]``)::

    h   = x + residual                      (only when a residual is given)
    out = h / sqrt(mean(h ** 2) + eps) * weight

accumulated in float32 and stored in ``x.dtype``. With a residual the call returns
``(out, h)``: ``h`` is the residual stream for the next layer.
"""

from __future__ import annotations

from typing import overload

import torch
import torch.nn.functional as F

from kernels.dispatch import use_triton


def _norm(h: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    if h.dtype == torch.float32 and weight.dtype == torch.float32:
        return F.rms_norm(h, (h.shape[-1],), weight, eps)
    out = F.rms_norm(h.float(), (h.shape[-1],), weight.float(), eps)
    return out.to(h.dtype)


def rms_norm_reference(
    x: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    residual: torch.Tensor | None = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Plain PyTorch RMSNorm; same contract as :func:`rms_norm`."""
    if residual is None:
        return _norm(x, weight, eps)
    h = x + residual
    return _norm(h, weight, eps), h


@overload
def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float,
             residual: None = None) -> torch.Tensor: ...


@overload
def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float,
             residual: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]: ...


def rms_norm(
    x: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    residual: torch.Tensor | None = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """RMSNorm of ``x`` ``[num_tokens, hidden]`` scaled by ``weight`` ``[hidden]``.

    Returns ``out``; with ``residual`` (same shape as ``x``) returns ``(out, x + residual)``.
    Inputs are not modified.
    """
    if use_triton(x):
        from kernels._triton.rms_norm import rms_norm_triton

        return rms_norm_triton(x, weight, eps, residual)
    return rms_norm_reference(x, weight, eps, residual)
