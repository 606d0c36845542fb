"""Triton fused RMSNorm (+ residual add); math in :mod:`kernels.rms_norm`."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels._triton.common import check_rows, check_same_device, next_pow2


@triton.jit
def _rms_norm_kernel(
    x_ptr, res_ptr, w_ptr, out_ptr, res_out_ptr,
    x_stride, res_stride, out_stride, res_out_stride,
    n_cols, eps,
    HAS_RESIDUAL: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
):
    """One row per program: ``h = x (+ res)``; ``out = h * rsqrt(mean(h^2) + eps) * w``."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    h = tl.load(x_ptr + row * x_stride + cols, mask=mask, other=0.0).to(tl.float32)
    if HAS_RESIDUAL:
        r = tl.load(res_ptr + row * res_stride + cols, mask=mask, other=0.0).to(tl.float32)
        h_out = (h + r).to(res_out_ptr.dtype.element_ty)
        tl.store(res_out_ptr + row * res_out_stride + cols, h_out, mask=mask)
        h = h_out.to(tl.float32)  # normalise the residual as stored, like the reference
    rstd = tl.rsqrt(tl.sum(h * h, axis=0) / n_cols + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * out_stride + cols, (h * rstd * w).to(out_ptr.dtype.element_ty),
             mask=mask)


def rms_norm_triton(
    x: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    residual: torch.Tensor | None = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Launch :func:`_rms_norm_kernel`; same contract as :func:`kernels.rms_norm`."""
    check_rows("rms_norm x", x, 2)
    num_rows, hidden = x.shape
    if weight.shape != (hidden,) or not weight.is_contiguous():
        raise ValueError(f"rms_norm: weight {tuple(weight.shape)} vs hidden {hidden}")
    out = torch.empty_like(x, memory_format=torch.contiguous_format)
    res_out = out  # unused placeholder pointer when there is no residual
    if residual is not None:
        check_rows("rms_norm residual", residual, 2)
        if residual.shape != x.shape:
            raise ValueError(f"rms_norm: residual {tuple(residual.shape)} vs x {tuple(x.shape)}")
        check_same_device(x, weight, residual)
        res_out = torch.empty_like(out)
    block = next_pow2(hidden)
    if num_rows:
        res = residual if residual is not None else x
        _rms_norm_kernel[(num_rows,)](
            x, res, weight, out, res_out,
            x.stride(0), res.stride(0), out.stride(0), res_out.stride(0),
            hidden, eps,
            HAS_RESIDUAL=residual is not None,
            BLOCK_SIZE=block,
            num_warps=min(max(block // 256, 1), 16),
        )
    return out if residual is None else (out, res_out)
