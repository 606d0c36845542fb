"""Fold a request's stream of deltas into per-choice text, usage, timings and tier changes.

The SSE view, the WebSocket consumer and ``complete()`` all fold deltas through ``Collector`` so
the numbers reported to ``apps.slo`` (TTFT, TBT, token counts, tier served) are computed once,
the same way, whatever the transport.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from inference.request import Delta, Tier, TierChange


@dataclass(slots=True)
class ChoiceResult:
    index: int
    text: str = ""
    token_ids: list[int] = field(default_factory=list)
    token_times: list[float] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    top_logprobs: list[dict[int, float]] = field(default_factory=list)
    finish_reason: str | None = None


@dataclass(slots=True)
class Completion:
    """A finished request: what ``complete()`` returns and what the reports are built from."""

    request_id: str
    tier_asked: Tier
    tier_served: Tier
    arrival: float
    choices: list[ChoiceResult]
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    tier_changes: list[TierChange] = field(default_factory=list)
    first_token_at: float | None = None
    finished_at: float | None = None

    @property
    def text(self) -> str:
        """Choice 0's text (the common ``n == 1`` case)."""
        return self.choices[0].text if self.choices else ""

    @property
    def demoted(self) -> bool:
        return self.tier_served.rank > self.tier_asked.rank

    @property
    def ttft_s(self) -> float | None:
        return None if self.first_token_at is None else self.first_token_at - self.arrival

    @property
    def token_times(self) -> list[float]:
        """Choice 0's token stamps: the stream a client watches, for TBT."""
        return self.choices[0].token_times if self.choices else []

    @property
    def finish_reasons(self) -> list[str | None]:
        return [c.finish_reason for c in self.choices]

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


class Collector:
    """Accumulates deltas of one request; ``result`` is always a consistent partial view."""

    def __init__(self, request_id: str, tier: Tier, n: int, arrival: float | None = None) -> None:
        self.result = Completion(
            request_id=request_id, tier_asked=tier, tier_served=tier,
            arrival=arrival if arrival is not None else time.time(),
            choices=[ChoiceResult(i) for i in range(n)],
        )

    def fold(self, delta: Delta) -> None:
        res = self.result
        while delta.index >= len(res.choices):
            res.choices.append(ChoiceResult(len(res.choices)))
        choice = res.choices[delta.index]
        choice.text += delta.text
        choice.token_ids.extend(delta.token_ids)
        choice.token_times.extend(delta.token_times)
        if delta.logprobs:
            choice.logprobs.extend(delta.logprobs)
        if delta.top_logprobs:
            choice.top_logprobs.extend(delta.top_logprobs)
        if delta.finish_reason is not None:
            choice.finish_reason = delta.finish_reason
        if delta.token_times and res.first_token_at is None:
            res.first_token_at = min(delta.token_times)
        if delta.tier_change is not None:
            res.tier_changes.append(delta.tier_change)
        res.tier_served = Tier(delta.tier)
        res.prompt_tokens = max(res.prompt_tokens, delta.prompt_tokens)
        res.cached_tokens = max(res.cached_tokens, delta.cached_tokens)
        res.completion_tokens = sum(len(c.token_ids) for c in res.choices)

    @property
    def finished(self) -> bool:
        return all(c.finish_reason is not None for c in self.result.choices)

    def close(self) -> Completion:
        if self.result.finished_at is None:
            self.result.finished_at = time.time()
        return self.result
