"""Triton SiLU-and-mul and tanh-GELU-and-mul; math in :mod:`kernels.activation`."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels._triton.common import check_rows


@triton.jit
def _silu_and_mul_kernel(
    x_ptr, out_ptr, x_stride, out_stride, d,
    BLOCK_SIZE: tl.constexpr, GELU: tl.constexpr,
):
    """``out[r, c] = act(x[r, c]) * x[r, d + c]`` in float32, one (row, column tile) each;
    ``act`` is SiLU, or tanh-GELU with ``GELU``."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = cols < d
    gate = tl.load(x_ptr + row * x_stride + cols, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(x_ptr + row * x_stride + d + cols, mask=mask, other=0.0).to(tl.float32)
    if GELU:
        # tanh(z) = 2 sigmoid(2 z) - 1, so 0.5 (1 + tanh(z)) = sigmoid(2 z)
        inner = 0.7978845608028654 * (gate + 0.044715 * gate * gate * gate)
        out = gate * tl.sigmoid(2.0 * inner) * up
    else:
        out = gate * tl.sigmoid(gate) * up
    tl.store(out_ptr + row * out_stride + cols, out.to(out_ptr.dtype.element_ty), mask=mask)


def silu_and_mul_triton(x: torch.Tensor, gelu: bool = False) -> torch.Tensor:
    """Launch :func:`_silu_and_mul_kernel`; same contract as :func:`kernels.silu_and_mul`
    (``gelu``: :func:`kernels.activation.gelu_and_mul`'s)."""
    check_rows("silu_and_mul x", x, 2)
    num_rows, d = x.shape[0], x.shape[1] // 2
    out = torch.empty((num_rows, d), dtype=x.dtype, device=x.device)
    block = 1024
    if num_rows and d:
        grid = (num_rows, triton.cdiv(d, block))
        _silu_and_mul_kernel[grid](x, out, x.stride(0), out.stride(0), d, BLOCK_SIZE=block,
                                   GELU=gelu, num_warps=4)
    return out


def gelu_and_mul_triton(x: torch.Tensor) -> torch.Tensor:
    """Tanh-GELU-and-mul (GeGLU) on :func:`_silu_and_mul_kernel`."""
    return silu_and_mul_triton(x, gelu=True)
