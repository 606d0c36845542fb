"""Laser's hot-path kernels: Triton on CUDA, a PyTorch reference everywhere else.

Each op lives in ``kernels/<op>.py`` (its math in the docstring, ``<op>_reference`` in plain
PyTorch, and the public ``<op>()`` that dispatches, see :mod:`kernels.dispatch`); its Triton
kernel and launcher live in ``kernels/_triton/<op>.py``, imported only on first use so that
importing ``kernels`` never imports Triton. No Django here.
"""

from __future__ import annotations

from kernels.activation import silu_and_mul
from kernels.cpu_allocator import tune_cpu_allocator
from kernels.decode_attention import block_index, paged_decode_attention
from kernels.dispatch import backend, use_native, use_triton
from kernels.kv_cache import write_kv
from kernels.linear import (
                            Q8,
                            QUANT,
                            QUANT_MODES,
                            bf16_matmul_supported,
                            linear,
                            pack_linear_weight,
                            pack_quant_weight,
                            quant_supported,
)
from kernels.prefill_attention import paged_prefill_attention
from kernels.rms_norm import rms_norm
from kernels.rotary import build_cos_sin_cache, rotary_embedding

__all__ = [
    "Q8",
    "QUANT",
    "QUANT_MODES",
    "backend",
    "bf16_matmul_supported",
    "block_index",
    "build_cos_sin_cache",
    "linear",
    "pack_linear_weight",
    "pack_quant_weight",
    "paged_decode_attention",
    "paged_prefill_attention",
    "quant_supported",
    "rms_norm",
    "rotary_embedding",
    "silu_and_mul",
    "tune_cpu_allocator",
    "use_native",
    "use_triton",
    "write_kv",
]
