"""Every supported architecture against transformers on the same weights: Laser float32 from
the safetensors folder and from a GGUF written as llama.cpp's converter writes it, logits at
every position of a chunked prefill and decode steps through the paged cache."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from inference.loaders import load_model
from inference.loaders.weights import build_model, fuse_hf_state_dict
from inference.model import AttentionMetadata
from tests.inference.model.tiny_gguf import write_arch_gguf
from tests.inference.model.tiny_models import ARCHS, PROBE, mean_entropy, save_tiny

BLOCK = 4
REL_TOL = 1e-3  # max |Δlogit| over the logits' largest magnitude
IDS = PROBE[:30]


@pytest.fixture(scope="module", params=sorted(ARCHS))
def tiny(request, tmp_path_factory):
    """(arch, HF folder, transformers model, its logits over IDS)."""
    arch = request.param
    path = tmp_path_factory.mktemp(arch)
    hf = save_tiny(arch, path)
    entropy = mean_entropy(hf)
    assert 1.0 <= entropy <= 4.0, entropy
    with torch.no_grad():
        want = hf(torch.tensor([IDS])).logits[0]
    return arch, path, hf, want


def laser_logits(model, ids=IDS, chunks=((0, 7), (7, 21)), table=(9, 2, 7, 0, 5, 11, 3, 8)):
    """Prefill ``ids`` in ``chunks`` on a scattered block table, then decode one at a time."""
    caches = model.allocate_kv_caches(num_blocks=12, block_size=BLOCK)
    bounds = list(chunks) + [(i, i + 1) for i in range(chunks[-1][1], len(ids))]
    out = []
    with torch.inference_mode():
        for a, b in bounds:
            meta = AttentionMetadata.build([list(table)], [b], [b - a], BLOCK)
            hidden = model(torch.tensor(ids[a:b]), torch.arange(a, b), caches, meta)
            out.append(model.compute_logits(hidden))
    return torch.cat(out)


def rel_diff(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got - want).abs().max() / want.abs().max())


def test_hf_folder_matches_transformers(tiny):
    arch, path, _, want = tiny
    loaded = load_model(path, use_cache=False)
    assert loaded.config.architecture == GGUF_NAMES.get(arch, arch)
    assert rel_diff(laser_logits(loaded.model), want) <= REL_TOL


def test_gguf_matches_transformers(tiny, tmp_path):
    arch, _, hf, want = tiny
    gguf = tmp_path / f"{arch}.gguf"
    write_arch_gguf(gguf, hf, arch)
    loaded = load_model(gguf, use_cache=False)
    assert rel_diff(laser_logits(loaded.model), want) <= REL_TOL


GGUF_NAMES = {"llama3": "llama", "llama3_tied": "llama"}
# per family, settings whose loss must show: (config field, value without it)
WITHOUT = {
    "gemma2": [("attn_softcap", None), ("final_softcap", None), ("sliding_layers", ())],
    "gemma3": [("rope_local_theta", None), ("sliding_layers", ()), ("rope_scaling", None)],
    "llama3": [("rope_scaling", None)],
}


def test_each_setting_matters(tiny):
    """Dropping a family's setting moves the logits far past the tolerance: the oracle sees it."""
    arch, path, _, want = tiny
    loaded = load_model(path, use_cache=False)
    state = dict(loaded.model.state_dict())
    for field, value in WITHOUT.get(arch, []):
        config = dataclasses.replace(loaded.config, **{field: value})
        model = build_model(dict(state), config)
        assert rel_diff(laser_logits(model), want) > 20 * REL_TOL, field


def test_fused_state_is_the_checkpoint(tiny):
    """The fused layout's norms carry the family's offset once (Gemma's 1 + w)."""
    arch, path, hf, _ = tiny
    loaded = load_model(path, use_cache=False)
    fused = fuse_hf_state_dict(hf.state_dict(), loaded.config)
    offset = loaded.config.spec.norm_offset
    torch.testing.assert_close(fused["norm"], hf.model.norm.weight.float() + offset)


@pytest.mark.parametrize("mode", ["quant", "bfloat16"])
def test_packed_matmuls_keep_each_family(tiny, mode):
    """Packed for the quantized matmul (Q8_0 of the float32 weights) or for bfloat16, every
    family stays near transformers: a layer that is not plain Llama must not run as the
    one-call C layer, which would drop its norms, window or caps."""
    import kernels

    _, path, _, want = tiny
    model = load_model(path, use_cache=False).model
    packed = model.pack_linears(kernels.MatmulMode(mode))
    if not packed or (mode == "quant" and not model.quantized):
        pytest.skip(f"the {mode} matmul does not serve here")
    assert rel_diff(laser_logits(model), want) <= 0.05


def test_reference_path_matches_transformers(tiny, monkeypatch):
    """The plain PyTorch ops (``LASER_KERNELS=reference``), beside the C kernels above."""
    from tests.kernels.backend import use_backend

    _, path, _, want = tiny
    model = load_model(path, use_cache=False).model
    use_backend(monkeypatch, "reference")
    assert rel_diff(laser_logits(model), want) <= REL_TOL


def test_multimodal_wrapper_loads_its_language_model(tiny, tmp_path):
    """Gemma 3 4B+ ship as Gemma3ForConditionalGeneration: the text config nested in
    `text_config`, the language model's tensors under `language_model.`, a vision tower
    beside them (not read)."""
    import json

    from safetensors.torch import save_file

    arch, _, hf, want = tiny
    if arch != "gemma3":
        pytest.skip("the wrapper is Gemma 3's")
    text = hf.config.to_dict()
    cfg = {"model_type": "gemma3", "text_config": text, "tie_word_embeddings": True,
           "eos_token_id": text["eos_token_id"]}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    tensors = {"language_model." + k: v.contiguous() for k, v in hf.state_dict().items()
               if k != "lm_head.weight"}
    tensors["vision_tower.patch_embedding.weight"] = torch.zeros(4, 4)
    save_file(tensors, str(tmp_path / "model.safetensors"))
    loaded = load_model(tmp_path, use_cache=False)
    assert loaded.config.architecture == "gemma3"
    assert rel_diff(laser_logits(loaded.model), want) <= REL_TOL
