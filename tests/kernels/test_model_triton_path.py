"""End to end: a tiny Llama's logits through the Triton kernels (interpreter) equal the
reference path's, over a mixed prefill step and a decode step on a paged cache."""

from __future__ import annotations

import importlib

import pytest
import torch

from inference.model import AttentionMetadata, LlamaModel, ModelConfig
from tests.kernels.backend import use_backend
from tests.kernels.paged import rel_err

BLOCK_SIZE = 16
LAUNCHERS = {
    "activation": "silu_and_mul_triton",
    "decode_attention": "paged_decode_attention_triton",
    "kv_cache": "write_kv_triton",
    "prefill_attention": "paged_prefill_attention_triton",
    "rms_norm": "rms_norm_triton",
    "rotary": "rotary_embedding_triton",
}


def _spy_launchers(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Count calls of each Triton launcher (the public ops import them at call time)."""
    calls = dict.fromkeys(LAUNCHERS.values(), 0)
    for module_name, name in LAUNCHERS.items():
        module = importlib.import_module(f"kernels._triton.{module_name}")
        launch = getattr(module, name)

        def spy(*args, _launch=launch, _name=name, **kwargs):
            calls[_name] += 1
            return _launch(*args, **kwargs)

        monkeypatch.setattr(module, name, spy)
    return calls


def _tiny_model() -> LlamaModel:
    config = ModelConfig(vocab_size=96, hidden_size=48, intermediate_size=80, num_layers=2,
                         num_heads=3, num_kv_heads=1, head_dim=16, max_position=128)
    model = LlamaModel(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(1 + 0.1 * torch.randn_like(p) if "norm" in name else 0.2 * torch.randn_like(p))
    model.init_rotary("cpu")
    return model


def _run(model: LlamaModel, monkeypatch: pytest.MonkeyPatch, backend: str) -> torch.Tensor:
    """Prefill two prompts (one in two chunks, mixed with a 1-token prompt), then decode both."""
    use_backend(monkeypatch, backend)
    torch.manual_seed(1)
    caches = model.allocate_kv_caches(6, BLOCK_SIZE)
    tables = [[4, 1], [2, 5, 0]]
    prompt_a = torch.randint(0, 96, (21,))
    prompt_b = torch.randint(0, 96, (37,))
    steps = [  # (per-sequence new tokens, their first position)
        [(prompt_a[:13], 0), (prompt_b[:1], 0)],
        [(prompt_a[13:], 13), (prompt_b[1:], 1)],
        [(torch.tensor([7]), 21), (torch.tensor([9]), 37)],
    ]
    logits = []
    with torch.inference_mode():
        for step in steps:
            ids = torch.cat([tok for tok, _ in step])
            positions = torch.cat([torch.arange(p, p + len(tok)) for tok, p in step])
            meta = AttentionMetadata.build(
                tables, [p + len(tok) for tok, p in step], [len(tok) for tok, _ in step],
                BLOCK_SIZE,
            )
            hidden = model(ids, positions, caches, meta)
            logits.append(model.compute_logits(hidden))
    return torch.cat(logits)


@pytest.mark.slow
def test_triton_path_matches_reference_path(monkeypatch):
    model = _tiny_model()
    calls = _spy_launchers(monkeypatch)
    ref = _run(model, monkeypatch, "reference")
    assert not any(calls.values())
    out = _run(model, monkeypatch, "triton")
    assert all(calls.values()), calls  # every op really ran through Triton
    assert out.shape == (21 + 37 + 2, 96)
    assert rel_err(out, ref) <= 1e-5
