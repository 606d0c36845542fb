"""Our Llama forward equals transformers' on tiny random models, through the paged KV cache."""

from __future__ import annotations

import pytest
import torch

from inference.loaders.hf_loader import read_hf_config, read_hf_tensors
from inference.loaders.weights import build_model, fuse_hf_state_dict
from inference.model import AttentionMetadata, LlamaModel

BLOCK = 4
ATOL = 1e-4


def load_ours(path) -> LlamaModel:
    config = read_hf_config(path)
    return build_model(fuse_hf_state_dict(read_hf_tensors(path), config), config)


def run_chunk(model, caches, table, ids, start):
    """Feed `ids` at positions start.. for one sequence; return logits `[len(ids), vocab]`."""
    n = len(ids)
    meta = AttentionMetadata.build([table], [start + n], [n], BLOCK)
    hidden = model(torch.tensor(ids), torch.arange(start, start + n), caches, meta)
    return model.compute_logits(hidden)


def hf_logits(hf, ids):
    with torch.no_grad():
        return hf(torch.tensor([ids])).logits[0]


@torch.inference_mode()
def test_prefill_then_decode_matches_transformers(hf_dir):
    path, hf = hf_dir
    model = load_ours(path)
    ids = torch.randint(3, 97, (13,), generator=torch.Generator().manual_seed(1)).tolist()
    caches = model.allocate_kv_caches(num_blocks=12, block_size=BLOCK)
    table = [7, 2, 9, 0, 5]  # scattered on purpose
    prompt, rest = ids[:9], ids[9:]
    torch.testing.assert_close(run_chunk(model, caches, table, prompt, 0), hf_logits(hf, prompt),
                               atol=ATOL, rtol=0)
    for i, tok in enumerate(rest):
        got = run_chunk(model, caches, table, [tok], len(prompt) + i)[-1]
        want = hf_logits(hf, ids[:len(prompt) + i + 1])[-1]
        torch.testing.assert_close(got, want, atol=ATOL, rtol=0)


@torch.inference_mode()
def test_chunked_prefill_and_cache_reuse_match_one_shot(hf_dir):
    """Chunks, and a second sequence reading blocks a first one wrote (prefix hit / resume)."""
    path, hf = hf_dir
    model = load_ours(path)
    ids = torch.randint(3, 97, (14,), generator=torch.Generator().manual_seed(2)).tolist()
    want = hf_logits(hf, ids)
    caches = model.allocate_kv_caches(num_blocks=10, block_size=BLOCK)
    table = [3, 1, 8, 4]
    got = torch.cat([run_chunk(model, caches, table, ids[a:b], a)
                     for a, b in ((0, 3), (3, 8), (8, 14))])
    torch.testing.assert_close(got, want, atol=ATOL, rtol=0)
    # A new sequence shares the first two full blocks (8 tokens) and computes only the rest.
    shared = [3, 1, 6, 2]
    got_tail = run_chunk(model, caches, shared, ids[8:], 8)
    torch.testing.assert_close(got_tail, want[8:], atol=ATOL, rtol=0)


@torch.inference_mode()
def test_mixed_batch_equals_each_alone(hf_dir):
    """A prefill chunk and two decodes in one flat batch give each sequence's own logits."""
    path, hf = hf_dir
    model = load_ours(path)
    gen = torch.Generator().manual_seed(3)
    seqs = [torch.randint(3, 97, (n,), generator=gen).tolist() for n in (6, 5, 9)]
    caches = model.allocate_kv_caches(num_blocks=16, block_size=BLOCK)
    tables = [[0, 1], [2, 3], [4, 5, 6]]
    # Prime sequences 0 and 1 with all but their last token.
    for s, t in zip(seqs[:2], tables[:2]):
        run_chunk(model, caches, t, s[:-1], 0)
    q_lens = [1, 1, len(seqs[2])]
    meta = AttentionMetadata.build(tables, [len(s) for s in seqs], q_lens, BLOCK)
    ids = [seqs[0][-1], seqs[1][-1], *seqs[2]]
    pos = [len(seqs[0]) - 1, len(seqs[1]) - 1, *range(len(seqs[2]))]
    logits = model.compute_logits(model(torch.tensor(ids), torch.tensor(pos), caches, meta))
    torch.testing.assert_close(logits[0], hf_logits(hf, seqs[0])[-1], atol=ATOL, rtol=0)
    torch.testing.assert_close(logits[1], hf_logits(hf, seqs[1])[-1], atol=ATOL, rtol=0)
    torch.testing.assert_close(logits[2:], hf_logits(hf, seqs[2]), atol=ATOL, rtol=0)


def test_kv_sizes(hf_dir):
    path, _ = hf_dir
    config = read_hf_config(path)
    with torch.device("meta"):
        model = LlamaModel(config)
    assert model.kv_cache_shape(5, 16) == (5, 16, config.num_kv_heads, config.head_dim)
    per_block = model.kv_bytes_per_block(16, torch.float32)
    assert per_block == 2 * config.num_layers * 16 * config.num_kv_heads * config.head_dim * 4


@pytest.mark.parametrize("bad", [{"num_kv_heads": 3}, {"head_dim": 7}, {"vocab_size": 0},
                                 {"architecture": "gpt2"}])
def test_config_invariants(bad):
    from inference.model import ModelConfig

    base = {"vocab_size": 10, "hidden_size": 8, "intermediate_size": 16, "num_layers": 1,
            "num_heads": 4, "num_kv_heads": 2, "head_dim": 2}
    with pytest.raises(ValueError):
        ModelConfig(**{**base, **bad})
