"""Minimal greedy generation over `LlamaModel` with a private KV cache (test helper).

Not the engine: one sequence at a time, contiguous blocks, no scheduling. It exercises exactly
the forward the engine uses (paged cache, prefill then q_len-1 decode steps).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

import torch

from inference.model import AttentionMetadata, LlamaModel

BLOCK_SIZE = 16


@torch.inference_mode()
def greedy_stream(model: LlamaModel, prompt_ids: list[int], max_tokens: int,
                  stop_token_ids: Iterable[int] = (),
                  prefill_chunk: int = 512) -> Iterator[int]:
    """Yield up to `max_tokens` greedy token ids; stops after (and yields) a stop token."""
    if not prompt_ids:
        raise ValueError("prompt_ids must not be empty")
    stops = frozenset(stop_token_ids)
    total = len(prompt_ids) + max_tokens
    if total > model.config.max_position:
        raise ValueError(f"prompt + max_tokens = {total} exceeds the context "
                         f"({model.config.max_position})")
    num_blocks = -(-total // BLOCK_SIZE)
    caches = model.allocate_kv_caches(num_blocks, BLOCK_SIZE)
    table = [list(range(num_blocks))]
    device = model.embed_tokens.device

    def step(ids: list[int], start: int) -> torch.Tensor:
        n = len(ids)
        meta = AttentionMetadata.build(table, [start + n], [n], BLOCK_SIZE, device)
        hidden = model(torch.tensor(ids, device=device),
                       torch.arange(start, start + n, device=device), caches, meta)
        return model.compute_logits(hidden[-1:], exact=n > 1)[0]

    for a in range(0, len(prompt_ids), prefill_chunk):
        logits = step(prompt_ids[a:a + prefill_chunk], a)
    pos = len(prompt_ids)
    for _ in range(max_tokens):
        token = int(logits.argmax())
        yield token
        if token in stops:
            return
        logits = step([token], pos)
        pos += 1


def greedy(model: LlamaModel, prompt_ids: list[int], max_tokens: int,
           stop_token_ids: Iterable[int] = (),
           on_token: Callable[[int], None] | None = None) -> list[int]:
    """List form of `greedy_stream`."""
    out = []
    for token in greedy_stream(model, prompt_ids, max_tokens, stop_token_ids):
        out.append(token)
        if on_token is not None:
            on_token(token)
    return out
