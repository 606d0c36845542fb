"""Read a llama.cpp GGUF file: config, dequantised tensors (HF names), the quantized tensors'
raw blocks (for the quantized matmul, ``kernels._cpu.quant``) and tokenizer metadata.

Q5_0, Q5_1 and the K-quants (Q2_K..Q6_K, what Q4_K_M/Q5_K_M/Q6_K files hold) are dequantised
at load with gguf-py's ``gguf.quants.dequantize`` and handed on as float32 like F16 tensors:
the quantized matmul then quantises them itself. They are not multiplied as stored yet (only
``RAW_TYPES`` are)."""

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

from .weights import WeightError

SUPPORTED_TYPES = frozenset({
    GGMLQuantizationType.F32, GGMLQuantizationType.F16, GGMLQuantizationType.BF16,
    GGMLQuantizationType.Q8_0, GGMLQuantizationType.Q4_0, GGMLQuantizationType.Q4_1,
    GGMLQuantizationType.Q5_0, GGMLQuantizationType.Q5_1, GGMLQuantizationType.Q2_K,
    GGMLQuantizationType.Q3_K, GGMLQuantizationType.Q4_K, GGMLQuantizationType.Q5_K,
    GGMLQuantizationType.Q6_K,
})

# GGUF tensor name (after "blk.N.") -> HF name (after "model.layers.N.")
_LAYER_NAMES = {
    "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_q.bias": "self_attn.q_proj.bias",
    "attn_k.bias": "self_attn.k_proj.bias",
    "attn_v.bias": "self_attn.v_proj.bias",
    "attn_output.weight": "self_attn.o_proj.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}
_GLOBAL_NAMES = {"token_embd.weight": "model.embed_tokens.weight",
                 "output_norm.weight": "model.norm.weight", "output.weight": "lm_head.weight"}
# Block formats the quantized matmul runs as stored (kernels/_cpu/laser_quant.c)
RAW_TYPES = frozenset({GGMLQuantizationType.Q8_0, GGMLQuantizationType.Q4_0,
                       GGMLQuantizationType.Q4_1})
# Llama 3.1+ rope factors (they divide the rotary frequencies): not applied here, so a file
# with factors other than 1 is refused (``check_rope_freqs``) rather than loaded wrong.
ROPE_FREQS = "rope_freqs.weight"
_IGNORED = (ROPE_FREQS,)


@dataclass(slots=True)
class GGUFContents:
    config: ModelConfig
    tensors: dict[str, torch.Tensor]  # HF names, float32, Q/K rows back in HF order
    metadata: dict[str, Any]          # every key/value field (tokenizer.*, general.*, ...)
    # HF name -> (GGML type id, uint8 [rows, row bytes]) for the RAW_TYPES tensors: the same
    # weights as `tensors` before dequantisation, rows in the same (HF) order
    blocks: dict[str, tuple[int, torch.Tensor]] = dataclasses.field(default_factory=dict)


def gguf_hf_name(name: str) -> str | None:
    """Map a GGUF tensor name to its HF name (None for tensors the model ignores)."""
    if name in _GLOBAL_NAMES:
        return _GLOBAL_NAMES[name]
    if name in _IGNORED:
        return None
    parts = name.split(".", 2)
    if len(parts) == 3 and parts[0] == "blk" and parts[2] in _LAYER_NAMES:
        return f"model.layers.{parts[1]}.{_LAYER_NAMES[parts[2]]}"
    raise WeightError(f"unknown GGUF tensor {name!r}")


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


def config_from_metadata(meta: dict[str, Any], tensor_names: set[str]) -> ModelConfig:
    """Build `ModelConfig` from llama.cpp metadata keys (`{arch}.block_count`, ...)."""
    arch = meta.get("general.architecture", "llama")
    if arch not in ("llama", "mistral"):
        raise WeightError(f"GGUF architecture {arch!r} is not a Llama-family model")

    def key(name: str, default: Any = None) -> Any:
        value = meta.get(f"{arch}.{name}", default)
        if value is None:
            raise WeightError(f"GGUF metadata lacks {arch}.{name}")
        return value

    heads = int(key("attention.head_count"))
    hidden = int(key("embedding_length"))
    vocab = meta.get(f"{arch}.vocab_size") or len(meta.get("tokenizer.ggml.tokens", ()))
    scaling = None
    if meta.get(f"{arch}.rope.scaling.type") not in (None, "none"):
        scaling = {"rope_type": meta[f"{arch}.rope.scaling.type"],
                   "factor": float(meta.get(f"{arch}.rope.scaling.factor", 1.0))}
    eos = meta.get("tokenizer.ggml.eos_token_id")
    return ModelConfig(
        vocab_size=int(vocab),
        hidden_size=hidden,
        intermediate_size=int(key("feed_forward_length")),
        num_layers=int(key("block_count")),
        num_heads=heads,
        num_kv_heads=int(key("attention.head_count_kv", heads)),
        head_dim=int(key("attention.key_length", hidden // heads)),
        # GGUF stores eps as float32 (9.99999975e-06); round back to the decimal it came from.
        rms_norm_eps=float(f'{float(key("attention.layer_norm_rms_epsilon", 1e-5)):.6g}'),
        rope_theta=float(key("rope.freq_base", 10000.0)),
        rope_scaling=scaling,
        max_position=int(key("context_length", 2048)),
        tie_word_embeddings="output.weight" not in tensor_names,
        attention_bias="blk.0.attn_q.bias" in tensor_names,
        bos_token_id=meta.get("tokenizer.ggml.bos_token_id"),
        eos_token_ids=() if eos is None else (int(eos),),
        architecture=arch,
    )


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


def check_rope_freqs(factors: torch.Tensor) -> None:
    """Refuse rope factors the rotary embedding would not apply (all ones change nothing)."""
    if not bool((factors == 1).all()):
        raise WeightError(f"GGUF tensor {ROPE_FREQS} (Llama 3.1+ rope factors) is not "
                          "supported yet: the model would load with the wrong rotary embedding")


def read_gguf(path: str | Path) -> GGUFContents:
    """Dequantise every tensor of a GGUF to float32 under its HF name; keep the raw blocks of
    the block-quantized ones beside (``GGUFContents.blocks``)."""
    reader = GGUFReader(str(path))
    meta = read_metadata(reader)
    config = config_from_metadata(meta, {t.name for t in reader.tensors})
    tensors: dict[str, torch.Tensor] = {}
    blocks: dict[str, tuple[int, torch.Tensor]] = {}
    for t in reader.tensors:
        if t.name == ROPE_FREQS:
            check_rope_freqs(dequantize_tensor(t.data, t.tensor_type))
        name = gguf_hf_name(t.name)
        if name is None:
            continue
        weight = dequantize_tensor(t.data, t.tensor_type)
        raw = None
        if t.tensor_type in RAW_TYPES and weight.dim() == 2:
            raw = torch.from_numpy(np.array(t.data, dtype=np.uint8).reshape(weight.shape[0], -1))
        heads = (config.num_heads if name.endswith(("q_proj.weight", "q_proj.bias")) else
                 config.num_kv_heads if name.endswith(("k_proj.weight", "k_proj.bias")) else 0)
        if heads:  # rows are whole (blocks run along a row): the raw rows permute alike
            weight = unpermute_rotary(weight, heads)
            raw = None if raw is None else unpermute_rotary(raw, heads).contiguous()
        tensors[name] = weight
        if raw is not None:
            blocks[name] = (int(t.tensor_type), raw)
    return GGUFContents(config=config, tensors=tensors, metadata=meta, blocks=blocks)
