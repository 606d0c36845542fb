"""Batched token sampling over one step's sampling rows.

Penalties (presence, frequency over the sequence's output tokens) adjust the logits first; then
greedy rows take the argmax and the others go through temperature, top-k and top-p and draw by
inverse CDF. Each draw uses one uniform number derived from ``(seed, choice index, output
position)`` by a counter-based hash, so a seeded request samples the same tokens whatever shares
its batch and however often it was preempted (preemption recomputes KV, it never redraws).

Reported logprobs are the model's own distribution (log-softmax of the raw logits), as vLLM
reports them by default.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

import kernels
from inference.request import SamplingParams

_M64 = (1 << 64) - 1


def _mix64(x: int) -> int:
    """SplitMix64 finaliser: a bijective scramble of a 64-bit integer."""
    x = (x + 0x9E3779B97F4A7C15) & _M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


def draw_uniform(seed: int, index: int, position: int) -> float:
    """A uniform number in [0, 1) that depends only on its three arguments."""
    h = _mix64(_mix64(_mix64(seed & _M64) ^ index) ^ position)
    return (h >> 11) * 2.0**-53


@dataclass(frozen=True, slots=True)
class SamplingRow:
    """What the sampler needs to know about one sampling row.

    ``position`` is the index of the output token being drawn (0 for the first).
    """

    params: SamplingParams
    seed: int
    index: int
    position: int
    output_token_ids: tuple[int, ...] | list[int] = ()


@dataclass(slots=True)
class SamplerOutput:
    token_ids: list[int]
    logprobs: list[float] | None            # per row, when any row asked for logprobs
    top_logprobs: list[dict[int, float]] | None


class Sampler:
    """Stateless; ``sample`` takes float32 logits ``[N, vocab]`` and one ``SamplingRow`` each."""

    def sample(self, logits: torch.Tensor, rows: list[SamplingRow]) -> SamplerOutput:
        if logits.shape[0] != len(rows):
            raise ValueError(f"{logits.shape[0]} logit rows for {len(rows)} sampling rows")
        if not rows:
            return SamplerOutput([], None, None)
        raw = logits
        logits = _apply_penalties(logits, rows)
        chosen = kernels.argmax(logits)
        random_rows = [i for i, r in enumerate(rows) if not r.params.greedy]
        if random_rows:
            idx = torch.tensor(random_rows, dtype=torch.int64, device=logits.device)
            drawn = _sample_random(logits.index_select(0, idx), [rows[i] for i in random_rows])
            chosen = chosen.index_copy(0, idx, drawn)
        token_ids = chosen.tolist()
        logprobs, top = _logprobs(raw, chosen, rows)
        return SamplerOutput(token_ids, logprobs, top)


def _apply_penalties(logits: torch.Tensor, rows: list[SamplingRow]) -> torch.Tensor:
    """OpenAI semantics: ``logit -= presence * (count > 0) + frequency * count``."""
    pen = [i for i, r in enumerate(rows)
           if (r.params.presence_penalty or r.params.frequency_penalty) and r.output_token_ids]
    if not pen:
        return logits
    logits = logits.clone()
    vocab = logits.shape[1]
    for i in pen:  # per row, over that row's output tokens only: no per-token Python
        p = rows[i].params
        tokens = torch.as_tensor(list(rows[i].output_token_ids), dtype=torch.int64,
                                 device=logits.device)
        counts = torch.bincount(tokens, minlength=vocab)[:vocab].to(logits.dtype)
        logits[i] -= p.frequency_penalty * counts + p.presence_penalty * (counts > 0)
    return logits


def _sample_random(logits: torch.Tensor, rows: list[SamplingRow]) -> torch.Tensor:
    """Temperature, top-k, top-p, then an inverse-CDF draw per row. Returns ``[n]`` int64."""
    device = logits.device
    vocab = logits.shape[1]
    temps = torch.tensor([r.params.temperature for r in rows], device=device)
    logits = logits / temps[:, None]
    ks = [min(r.params.top_k, vocab) for r in rows]
    if any(ks):
        kmax = max(ks)
        top = logits.topk(kmax, dim=-1).values  # sorted, descending
        kth = torch.tensor([k - 1 if k else 0 for k in ks], device=device)
        thresh = top.gather(1, kth[:, None])
        thresh[torch.tensor([k == 0 for k in ks], device=device)] = float("-inf")
        logits = logits.masked_fill(logits < thresh, float("-inf"))
    ps = [r.params.top_p for r in rows]
    if any(p < 1.0 for p in ps):
        logits = _top_p(logits, ps)
    probs = torch.softmax(logits, dim=-1, dtype=torch.float64)
    cdf = probs.cumsum(dim=-1)
    u = torch.tensor([draw_uniform(r.seed, r.index, r.position) for r in rows],
                     dtype=torch.float64, device=device)
    target = u[:, None] * cdf[:, -1:]
    picked = torch.searchsorted(cdf, target, right=True).squeeze(1).clamp_(max=vocab - 1)
    # Rounding can push the target past the last non-zero mass; step back to a real token.
    bad = probs.gather(1, picked[:, None]).squeeze(1) == 0
    if bool(bad.any()):
        last_nonzero = vocab - 1 - (probs.flip(-1) > 0).to(torch.int8).argmax(-1)
        picked = torch.where(bad, last_nonzero, picked)
    return picked


def _top_p(logits: torch.Tensor, ps: list[float]) -> torch.Tensor:
    """Keep, per row, the smallest set of most likely tokens whose mass reaches ``top_p``."""
    need = [i for i, p in enumerate(ps) if p < 1.0]
    idx = torch.tensor(need, device=logits.device)
    sub = logits.index_select(0, idx)
    sorted_logits, order = sub.sort(dim=-1, descending=True)
    probs = torch.softmax(sorted_logits, dim=-1)
    before = probs.cumsum(dim=-1) - probs  # mass strictly above each token
    top_p = torch.tensor([ps[i] for i in need], device=logits.device)
    drop = before >= top_p[:, None]  # the first token always stays (before == 0)
    sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
    sub = torch.empty_like(sub).scatter_(1, order, sorted_logits)
    return logits.index_copy(0, idx, sub)


def _logprobs(raw: torch.Tensor, chosen: torch.Tensor, rows: list[SamplingRow]
              ) -> tuple[list[float] | None, list[dict[int, float]] | None]:
    want = [i for i, r in enumerate(rows) if r.params.logprobs]
    if not want:
        return None, None
    idx = torch.tensor(want, device=raw.device)
    lp = torch.log_softmax(raw.index_select(0, idx), dim=-1)
    picked = lp.gather(1, chosen.index_select(0, idx)[:, None]).squeeze(1).tolist()
    logprobs: list[float] = [0.0] * len(rows)
    top: list[dict[int, float]] = [{} for _ in rows]
    kmax = max(rows[i].params.top_logprobs for i in want)
    top_vals = top_ids = None
    if kmax:
        top_vals, top_ids = (t.tolist() for t in lp.topk(kmax, dim=-1))
    for j, i in enumerate(want):
        logprobs[i] = picked[j]
        k = rows[i].params.top_logprobs
        if k and top_ids is not None and top_vals is not None:
            top[i] = dict(zip(top_ids[j][:k], top_vals[j][:k]))
    return logprobs, top
