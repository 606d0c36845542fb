"""Tiny random Llama models in Hugging Face form, made on the fly (test helper)."""

from __future__ import annotations

import torch

VARIANTS = {
    # name: LlamaConfig overrides
    "untied_gqa": {"num_attention_heads": 4, "num_key_value_heads": 2,
                   "tie_word_embeddings": False},
    "tied_mha": {"num_attention_heads": 4, "num_key_value_heads": 4, "tie_word_embeddings": True},
    "mistral_headdim": {"num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 24,
                        "rope_theta": 1e6, "tie_word_embeddings": False},
}


def make_hf_llama(variant: str, seed: int = 0):
    """A float32 `LlamaForCausalLM` with random weights (2 layers, hidden 64)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    kw = {"vocab_size": 97, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
          "max_position_embeddings": 256, "rms_norm_eps": 1e-5, "bos_token_id": 1,
          "eos_token_id": 2, **VARIANTS[variant]}
    model = LlamaForCausalLM(LlamaConfig(**kw)).float().eval()
    # Random norms so a wrong norm weight cannot hide behind all-ones.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.uniform_(0.5, 1.5)
    return model
