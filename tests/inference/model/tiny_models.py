"""Tiny random-weight models of every supported architecture, built with `transformers`
(test helper, reusable by scripts: no network, no downloads).

``make_tiny(arch)`` builds a float32 ``*ForCausalLM`` (hidden 256, so K-quants apply to every
matrix) whose random init is scaled so that next-token distributions are neither flat nor
peaked: the final norm is rescaled until the mean entropy over ``PROBE`` is ``TARGET_ENTROPY``
nats (``mean_entropy`` checks it). ``save_tiny(arch, directory)`` writes it as a Hugging Face
safetensors folder; ``tests.inference.model.tiny_gguf.write_arch_gguf`` writes the same weights
as a GGUF the way llama.cpp's converter does.

As a script: ``python -m tests.inference.model.tiny_models OUT_DIR [ARCH ...]`` writes
``OUT_DIR/<arch>/`` (HF folder) and ``OUT_DIR/<arch>.f32.gguf`` for each (all by default).
"""

from __future__ import annotations

import functools
import math
import sys
from pathlib import Path
from typing import Any

import torch

VOCAB, HIDDEN, INTERMEDIATE = 256, 256, 512
TARGET_ENTROPY = 2.5  # nats; the oracle tests accept 1-4
PROBE = torch.randint(3, VOCAB, (48,), generator=torch.Generator().manual_seed(7)).tolist()

_COMMON = {"vocab_size": VOCAB, "hidden_size": HIDDEN, "intermediate_size": INTERMEDIATE,
           "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
           "max_position_embeddings": 512, "rms_norm_eps": 1e-6, "bos_token_id": 1,
           "eos_token_id": 2, "pad_token_id": 0, "initializer_range": 0.06}
# name: (transformers config class, model class, overrides); Gemma's small caps and window
# make each of them change the logits on a few dozen tokens
ARCHS: dict[str, tuple[str, str, dict[str, Any]]] = {
    "llama3": ("LlamaConfig", "LlamaForCausalLM", {
        "tie_word_embeddings": False, "rope_theta": 500000.0,
        "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": 64}}),
    "llama3_tied": ("LlamaConfig", "LlamaForCausalLM", {
        "tie_word_embeddings": True, "rope_theta": 500000.0,
        "rope_scaling": {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": 64}}),
    "mistral": ("MistralConfig", "MistralForCausalLM", {
        "num_key_value_heads": 1, "head_dim": 48, "rope_theta": 1e6, "sliding_window": None,
        "tie_word_embeddings": False}),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", {"tie_word_embeddings": True,
                                                   "rope_theta": 1e6}),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", {"num_attention_heads": 8, "head_dim": 48,
                                                   "tie_word_embeddings": True}),
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM", {
        "head_dim": 64, "query_pre_attn_scalar": 64, "sliding_window": 6,
        "attn_logit_softcapping": 4.0, "final_logit_softcapping": 15.0,
        "tie_word_embeddings": True}),
    "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM", {
        "num_hidden_layers": 6, "head_dim": 64, "query_pre_attn_scalar": 64,
        "sliding_window": 6, "final_logit_softcapping": None, "attn_logit_softcapping": None,
        "rope_parameters": {"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                            "full_attention": {"rope_type": "linear", "factor": 8.0,
                                               "rope_theta": 1e6}},
        "tie_word_embeddings": True}),
    "phi3": ("Phi3Config", "Phi3ForCausalLM", {"num_key_value_heads": 4,
                                               "tie_word_embeddings": False}),
}
_OFFSET_NORMS = ("gemma2", "gemma3")  # norms stored as w, applied as 1 + w


def mean_entropy(model, ids: list[int] = PROBE) -> float:
    """Mean next-token entropy (nats) of ``model`` over ``ids``."""
    with torch.no_grad():
        logp = model(torch.tensor([ids])).logits[0].float().log_softmax(-1)
    return float(-(logp.exp() * logp).sum(-1).mean())


def _randomise(model, arch: str) -> None:
    """Random norms (so a wrong or missing norm cannot hide behind all-ones) and biases."""
    offset = arch in _OFFSET_NORMS
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.uniform_(-0.4, 0.4) if offset else p.uniform_(0.6, 1.4)
            elif name.endswith(".bias"):
                p.normal_(0.0, 0.1)


def _scale_final_norm(model, arch: str, factor: float) -> None:
    weight = model.model.norm.weight
    with torch.no_grad():
        if arch in _OFFSET_NORMS:
            weight.copy_((1 + weight) * factor - 1)
        else:
            weight.mul_(factor)


def _calibrate(model, arch: str) -> None:
    """Rescale the final norm (the logits' scale) until the mean entropy is TARGET_ENTROPY:
    bisection on the log of the factor (entropy falls as the logits grow)."""
    lo, hi = math.log(1 / 32), math.log(32)
    base = model.model.norm.weight.detach().clone()
    for _ in range(20):
        mid = (lo + hi) / 2
        with torch.no_grad():
            model.model.norm.weight.copy_(base)
        _scale_final_norm(model, arch, math.exp(mid))
        entropy = mean_entropy(model)
        if abs(entropy - TARGET_ENTROPY) < 0.1:
            return
        lo, hi = (mid, hi) if entropy > TARGET_ENTROPY else (lo, mid)
    raise RuntimeError(f"{arch}: could not reach a mean entropy of {TARGET_ENTROPY}")


def make_tiny(arch: str, seed: int = 0, **overrides: Any):
    """A float32 eval-mode transformers model of ``arch`` (a key of ``ARCHS``) with random,
    calibrated weights; ``overrides`` change its config."""
    import transformers

    config_cls, model_cls, extra = ARCHS[arch]
    torch.manual_seed(seed)
    config = getattr(transformers, config_cls)(**{**_COMMON, **extra, **overrides})
    model = getattr(transformers, model_cls)(config).float().eval()
    _randomise(model, arch)
    _calibrate(model, arch)
    return model


@functools.cache
def shared_tiny(arch: str):
    """``make_tiny(arch)``, built once per process: read it, never change it (copy first)."""
    return make_tiny(arch)


def save_tiny(arch: str, directory: str | Path, seed: int = 0, **overrides: Any):
    """``make_tiny`` saved as a safetensors folder at ``directory``; returns the model (the
    shared one, ``shared_tiny``, without ``seed`` or ``overrides``)."""
    model = make_tiny(arch, seed, **overrides) if seed or overrides else shared_tiny(arch)
    model.save_pretrained(directory, safe_serialization=True)
    return model


def main(argv: list[str]) -> None:
    from tests.inference.model.tiny_gguf import write_arch_gguf

    out = Path(argv[0])
    for arch in argv[1:] or sorted(ARCHS):
        model = save_tiny(arch, out / arch)
        write_arch_gguf(out / f"{arch}.f32.gguf", model, arch)
        print(f"{arch}: {out / arch}, {out / arch}.f32.gguf, entropy "
              f"{mean_entropy(model):.2f} nats")


if __name__ == "__main__":
    main(sys.argv[1:])
