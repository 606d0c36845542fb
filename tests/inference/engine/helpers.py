"""Tiny engines for runtime tests: a random 2-layer Llama, a byte-level BPE, ChatML."""

from __future__ import annotations

from collections import defaultdict
from functools import lru_cache

import torch
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, models, pre_tokenizers, trainers

from inference.engine import EngineConfig, LLMEngine
from inference.loaders import LoadedModel
from inference.loaders.weights import build_model, expected_shapes
from inference.model import AttentionMetadata, ModelConfig
from inference.request import EngineRequest, SamplingParams
from inference.tokenizer import CHATML, ChatTemplate, Tokenizer

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CORPUS = ["hello world", "the quick brown fox jumps over the lazy dog", "stop here please",
          "one two three four five six seven eight nine ten", "STOP", "end of the line"]
BLOCK = 4


@lru_cache(maxsize=1)
def tiny_tokenizer() -> Tokenizer:
    backend = HFTokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    backend.train_from_iterator(CORPUS * 4, trainer)
    return Tokenizer(backend, bos_token=None, eos_token="<|endoftext|>")


@lru_cache(maxsize=3)
def tiny_loaded(seed: int = 0, max_position: int = 256) -> LoadedModel:
    """A random Llama (GQA, untied head) whose vocabulary is the tiny tokenizer's."""
    tok = tiny_tokenizer()
    config = ModelConfig(vocab_size=tok.vocab_size, hidden_size=64, intermediate_size=96,
                         num_layers=2, num_heads=4, num_kv_heads=2, head_dim=16,
                         max_position=max_position, eos_token_ids=(0,))
    gen = torch.Generator().manual_seed(seed)
    state = {}
    for name, shape in expected_shapes(config).items():
        if "norm" in name:
            state[name] = torch.rand(shape, generator=gen) + 0.5
        else:
            state[name] = torch.randn(shape, generator=gen) * (0.5 if "embed" in name else 0.15)
    model = build_model(state, config)
    return LoadedModel(model=model, config=config, tokenizer=tok,
                       chat_template=ChatTemplate(CHATML, eos_token="<|endoftext|>"),
                       source_name="tiny", stop_token_ids=tok.eos_token_ids)


def per_block_bytes() -> int:
    return tiny_loaded().model.kv_bytes_per_block(BLOCK, torch.float32)


def make_engine(num_blocks: int = 128, **config) -> LLMEngine:
    """An engine over the tiny model with exactly ``num_blocks`` KV blocks of ``BLOCK``."""
    config.setdefault("max_num_batched_tokens", 64)
    cfg = EngineConfig(block_size=BLOCK, kv_memory_mb=num_blocks * per_block_bytes() / 2**20,
                       num_threads=1, **config)
    engine = LLMEngine(cfg, loaded=tiny_loaded())
    assert engine.runner.num_blocks == num_blocks
    return engine


def request(rid: str, prompt: list[int] | str, max_tokens: int = 8, **sampling) -> EngineRequest:
    sampling.setdefault("temperature", 0.0)
    sampling.setdefault("ignore_eos", True)
    sp = SamplingParams(max_tokens=max_tokens, **sampling)
    if isinstance(prompt, str):
        return EngineRequest(rid, sp, prompt=prompt, tenant_id="t")
    return EngineRequest(rid, sp, prompt_token_ids=list(prompt), tenant_id="t")


def prompt_ids(length: int, offset: int = 0) -> list[int]:
    vocab = tiny_tokenizer().vocab_size
    return [3 + (offset + 7 * i) % (vocab - 3) for i in range(length)]


def capture_logits(engine: LLMEngine) -> dict[str, list[torch.Tensor]]:
    """Record every sampled logits row per sequence id (wraps ``runner.execute``)."""
    seen: dict[str, list[torch.Tensor]] = defaultdict(list)
    execute = engine.runner.execute

    def wrapped(batch):
        logits = execute(batch)
        for seq_id, row in zip(batch.sample_seq_ids, logits):
            seen[seq_id].append(row.clone())
        return logits

    engine.runner.execute = wrapped
    return seen


def run(engine: LLMEngine, max_steps: int = 2000, on_step=None, min_steps: int = 0) -> dict:
    """Step until idle; returns {request id: {choice index: (token ids, text, finish)}}."""
    out: dict = defaultdict(dict)
    for step in range(max_steps):
        if on_step is not None:
            on_step(step)
        if not engine.has_unfinished() and step >= min_steps:
            return out
        for d in engine.step():
            ids, text, _ = out[d.request_id].get(d.index, ((), "", None))
            out[d.request_id][d.index] = (ids + d.token_ids, text + d.text, d.finish_reason)
    raise AssertionError("engine did not drain")


@torch.inference_mode()
def dense_logits(tokens: list[int]) -> torch.Tensor:
    """Logits of every position of ``tokens`` in one prefill on a fresh cache: ``[L, vocab]``."""
    model = tiny_loaded().model
    n = len(tokens)
    blocks = -(-n // BLOCK)
    caches = model.allocate_kv_caches(blocks, BLOCK)
    meta = AttentionMetadata.build([list(range(blocks))], [n], [n], BLOCK)
    hidden = model(torch.tensor(tokens), torch.arange(n), caches, meta)
    return model.compute_logits(hidden)


def assert_matches_dense(prompt: list[int], output: tuple[int, ...], rows: list[torch.Tensor],
                         rtol: float = 1e-4) -> None:
    """Each sampled logits row equals the dense run's at the same position (relative to the
    row's largest magnitude)."""
    assert len(rows) == len(output), (len(rows), len(output))
    want = dense_logits(prompt + list(output[:-1]))[len(prompt) - 1:]
    got = torch.stack(rows)
    scale = want.abs().amax(dim=-1, keepdim=True)
    err = ((got - want).abs() / scale).max().item()
    assert err <= rtol, f"max relative logits error {err:.2e}"
