"""Linear layers: ``out = x @ weight.T (+ bias)``, on CPU through oneDNN with prepacked weights.

Why: a decode step multiplies a few rows by every weight matrix. ``F.linear`` on CPU goes to
a GEMM that re-packs the weight on every call; oneDNN can keep the weight in its blocked layout
once and for all (``bench/cpu_linear.py`` measures the gain per shape and row count). Results
equal ``F.linear`` up to float32 summation order.

The engine packs a model's weights once (``LlamaModel.pack_linears``); each call then passes
the packed copy beside the plain weight, and ``linear`` falls back to ``F.linear`` wherever no
packed copy exists (CUDA, float16, a PyTorch without oneDNN, ``LASER_KERNELS=reference``).

Quantized (``QUANT``, ``Q8``): a weight kept in its GGUF blocks (Q4_0, Q4_1, Q8_0), or quantised
to Q8_0 where it has none, multiplies activations quantised per block to int8
(``kernels._cpu.quant``): a third of bfloat16's bytes for SmolLM2's Q4_1 projections.

Mixed precision (opt-in): a float32 weight may be packed as bfloat16. ``linear`` then rounds the
float32 input to bfloat16, multiplies on the CPU's bfloat16 units (AMX or AVX512-BF16) with
float32 accumulation and returns the product (which oneDNN rounds to bfloat16) as float32: half
the weight bytes per call and the faster units, while everything between the matmuls (norms,
residual stream, attention, KV cache) stays float32.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from kernels import _cpu
from kernels._cpu import quant
from kernels.choice import Backend, MatmulMode
from kernels.dispatch import backend, use_native

QUANT = MatmulMode.QUANT  # the GGUF's quantized blocks, two-part activations (one in the
# decode steps' gate-up projection: kernels.packing.QUANT_DECODE_SPLIT)
Q8 = MatmulMode.Q8  # the same with one int8 part in decode steps (llama.cpp's arithmetic):
# faster in large batches, but it changed 4 of bench/cpu_precision.py's 8 answers
QUANT_MODES = (QUANT, Q8)


class RowSplitQuant:
    """A quantized weight for a long prompt chunk's step (``kernels.packing``): rows
    ``[0, one_rows)`` (the step's decode rows) multiply on ``decode`` (the decode steps' split,
    so their bits do not depend on the prompt beside them), the prompt rows after them on
    ``prompt`` (one int8 part, as llama.cpp quantises its activations)."""

    __slots__ = ("decode", "prompt")
    dtype = torch.float32

    def __init__(self, decode: quant.PackedQuant, prompt: quant.PackedQuant) -> None:
        self.decode, self.prompt = decode, prompt

    @property
    def in_features(self) -> int:
        return self.prompt.in_features

    @property
    def out_features(self) -> int:
        return self.prompt.out_features

    def gemm(self, x: torch.Tensor, one_rows: int) -> torch.Tensor:
        if not one_rows:
            return quant.gemm_q(x, self.prompt, torch.float32)
        return torch.cat([quant.gemm_q(x[:one_rows], self.decode, torch.float32),
                          quant.gemm_q(x[one_rows:], self.prompt, torch.float32)])


# a projection's packed copy: oneDNN's (a tensor), Laser's bfloat16 or quantized one, or none
Pack = torch.Tensor | _cpu.PackedBF16 | quant.PackedQuant | RowSplitQuant | None


def quant_supported() -> bool:
    """Whether the quantized matmul serves here (the C kernels with AVX2 or better)."""
    return quant.supported()


def pack_quant_weight(weight: torch.Tensor,
                      blocks: tuple[int, torch.Tensor] | None = None) -> quant.PackedQuant:
    """``weight`` ``[out, in]`` for the quantized matmul: its GGUF ``blocks`` (GGML type, raw
    rows) as stored where given, else the float32 weight quantised to Q8_0."""
    n, k = weight.shape
    if blocks is None:
        blocks = (quant.Q8_0, quant.quantize_q8_0(weight.detach().float().contiguous()))
    return quant.pack_q(blocks[1], blocks[0], n, k)


def _onednn_ok(device: torch.device, dtype: torch.dtype) -> bool:
    if device.type != "cpu" or backend() is Backend.REFERENCE:
        return False
    if not torch.backends.mkldnn.is_available():
        return False
    if dtype == torch.bfloat16:
        return bf16_matmul_supported()
    return dtype == torch.float32


def bf16_matmul_supported() -> bool:
    """Whether oneDNN has native bfloat16 matmuls on this CPU (AVX512-BF16 or AMX)."""
    return bool(torch.backends.mkldnn.is_available()
                and torch.ops.mkldnn._is_mkldnn_bf16_supported())


def pack_linear_weight(weight: torch.Tensor, dtype: torch.dtype | None = None,
                       native: bool = False) -> torch.Tensor | _cpu.PackedBF16 | None:
    """A oneDNN-packed copy of ``weight`` ``[out_features, in_features]``, stored in ``dtype``
    (default: the weight's own), or None where packing does not apply (then :func:`linear`
    uses ``F.linear`` on the plain weight, in its own dtype).

    ``native`` with a bfloat16 ``dtype`` packs for Laser's own bfloat16 matmul
    (``kernels/_cpu``, AVX512-BF16 CPUs) instead, where it builds: the runner asks for it for
    the few rows of a decode step on one thread (``bench/cpu_linear.py --model``)."""
    dtype = dtype or weight.dtype
    if weight.dtype != dtype and not (weight.dtype, dtype) == (torch.float32, torch.bfloat16):
        raise ValueError(f"cannot pack a {weight.dtype} weight as {dtype}")  # on any CPU
    if (native and dtype == torch.bfloat16 and weight.dtype == torch.float32
            and weight.dim() == 2 and weight.shape[1] % 2 == 0 and use_native(weight)
            and _cpu.gemm_supported()):
        return _cpu.pack_bf16(weight.detach().contiguous())
    if weight.dim() != 2 or not _onednn_ok(weight.device, dtype):
        return None
    try:
        return torch.ops.mkldnn._reorder_linear_weight(
            weight.detach().to(dtype).contiguous(), None)
    except RuntimeError:  # an unusual build or shape: the plain path still works
        return None


def linear(x: torch.Tensor, weight: torch.Tensor, packed: torch.Tensor | None = None,
           bias: torch.Tensor | None = None, raw: bool = False,
           one_rows: int = 0) -> torch.Tensor:
    """``x`` ``[num_tokens, in]`` times ``weight`` ``[out, in]`` transposed (+ ``bias``).

    ``packed`` is ``pack_linear_weight(weight)`` (or None); the result is the same either way.
    A bfloat16 ``packed`` for a float32 ``x`` gives the mixed-precision product (module doc);
    ``raw`` returns that product (without a bias) as oneDNN gives it, in bfloat16, for a
    consumer that reads bfloat16 (the C kernels) instead of converting it to float32 here, and
    a bfloat16 ``packed`` also takes a bfloat16 ``x`` as it is. ``one_rows``: a quantized
    ``packed`` for prompt steps takes its first rows (the step's decode rows) as a decode
    step does (``quant.gemm_q``, :class:`RowSplitQuant`).
    """
    if isinstance(packed, quant.PackedQuant):
        out = quant.gemm_q(x, packed, torch.float32, one_rows=one_rows)
        return out if bias is None else out.add_(bias)
    if isinstance(packed, RowSplitQuant):
        out = packed.gemm(x, one_rows)
        return out if bias is None else out.add_(bias)
    if isinstance(packed, _cpu.PackedBF16):
        raw_out = raw and bias is None and not packed.split
        out = _cpu.gemm_bf16(x, packed, torch.bfloat16 if raw_out else torch.float32)
        return out if bias is None else out.add_(bias)
    if packed is not None and x.device.type == "cpu":
        if packed.dtype == weight.dtype:
            if x.dtype == packed.dtype:
                return torch.ops.mkldnn._linear_pointwise(x.contiguous(), packed, bias, "none",
                                                          [], "")
        elif packed.dtype == torch.bfloat16 and x.dtype in (torch.float32, torch.bfloat16):
            out = torch.ops.mkldnn._linear_pointwise(x.to(torch.bfloat16).contiguous(), packed,
                                                     None, "none", [], "")
            if raw and bias is None:
                return out
            return out.float() if bias is None else out.float().add_(bias)
    return F.linear(x if x.dtype == weight.dtype else x.to(weight.dtype), weight, bias)
