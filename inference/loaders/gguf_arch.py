"""A GGUF file's architecture: its metadata keys as a ``ModelConfig`` and its tensor names as
Hugging Face ones, per family (``inference.model.arch``), the way llama.cpp's converter and
loader read them.

What llama.cpp's converter changes, undone here so that a GGUF's tensors are the Hugging Face
checkpoint's: the ``llama`` family's q/k rows are interleaved per head
(``ArchSpec.gguf_qk_permuted``), Gemma's norm weights are stored with their ``+1``
(``ArchSpec.norm_offset``), Phi-3's fused gate/up is ``ffn_up``, and Llama 3.1+'s rope scaling
is a ``rope_freqs.weight`` tensor of frequency divisors (``ROPE_FREQS``).
"""

from __future__ import annotations

from typing import Any

from inference.model.arch import ARCHITECTURES, ArchSpec, UnsupportedArchitecture
from inference.model.config import ModelConfig

from .weights import WeightError

# GGUF tensor name (after "blk.N.") -> HF name (after "model.layers.N."), every family
_LAYER_NAMES = {
    "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_q.bias": "self_attn.q_proj.bias",
    "attn_k.bias": "self_attn.k_proj.bias",
    "attn_v.bias": "self_attn.v_proj.bias",
    "attn_qkv.weight": "self_attn.qkv_proj.weight",
    "attn_q_norm.weight": "self_attn.q_norm.weight",
    "attn_k_norm.weight": "self_attn.k_norm.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}
# ... where a family names them otherwise
_SANDWICH_NAMES = {"ffn_norm.weight": "pre_feedforward_layernorm.weight",
                   "post_attention_norm.weight": "post_attention_layernorm.weight",
                   "post_ffw_norm.weight": "post_feedforward_layernorm.weight"}
_FUSED_UP = {"ffn_up.weight": "mlp.gate_up_proj.weight"}  # Phi-3: gate and up in one
_GLOBAL_NAMES = {"token_embd.weight": "model.embed_tokens.weight",
                 "output_norm.weight": "model.norm.weight", "output.weight": "lm_head.weight"}
ROPE_FREQS = "rope_freqs.weight"
# Gemma 2/3 27B scale queries by hidden / heads, not head_dim (llama.cpp, gemma_pytorch)
_WIDE_QUERY_LAYERS = {"gemma2": 46, "gemma3": 62}


def gguf_arch(meta: dict[str, Any]) -> ArchSpec:
    """The family of a GGUF's ``general.architecture``; ``WeightError`` naming it otherwise."""
    name = str(meta.get("general.architecture", "llama"))
    if name not in ARCHITECTURES:
        raise WeightError(str(UnsupportedArchitecture(name, "GGUF")))
    return ARCHITECTURES[name]


def layer_names(spec: ArchSpec, tensor_names: set[str]) -> dict[str, str]:
    """The family's GGUF -> HF layer tensor names."""
    names = dict(_LAYER_NAMES)
    if spec.sandwich_norms:
        names.update(_SANDWICH_NAMES)
    if "blk.0.ffn_gate.weight" not in tensor_names:
        names.update(_FUSED_UP)
    return names


def gguf_hf_name(name: str, layers: dict[str, str] = _LAYER_NAMES) -> str | None:
    """Map a GGUF tensor name to its HF name (None for ``rope_freqs``, read apart)."""
    if name in _GLOBAL_NAMES:
        return _GLOBAL_NAMES[name]
    if name == ROPE_FREQS:
        return None
    parts = name.split(".", 2)
    if len(parts) == 3 and parts[0] == "blk" and parts[2] in layers:
        return f"model.layers.{parts[1]}.{layers[parts[2]]}"
    raise WeightError(f"unknown GGUF tensor {name!r}")


def config_from_metadata(meta: dict[str, Any], tensor_names: set[str]) -> ModelConfig:
    """Build `ModelConfig` from llama.cpp metadata keys (`{arch}.block_count`, ...)."""
    spec = gguf_arch(meta)
    arch = spec.name

    def key(name: str, default: Any = None) -> Any:
        value = meta.get(f"{arch}.{name}", default)
        if value is None:
            raise WeightError(f"GGUF metadata lacks {arch}.{name}")
        return value

    heads = int(key("attention.head_count"))
    hidden = int(key("embedding_length"))
    layers = int(key("block_count"))
    head_dim = int(key("attention.key_length", hidden // heads))
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
        num_layers=layers,
        num_heads=heads,
        num_kv_heads=int(key("attention.head_count_kv", heads)),
        head_dim=head_dim,
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
        query_scale=((hidden / heads) ** -0.5
                     if _WIDE_QUERY_LAYERS.get(arch) == layers else None),
        **_gemma_fields(meta, spec, layers),
    )


def _gemma_fields(meta: dict[str, Any], spec: ArchSpec, layers: int) -> dict[str, Any]:
    """Soft-caps, the sliding window, its layers and rotary base, with llama.cpp's defaults
    (Gemma 2: caps 50 and 30, window 4096; Gemma 3: local base 10000); the other families'
    windows are not applied (llama.cpp ignores Mistral's and Phi-3's)."""
    if not spec.sliding_every:
        return {}
    arch, gemma2 = spec.name, spec.name == "gemma2"
    window = meta.get(f"{arch}.attention.sliding_window", 4096 if gemma2 else None)
    pattern = meta.get(f"{arch}.attention.sliding_window_pattern", spec.sliding_every)
    if isinstance(pattern, list):  # one flag per layer: True slides
        sliding = tuple(i for i, flag in enumerate(pattern) if flag)
    else:
        sliding = tuple(i for i in range(layers) if int(pattern) and (i + 1) % int(pattern))
    local = meta.get(f"{arch}.rope.freq_base_swa", None if gemma2 else 10000.0)
    return {
        "attn_softcap": meta.get(f"{arch}.attn_logit_softcapping", 50.0 if gemma2 else None),
        "final_softcap": meta.get(f"{arch}.final_logit_softcapping", 30.0 if gemma2 else None),
        "sliding_window": int(window) if window and sliding else None,
        "sliding_layers": sliding if window else (),
        "rope_local_theta": None if local is None or not window else float(local),
    }
