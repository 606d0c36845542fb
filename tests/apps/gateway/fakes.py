"""A scripted stand-in for the ``EngineClient`` protocol, for unit tests of framing and
bookkeeping only (the evidence tests run the real AsyncEngine)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

from inference.errors import EngineError
from inference.request import Delta, EngineRequest, Tier, TierChange


class FakeEngine:
    """Emits ``words`` as one delta each per choice; optionally demotes or fails part-way.

    ``abort`` records ids; ``fail_before`` raises from ``generate`` before any delta, like the
    real engine's admission and validation errors.
    """

    def __init__(self, words=("Hello", " world", "!"), *, delay: float = 0.0,
                 demote_at: int | None = None, fail_at: int | None = None,
                 fail_before: Exception | None = None) -> None:
        self.words, self.delay = list(words), delay
        self.demote_at, self.fail_at, self.fail_before = demote_at, fail_at, fail_before
        self.aborted: list[str] = []
        self.requests: list[EngineRequest] = []
        self.ready = True

    def stats(self) -> dict:
        return {"waiting": 0, "max_waiting": 100}

    def abort(self, request_id: str) -> None:
        self.aborted.append(request_id)

    def generate(self, req: EngineRequest) -> AsyncIterator[Delta]:
        if self.fail_before is not None:
            raise self.fail_before
        self.requests.append(req)
        return self._run(req)

    async def _run(self, req: EngineRequest) -> AsyncIterator[Delta]:
        tier = req.tier
        for i, word in enumerate(self.words):
            if self.delay:
                await asyncio.sleep(self.delay)
            if i == self.fail_at:
                raise EngineError("worker died")
            change = None
            if i == self.demote_at:
                change = TierChange(tier, Tier.WARM, "hot pressure", time.time())
                tier = Tier.WARM
            last = i == len(self.words) - 1
            for index in range(req.sampling.n):
                yield Delta(req.request_id, index, word, (100 + i,), (time.time(),), tier,
                            logprobs=(-0.5,) if req.sampling.logprobs else None,
                            top_logprobs=({100 + i: -0.5, 7: -1.5},)
                            if req.sampling.top_logprobs else None,
                            finish_reason="stop" if last else None, tier_change=change,
                            prompt_tokens=5, completion_tokens=i + 1, cached_tokens=0)
