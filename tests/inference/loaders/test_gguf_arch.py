"""Architecture metadata of GGUF files and HF folders: families read as llama.cpp reads them,
unsupported ones refused by name."""

from __future__ import annotations

import json

import pytest
from gguf import GGUFWriter

from inference.loaders import WeightError, load_model
from inference.loaders.gguf_arch import config_from_metadata
from inference.loaders.hf_loader import read_hf_config


def gemma_meta(arch: str, **extra) -> dict:
    base = {"general.architecture": arch, f"{arch}.block_count": 6,
            f"{arch}.embedding_length": 256, f"{arch}.feed_forward_length": 512,
            f"{arch}.attention.head_count": 4, f"{arch}.attention.key_length": 64,
            f"{arch}.rope.freq_base": 1e6, f"{arch}.vocab_size": 100}
    return {**base, **{f"{arch}.{k}": v for k, v in extra.items()}}


def test_gemma3_defaults_follow_llama_cpp():
    config = config_from_metadata(gemma_meta("gemma3", **{"attention.sliding_window": 512}),
                                  set())
    assert config.sliding_layers == (0, 1, 2, 3, 4)  # 5 local : 1 global
    assert config.sliding_window == 512 and config.rope_local_theta == 10000.0
    assert config.attn_softcap is None and config.final_softcap is None
    assert config.tie_word_embeddings and config.attn_scale == 64 ** -0.5


def test_gemma2_defaults_and_explicit_pattern():
    config = config_from_metadata(gemma_meta("gemma2"), set())
    assert config.sliding_layers == (0, 2, 4) and config.sliding_window == 4096
    assert (config.attn_softcap, config.final_softcap) == (50.0, 30.0)
    assert config.rope_local_theta is None  # the global base
    flags = [True, False, False, True, True, False]
    config = config_from_metadata(
        gemma_meta("gemma2", **{"attention.sliding_window_pattern": flags,
                                "attention.sliding_window": 8}), set())
    assert config.sliding_layers == (0, 3, 4) and config.layer_window(3) == 8


def test_gemma3_without_window_slides_nowhere():
    config = config_from_metadata(gemma_meta("gemma3"), set())
    assert config.sliding_layers == () and config.layer_window(0) is None


def write_header_only(path, arch: str) -> None:
    w = GGUFWriter(str(path), arch)
    w.add_block_count(1)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@pytest.mark.parametrize("arch", ["falcon", "gpt2", "qwen2moe"])
def test_unsupported_gguf_architecture_is_named(tmp_path, arch):
    path = tmp_path / f"{arch}.gguf"
    write_header_only(path, arch)
    with pytest.raises(WeightError, match=f"GGUF architecture '{arch}' is not supported"):
        load_model(path, use_cache=False)


@pytest.mark.parametrize("model_type", ["gpt2", "mixtral", "phimoe"])
def test_unsupported_hf_architecture_is_named(tmp_path, model_type):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": model_type}))
    with pytest.raises(WeightError, match=f"architecture '{model_type}' is not supported"):
        read_hf_config(tmp_path)


@pytest.mark.parametrize("change,words", [
    ({"hidden_act": "gelu"}, "activation 'gelu'"),
    ({"partial_rotary_factor": 0.75}, "partial_rotary_factor"),
    ({"rope_scaling": {"rope_type": "longrope", "factor": 4.0}}, "'longrope'"),
])
def test_unsupported_settings_are_named(tmp_path, change, words):
    cfg = {"model_type": "phi3", "vocab_size": 10, "hidden_size": 8, "intermediate_size": 16,
           "num_hidden_layers": 1, "num_attention_heads": 2, **change}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(WeightError, match=words):
        read_hf_config(tmp_path)
