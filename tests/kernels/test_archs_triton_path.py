"""Every supported architecture through the Triton kernels (interpreter): the same logits as
the reference path, over a chunked prefill and decode steps on a paged cache."""

from __future__ import annotations

import importlib

import pytest
import torch

from inference.loaders import load_model
from tests.inference.model.test_archs_vs_hf import laser_logits
from tests.inference.model.tiny_models import ARCHS, PROBE, save_tiny
from tests.kernels.backend import use_backend
from tests.kernels.paged import rel_err

IDS = PROBE[:14]
CHUNKS = ((0, 5), (5, 10))  # then 4 decode steps
# the launchers only some families reach: they must really run where the family needs them
FAMILY_LAUNCHERS = {"gemma2": ("window_attention", "paged_window_attention_triton"),
                    "gemma3": ("activation", "gelu_and_mul_triton")}


# Gemma 3 in two layers, one of each kind, for the interpreter's sake
SHORTER = {"gemma3": {"num_hidden_layers": 2,
                      "layer_types": ["sliding_attention", "full_attention"]}}
FAST = ("gemma2", "qwen3")  # the window, caps, GeGLU and q/k norms; the rest is slow (~6 s each)


@pytest.mark.parametrize("arch", [a if a in FAST else pytest.param(a, marks=pytest.mark.slow)
                                  for a in sorted(ARCHS)])
def test_triton_path_matches_reference(arch, tmp_path, monkeypatch):
    save_tiny(arch, tmp_path, **SHORTER.get(arch, {}))
    model = load_model(tmp_path, use_cache=False).model
    use_backend(monkeypatch, "reference")
    want = laser_logits(model, IDS, CHUNKS)
    calls = []
    if arch in FAMILY_LAUNCHERS:
        module_name, name = FAMILY_LAUNCHERS[arch]
        module = importlib.import_module(f"kernels._triton.{module_name}")
        launch = getattr(module, name)
        monkeypatch.setattr(module, name, lambda *a, **k: calls.append(1) or launch(*a, **k))
    use_backend(monkeypatch, "triton", triton_interpret=True)
    got = laser_logits(model, IDS, CHUNKS)
    assert rel_err(got, want) <= 1e-5
    assert calls or arch not in FAMILY_LAUNCHERS
    assert torch.isfinite(got).all()
