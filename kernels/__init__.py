"""Laser's hot-path kernels: Triton on CUDA, a PyTorch reference everywhere else.

Each op lives in ``kernels/<op>.py`` (its math in the docstring, ``<op>_reference`` in plain
PyTorch, and the public ``<op>()`` that dispatches, see :mod:`kernels.dispatch`); its Triton
kernel and launcher live in ``kernels/_triton/<op>.py``, imported only on first use so that
importing ``kernels`` never imports Triton. No Django here.

What runs is chosen once per load and recorded in one :class:`KernelTable`
(:mod:`kernels.choice`, :mod:`kernels.table`: under ``auto`` a side per step kind and row band,
calibrated at load; the ``LASER_KERNELS`` backend is read once, :mod:`kernels.dispatch`).
A model reaches the kernels through one backend per layer, chosen once when its weights are
packed (:func:`pack_model`, :mod:`kernels.backends`): it asks that backend, each step, for the
op set to run the layer on (:mod:`kernels.layer_ops`: these ops, or the C kernels of
``kernels/_cpu``) or for the whole layer, or the whole stack, as one C call.
"""

from __future__ import annotations

from kernels.activation import silu_and_mul
from kernels.argmax import argmax
from kernels.backends import LayerBackend, LayerShape, Packing, final_norm, unpacked
from kernels.choice import (
    Backend,
    Band,
    Crossover,
    MatmulMode,
    Side,
    SideRule,
    StepKind,
    resolve_matmul_mode,
)
from kernels.cpu_allocator import tune_cpu_allocator, zeros_in_huge_pages
from kernels.decode_attention import block_index, paged_decode_attention
from kernels.dispatch import backend, use_native, use_triton
from kernels.kv_cache import write_kv
from kernels.layer_ops import DOWN, GATE_UP, O_PROJ, QKV, CpuOps, TorchOps
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
from kernels.packing import LayerParams, pack_model
from kernels.prefill_attention import paged_prefill_attention
from kernels.rms_norm import rms_norm
from kernels.rotary import build_cos_sin_cache, rotary_embedding
from kernels.table import KernelTable, SideTable, calibrate_sides

__all__ = [
    "argmax",
    "Backend",
    "Band",
    "Crossover",
    "KernelTable",
    "MatmulMode",
    "Side",
    "SideRule",
    "SideTable",
    "StepKind",
    "calibrate_sides",
    "resolve_matmul_mode",
    "DOWN",
    "GATE_UP",
    "O_PROJ",
    "Q8",
    "QKV",
    "QUANT",
    "QUANT_MODES",
    "CpuOps",
    "LayerBackend",
    "LayerParams",
    "LayerShape",
    "Packing",
    "TorchOps",
    "backend",
    "bf16_matmul_supported",
    "block_index",
    "build_cos_sin_cache",
    "final_norm",
    "linear",
    "pack_linear_weight",
    "pack_model",
    "pack_quant_weight",
    "paged_decode_attention",
    "paged_prefill_attention",
    "quant_supported",
    "rms_norm",
    "rotary_embedding",
    "silu_and_mul",
    "tune_cpu_allocator",
    "zeros_in_huge_pages",
    "unpacked",
    "use_native",
    "use_triton",
    "write_kv",
]
