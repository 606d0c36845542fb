"""Read a llama.cpp GGUF file: config, dequantised tensors (HF names), the quantized tensors'
raw blocks (for the quantized matmul, ``kernels._cpu.quant``) and tokenizer metadata.

The block types the quantized matmul multiplies as stored (``RAW_TYPES``: Q4_0, Q4_1, Q5_0,
Q5_1, Q8_0, Q4_K, Q5_K, Q6_K, all a Q4_K_M/Q5_K_M/Q6_K/Q8_0 file holds) keep their raw blocks
beside the dequantised weights; Q2_K and Q3_K load dequantised (gguf-py's
``gguf.quants.dequantize``) and handed on as float32 like F16 tensors, the quantized matmul
then quantising them to Q8_0 itself."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from gguf import GGMLQuantizationType, GGUFReader
from gguf.quants import dequantize

from inference.model.config import ModelConfig

from .gguf_arch import ROPE_FREQS, config_from_metadata, gguf_arch, gguf_hf_name, layer_names
from .weights import WeightError

SUPPORTED_TYPES = frozenset({
    GGMLQuantizationType.F32, GGMLQuantizationType.F16, GGMLQuantizationType.BF16,
    GGMLQuantizationType.Q8_0, GGMLQuantizationType.Q4_0, GGMLQuantizationType.Q4_1,
    GGMLQuantizationType.Q5_0, GGMLQuantizationType.Q5_1, GGMLQuantizationType.Q2_K,
    GGMLQuantizationType.Q3_K, GGMLQuantizationType.Q4_K, GGMLQuantizationType.Q5_K,
    GGMLQuantizationType.Q6_K,
})

# Block formats the quantized matmul runs as stored (kernels/_cpu/laser_quant.c)
RAW_TYPES = frozenset({GGMLQuantizationType.Q8_0, GGMLQuantizationType.Q4_0,
                       GGMLQuantizationType.Q4_1, GGMLQuantizationType.Q5_0,
                       GGMLQuantizationType.Q5_1, GGMLQuantizationType.Q4_K,
                       GGMLQuantizationType.Q5_K, GGMLQuantizationType.Q6_K})


@dataclass(slots=True)
class GGUFContents:
    config: ModelConfig
    tensors: dict[str, torch.Tensor]  # HF names, float32, Q/K rows back in HF order
    metadata: dict[str, Any]          # every key/value field (tokenizer.*, general.*, ...)
    # HF name -> (GGML type id, uint8 [rows, row bytes]) for the RAW_TYPES tensors: the same
    # weights as `tensors` before dequantisation, rows in the same (HF) order
    blocks: dict[str, tuple[int, torch.Tensor]] = dataclasses.field(default_factory=dict)


def unpermute_rotary(weight: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Undo llama.cpp's Q/K row permutation so HF's rotate_half rotary applies.

    `convert_hf_to_gguf.py` interleaves each head's two rotary halves (rows `[h, 2, D/2]` become
    `[h, D/2, 2]`) for GGML's adjacent-pair rope; this swaps them back.
    """
    rows = weight.shape[0]
    return (weight.reshape(n_heads, rows // n_heads // 2, 2, *weight.shape[1:])
            .transpose(1, 2).reshape(weight.shape))


def read_metadata(reader: GGUFReader) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, field in reader.fields.items():
        if key.startswith("GGUF."):
            continue
        value = field.contents()
        out[key] = value
    return out


def dequantize_tensor(data: np.ndarray, qtype: GGMLQuantizationType) -> torch.Tensor:
    """One GGUF tensor -> float32 torch tensor in row-major `[rows, cols]` order."""
    if qtype not in SUPPORTED_TYPES:
        raise WeightError(f"GGUF tensor type {qtype.name} is not supported")
    if qtype == GGMLQuantizationType.F32:
        return torch.from_numpy(np.array(data, dtype=np.float32))
    try:
        values = dequantize(data, qtype)
    except NotImplementedError as exc:
        raise WeightError(f"GGUF tensor type {qtype.name} needs a newer gguf package "
                          "(its gguf.quants.dequantize lacks it)") from exc
    return torch.from_numpy(np.ascontiguousarray(values, dtype=np.float32))


def rope_freq_factors(factors: torch.Tensor, config: ModelConfig) -> ModelConfig:
    """``config`` with llama.cpp's rope frequency divisors (Llama 3.1+'s ``rope_freqs``)
    applied, or as it is where they are all one."""
    if bool((factors == 1).all()):
        return config
    if config.rope_scaling is not None:
        raise WeightError(f"GGUF has both {ROPE_FREQS} and rope scaling "
                          f"{config.rope_scaling['rope_type']!r}")
    scaling = {"rope_type": "freq_factors", "factors": factors.flatten().tolist()}
    return dataclasses.replace(config, rope_scaling=scaling)


def read_gguf(path: str | Path) -> GGUFContents:
    """Dequantise every tensor of a GGUF to float32 under its HF name; keep the raw blocks of
    the block-quantized ones beside (``GGUFContents.blocks``)."""
    reader = GGUFReader(str(path))
    meta = read_metadata(reader)
    names = {t.name for t in reader.tensors}
    config, spec = config_from_metadata(meta, names), gguf_arch(meta)
    layers = layer_names(spec, names)
    tensors: dict[str, torch.Tensor] = {}
    blocks: dict[str, tuple[int, torch.Tensor]] = {}
    for t in reader.tensors:
        if t.name == ROPE_FREQS:
            config = rope_freq_factors(dequantize_tensor(t.data, t.tensor_type), config)
        name = gguf_hf_name(t.name, layers)
        if name is None:
            continue
        weight = dequantize_tensor(t.data, t.tensor_type)
        if spec.norm_offset and name.endswith("norm.weight"):
            weight = weight - spec.norm_offset  # the converter stored Gemma's 1 + w
        raw = None
        if t.tensor_type in RAW_TYPES and weight.dim() == 2:
            raw = torch.from_numpy(np.array(t.data, dtype=np.uint8).reshape(weight.shape[0], -1))
        heads = 0 if not spec.gguf_qk_permuted else (
            config.num_heads if name.endswith(("q_proj.weight", "q_proj.bias")) else
            config.num_kv_heads if name.endswith(("k_proj.weight", "k_proj.bias")) else 0)
        if heads:  # rows are whole (blocks run along a row): the raw rows permute alike
            weight = unpermute_rotary(weight, heads)
            raw = None if raw is None else unpermute_rotary(raw, heads).contiguous()
        tensors[name] = weight
        if raw is not None:
            blocks[name] = (int(t.tensor_type), raw)
    return GGUFContents(config=config, tensors=tensors, metadata=meta, blocks=blocks)
