"""A tiny Llama written as GGUF (Q/K permuted like llama.cpp) loads back to the same logits."""

from __future__ import annotations

import pytest
import torch
from gguf import GGMLQuantizationType as Q

from inference.loaders import load_model
from tests.inference.greedy import greedy
from tests.inference.loaders.gguf_writer import llama_cpp_permute, write_tiny_gguf
from tests.inference.model.tiny_llama import make_hf_llama

IDS = [5, 17, 33, 2, 60, 41, 8, 90, 12, 3, 77]


def hf_logits(hf, ids):
    with torch.no_grad():
        return hf(torch.tensor([ids])).logits[0]


def our_logits(loaded, ids):
    from inference.model import AttentionMetadata

    model = loaded.model
    caches = model.allocate_kv_caches(4, 16)
    meta = AttentionMetadata.build([[1, 3]], [len(ids)], [len(ids)], 16)
    with torch.inference_mode():
        hidden = model(torch.tensor(ids), torch.arange(len(ids)), caches, meta)
        return model.compute_logits(hidden)


@pytest.mark.parametrize("variant", ["untied_gqa", "tied_mha", "mistral_headdim"])
def test_f32_gguf_matches_hf_original(tmp_path, variant):
    hf = make_hf_llama(variant)
    path = tmp_path / "tiny.gguf"
    write_tiny_gguf(path, hf, Q.F32)
    loaded = load_model(path, cache_dir=tmp_path / "cache")
    assert loaded.config.tie_word_embeddings == hf.config.tie_word_embeddings
    assert loaded.config.head_dim == hf.config.head_dim
    want = hf_logits(hf, IDS)
    torch.testing.assert_close(our_logits(loaded, IDS), want, atol=1e-4, rtol=0)
    # Without the un-permute the logits would be far off: put llama.cpp's order back in Q.
    for layer in loaded.model.layers:
        q = layer.attn.qkv_weight[: loaded.config.q_size]
        q.copy_(torch.from_numpy(llama_cpp_permute(q.numpy().copy(), loaded.config.num_heads)))
    assert (our_logits(loaded, IDS) - want).abs().max().item() > 1e-3


def test_quantised_gguf_is_close(tmp_path):
    hf = make_hf_llama("untied_gqa")
    path = tmp_path / "q8.gguf"
    write_tiny_gguf(path, hf, Q.Q8_0)
    loaded = load_model(path, use_cache=False)
    want = hf_logits(hf, IDS)
    assert (our_logits(loaded, IDS) - want).abs().max().item() < 0.05 * want.abs().max().item()


def test_gguf_tokenizer_and_template(tmp_path):
    hf = make_hf_llama("tied_mha")
    path = tmp_path / "tok.gguf"
    write_tiny_gguf(path, hf, Q.F16)
    loaded = load_model(path, cache_dir=tmp_path / "cache")
    tok = loaded.tokenizer
    ids = tok.encode("hello world", add_special_tokens=False)
    assert [tok.id_to_token(i) for i in ids] == ["hello", "Ġworld"]
    assert tok.decode(ids) == "hello world"
    chat = loaded.encode_chat([{"role": "user", "content": "hi"}])
    assert chat[0] == 1 and tok.decode(chat, skip_special_tokens=False).endswith(
        "<|im_start|>assistant\n")
    assert 2 in loaded.stop_token_ids
    out = greedy(loaded.model, chat, 5, loaded.stop_token_ids)
    assert 1 <= len(out) <= 5
