"""`load_model` on Hugging Face directories: shards, tokenizer files, cache behaviour."""

from __future__ import annotations

import json
import os

import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers

from inference.loaders import WeightError, load_model
from tests.inference.loaders.gguf_writer import MERGES, SPECIALS, TEMPLATE, tiny_vocab
from tests.inference.model.tiny_llama import make_hf_llama

IDS = [4, 9, 22, 61, 3, 15, 88]


def write_tokenizer_files(path, vocab_size):
    tokens = tiny_vocab(vocab_size)
    tok = Tokenizer(models.BPE({t: i for i, t in enumerate(tokens)},
                               [tuple(m.split(" ")) for m in MERGES]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(SPECIALS)
    tok.save(str(path / "tokenizer.json"))
    (path / "tokenizer_config.json").write_text(json.dumps(
        {"bos_token": {"content": "<|im_start|>"}, "eos_token": "<|endoftext|>",
         "chat_template": TEMPLATE}))
    (path / "generation_config.json").write_text(json.dumps({"eos_token_id": [0, 2]}))


@pytest.fixture
def sharded_dir(tmp_path):
    hf = make_hf_llama("untied_gqa")
    path = tmp_path / "ckpt"
    hf.save_pretrained(path, safe_serialization=True, max_shard_size="20KB")
    write_tokenizer_files(path, hf.config.vocab_size)
    return path, hf


def logits(loaded, ids):
    from inference.model import AttentionMetadata

    caches = loaded.model.allocate_kv_caches(2, 8)
    meta = AttentionMetadata.build([[1]], [len(ids)], [len(ids)], 8)
    with torch.inference_mode():
        return loaded.model.compute_logits(
            loaded.model(torch.tensor(ids), torch.arange(len(ids)), caches, meta))


def test_sharded_dir_with_tokenizer(sharded_dir, tmp_path):
    path, hf = sharded_dir
    assert (path / "model.safetensors.index.json").is_file()
    loaded = load_model(path, cache_dir=tmp_path / "cache")
    with torch.no_grad():
        want = hf(torch.tensor([IDS])).logits[0]
    torch.testing.assert_close(logits(loaded, IDS), want, atol=1e-4, rtol=0)
    assert {0, 2} <= loaded.stop_token_ids
    assert loaded.tokenizer.bos_token == "<|im_start|>"
    prompt = loaded.chat_template.render([{"role": "user", "content": "hello"}])
    assert prompt == "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n"


def test_second_load_comes_from_cache_and_is_identical(sharded_dir, tmp_path):
    path, _ = sharded_dir
    first = load_model(path, cache_dir=tmp_path / "cache")
    second = load_model(path, cache_dir=tmp_path / "cache")
    assert not first.from_cache and second.from_cache
    assert second.tokenizer.encode("hello world") == first.tokenizer.encode("hello world")
    for (name, a), (_, b) in zip(first.model.state_dict().items(),
                                 second.model.state_dict().items()):
        assert torch.equal(a, b), name
    # Touching a source file invalidates the entry.
    shard = sorted(path.glob("*.safetensors"))[0]
    os.utime(shard, ns=(shard.stat().st_atime_ns, shard.stat().st_mtime_ns + 10**9))
    assert not load_model(path, cache_dir=tmp_path / "cache").from_cache


def test_bfloat16_dtype(sharded_dir):
    path, _ = sharded_dir
    loaded = load_model(path, dtype=torch.bfloat16, use_cache=False)
    assert loaded.model.embed_tokens.dtype == torch.bfloat16
    assert torch.isfinite(logits(loaded, IDS).float()).all()


def test_missing_pieces_raise(tmp_path):
    with pytest.raises(WeightError):
        load_model(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(WeightError, match="config.json"):
        load_model(tmp_path / "empty", use_cache=False)
    hf = make_hf_llama("tied_mha")
    hf.save_pretrained(tmp_path / "broken", safe_serialization=True)
    cfg = json.loads((tmp_path / "broken" / "config.json").read_text())
    cfg["intermediate_size"] += 1
    (tmp_path / "broken" / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(WeightError, match="gate_up"):
        load_model(tmp_path / "broken", use_cache=False)
