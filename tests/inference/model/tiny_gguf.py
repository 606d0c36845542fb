"""Write a tiny transformers model of any supported architecture as a GGUF, the way llama.cpp's
``convert_hf_to_gguf.py`` does (test helper beside ``tiny_models``; reusable by scripts).

What the converter changes, done here too: the ``llama`` family's q/k rows interleaved per
head, Gemma's norm weights stored as ``1 + w``, Phi-3's fused projections under ``attn_qkv`` and
``ffn_up``, Gemma's ``lm_head`` dropped (tied), Llama 3's rope scaling written as
``rope_freqs.weight`` divisors, Gemma 3's local rotary base as ``rope.freq_base_swa`` (its
global layers' linear scaling as ``rope.scaling.*``, which llama.cpp leaves off the local
layers).
"""

from __future__ import annotations

import math

import numpy as np
from gguf import GGML_QUANT_SIZES, GGUFWriter, RopeScalingType
from gguf import GGMLQuantizationType as Q

from tests.inference.loaders.gguf_writer import add_array, add_tiny_tokenizer, llama_cpp_permute

GGUF_ARCH = {"llama3": "llama", "llama3_tied": "llama", "mistral": "llama", "qwen2": "qwen2",
             "qwen3": "qwen3", "gemma2": "gemma2", "gemma3": "gemma3", "phi3": "phi3"}
_GEMMA = ("gemma2", "gemma3")


def stored_type(qtype: Q, shape: tuple[int, ...]) -> Q:
    """The type a tensor of ``shape`` is written in: vectors in float32; a matrix whose rows
    do not split into ``qtype``'s blocks falls back to Q8_0 (as llama-quantize does), else
    float16."""
    if len(shape) == 1:
        return Q.F32
    for candidate in (qtype, Q.Q8_0, Q.F16):
        if shape[-1] % GGML_QUANT_SIZES[candidate][0] == 0:
            return candidate
    return Q.F32


def llama3_rope_factors(cfg) -> np.ndarray:
    """The converter's ``rope_freqs``: each frequency's divisor under Llama 3's rule."""
    rope = cfg.rope_parameters
    dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    factor, low, high = rope["factor"], rope["low_freq_factor"], rope["high_freq_factor"]
    old = rope["original_max_position_embeddings"]
    out = []
    for i in range(0, dim, 2):
        wavelen = 2 * math.pi * rope["rope_theta"] ** (i / dim)
        if wavelen < old / high:
            out.append(1.0)
        elif wavelen > old / low:
            out.append(factor)
        else:
            smooth = (old / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


def _layer_tensors(sd: dict, i: int, arch: str, heads: int, kv_heads: int) -> dict:
    """GGUF name -> array for layer ``i``."""
    p = f"model.layers.{i}."
    names = {"attn_norm": "input_layernorm", "attn_output": "self_attn.o_proj",
             "ffn_down": "mlp.down_proj"}
    if arch in _GEMMA:
        names.update(post_attention_norm="post_attention_layernorm",
                     ffn_norm="pre_feedforward_layernorm",
                     post_ffw_norm="post_feedforward_layernorm")
    else:
        names["ffn_norm"] = "post_attention_layernorm"
    if arch == "phi3":
        names.update(attn_qkv="self_attn.qkv_proj", ffn_up="mlp.gate_up_proj")
    else:
        names.update(attn_q="self_attn.q_proj", attn_k="self_attn.k_proj",
                     attn_v="self_attn.v_proj", ffn_gate="mlp.gate_proj", ffn_up="mlp.up_proj")
    if arch in ("qwen3", "gemma3"):
        names.update(attn_q_norm="self_attn.q_norm", attn_k_norm="self_attn.k_norm")
    out = {}
    for gg, hf in names.items():
        for kind in ("weight", "bias"):
            if f"{p}{hf}.{kind}" in sd:
                out[f"blk.{i}.{gg}.{kind}"] = sd[f"{p}{hf}.{kind}"]
    if GGUF_ARCH[arch] == "llama":
        for gg, n in (("attn_q", heads), ("attn_k", kv_heads)):
            out[f"blk.{i}.{gg}.weight"] = llama_cpp_permute(out[f"blk.{i}.{gg}.weight"], n)
    return out


def _metadata(w: GGUFWriter, cfg, arch: str) -> None:
    heads = cfg.num_attention_heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
    rope = cfg.rope_parameters
    # not "phi3" in the name: llama.cpp then marks Phi-3's special tokens by their text
    # (<s>, </s>, <unk>), which the tiny vocabulary lacks
    w.add_name(f"tiny-{arch.replace('phi3', 'phi')}")
    w.add_block_count(cfg.num_hidden_layers)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_rope_dimension_count(head_dim)
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_vocab_size(cfg.vocab_size)
    w.add_rope_freq_base(rope.get("full_attention", rope)["rope_theta"])
    if arch == "gemma3":
        w.add_rope_freq_base_swa(rope["sliding_attention"]["rope_theta"])
        if rope["full_attention"].get("rope_type") == "linear":  # the global layers' only
            w.add_rope_scaling_type(RopeScalingType.LINEAR)
            w.add_rope_scaling_factor(rope["full_attention"]["factor"])
    if arch in _GEMMA:
        w.add_sliding_window(cfg.sliding_window)
        if cfg.attn_logit_softcapping:
            w.add_attn_logit_softcapping(cfg.attn_logit_softcapping)
        if cfg.final_logit_softcapping:
            w.add_final_logit_softcapping(cfg.final_logit_softcapping)


def write_arch_gguf(path, hf_model, arch: str, qtype: Q = Q.F32,
                    with_tokenizer: bool = True) -> None:
    """``hf_model`` (``tiny_models.make_tiny(arch)``) -> GGUF at ``path``; matrices in
    ``qtype`` where their rows split into its blocks (``stored_type``), vectors (norms,
    biases, rope factors) in float32."""
    cfg = hf_model.config
    sd = {k: v.detach().float().numpy() for k, v in hf_model.state_dict().items()}
    tensors = {"token_embd.weight": sd["model.embed_tokens.weight"],
               "output_norm.weight": sd["model.norm.weight"]}
    if not cfg.tie_word_embeddings:
        tensors["output.weight"] = sd["lm_head.weight"]
    if cfg.rope_parameters.get("rope_type") == "llama3":
        tensors["rope_freqs.weight"] = llama3_rope_factors(cfg)
    for i in range(cfg.num_hidden_layers):
        tensors.update(_layer_tensors(sd, i, arch, cfg.num_attention_heads,
                                      cfg.num_key_value_heads))
    w = GGUFWriter(str(path), GGUF_ARCH[arch])
    _metadata(w, cfg, arch)
    if with_tokenizer:
        add_tiny_tokenizer(w, cfg.vocab_size)
    for name, array in tensors.items():
        if arch in _GEMMA and name.endswith("norm.weight"):
            array = array + 1
        add_array(w, name, array, stored_type(qtype, array.shape))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
