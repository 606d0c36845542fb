"""Linear layers: ``out = x @ weight.T (+ bias)``, on CPU through oneDNN with prepacked weights.

Why: a decode step multiplies a few rows by every weight matrix. ``F.linear`` on CPU goes to
a GEMM that re-packs the weight on every call; oneDNN can keep the weight in its blocked layout
once and for all. Measured on the development CPU (``bench/cpu_linear.py``, 1 thread, float32,
busy machine): 1.8-3.3x faster for SmolLM2's gate-up, down and LM-head shapes at 7-64 rows,
about even at 1 and 300 rows, and slower (0.5-0.9x) for the small 576 x 576 O projection at some
row counts; a whole 16-sequence decode step took 1.6x less CPU time. Results equal
``F.linear`` up to float32 summation order.

The engine packs a model's weights once (``LlamaModel.pack_linears``); each call then passes
the packed copy beside the plain weight, and ``linear`` falls back to ``F.linear`` wherever no
packed copy exists (CUDA, float16, a PyTorch without oneDNN, ``LASER_KERNELS=reference``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from kernels.dispatch import backend


def _onednn_ok(weight: torch.Tensor) -> bool:
    if weight.device.type != "cpu" or backend() == "reference":
        return False
    if not torch.backends.mkldnn.is_available():
        return False
    if weight.dtype == torch.bfloat16:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    return weight.dtype == torch.float32


def pack_linear_weight(weight: torch.Tensor) -> torch.Tensor | None:
    """A oneDNN-packed copy of ``weight`` ``[out_features, in_features]``, or None where
    packing does not apply (then :func:`linear` uses ``F.linear``)."""
    if weight.dim() != 2 or not _onednn_ok(weight):
        return None
    try:
        return torch.ops.mkldnn._reorder_linear_weight(weight.detach().contiguous(), None)
    except RuntimeError:  # an unusual build or shape: the plain path still works
        return None


def linear(x: torch.Tensor, weight: torch.Tensor, packed: torch.Tensor | None = None,
           bias: torch.Tensor | None = None) -> torch.Tensor:
    """``x`` ``[num_tokens, in]`` times ``weight`` ``[out, in]`` transposed (+ ``bias``).

    ``packed`` is ``pack_linear_weight(weight)`` (or None); the result is the same either way.
    """
    if packed is not None and x.device.type == "cpu" and x.dtype == weight.dtype:
        return torch.ops.mkldnn._linear_pointwise(x.contiguous(), packed, bias, "none", [], "")
    return F.linear(x, weight, bias)
