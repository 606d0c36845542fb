"""A scripted ``EngineClient`` for unit tests of framing and bookkeeping only (the evidence
tests run the real AsyncEngine). mypy checks it against the protocol (``_check`` below)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncGenerator, Iterator
from contextlib import contextmanager

from inference.engine.client import EngineClient
from inference.engine.stats import EngineStats
from inference.errors import EngineError
from inference.request import Delta, EngineRequest, Tier, TierChange


class FakeStream:
    """The deltas of one scripted request; closing it before its end aborts it."""

    def __init__(self, engine: FakeEngine, req: EngineRequest) -> None:
        self.engine, self.req = engine, req
        self._gen = engine.deltas(req)
        self.finished = False

    def __aiter__(self) -> FakeStream:
        return self

    async def __anext__(self) -> Delta:
        try:
            return await self._gen.__anext__()
        except StopAsyncIteration:
            self.finished = True
            raise
        except asyncio.CancelledError:
            await self.aclose()
            raise

    async def aclose(self) -> None:
        if not self.finished:
            self.finished = True
            await self._gen.aclose()
            await self.engine.abort(self.req.request_id)


class FakeEngine:
    """Emits ``words`` as one delta each per choice; optionally demotes or fails part-way.

    ``abort`` records ids; ``refuse_at`` ends the request there with the engine's refusal
    (``abort`` + ``refusal``, no text: overload after a demotion); ``fail_before`` raises from
    ``generate`` before any delta, like the real engine's admission and validation errors;
    ``waiting`` is what ``stats`` reports queued.
    """

    def __init__(self, words=("Hello", " world", "!"), *, delay: float = 0.0,
                 demote_at: int | None = None, fail_at: int | None = None,
                 fail_before: Exception | None = None, prompt_tokens: int = 5,
                 refuse_at: int | None = None) -> None:
        self.words, self.delay, self.refuse_at = list(words), delay, refuse_at
        self.demote_at, self.fail_at, self.fail_before = demote_at, fail_at, fail_before
        self.prompt_tokens = prompt_tokens
        self.aborted: list[str] = []
        self.requests: list[EngineRequest] = []
        self.waiting = 0
        self.ready = True
        self.not_ready_reason: str | None = None

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass

    async def encode(self, request: EngineRequest) -> list[int]:
        return list(range(self.prompt_tokens))

    async def generate(self, request: EngineRequest,
                       prompt_ids: list[int] | None = None) -> FakeStream:
        if self.fail_before is not None:
            raise self.fail_before
        self.requests.append(request)
        return FakeStream(self, request)

    async def abort(self, request_id: str) -> None:
        self.aborted.append(request_id)

    async def stats(self) -> EngineStats:
        return self.stats_now()

    def stats_now(self) -> EngineStats:
        return EngineStats(waiting={"hot": self.waiting}, max_model_len=2048)

    def token_text(self, token_id: int) -> str:
        return f"<{token_id}>"

    async def deltas(self, req: EngineRequest) -> AsyncGenerator[Delta]:
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
            if i == self.refuse_at:
                yield Delta(req.request_id, 0, "", (), (), tier, finish_reason="abort",
                            tier_change=change, prompt_tokens=self.prompt_tokens,
                            refusal="demoted, then past warm's bound")
                return
            last = i == len(self.words) - 1
            for index in range(req.sampling.n):
                yield Delta(req.request_id, index, word, (100 + i,), (time.time(),), tier,
                            logprobs=(-0.5,) if req.sampling.logprobs else None,
                            top_logprobs=({100 + i: -0.5, 7: -1.5},)
                            if req.sampling.top_logprobs else None,
                            finish_reason="stop" if last else None, tier_change=change,
                            prompt_tokens=self.prompt_tokens, completion_tokens=i + 1,
                            cached_tokens=0)


class TokenizingEngine(FakeEngine):
    """A ``FakeEngine`` whose ``encode`` needs UTF-8 text, as the real tokeniser does: a lone
    surrogate that got past the intake raises ``UnicodeEncodeError`` here (a 500)."""

    async def encode(self, request: EngineRequest) -> list[int]:
        text = request.prompt if request.messages is None else json.dumps(
            request.messages, ensure_ascii=False)
        return list((text or "").encode("utf-8"))[:self.prompt_tokens] or [0]


@contextmanager
def installed(engine: FakeEngine) -> Iterator[FakeEngine]:
    """``engine`` as the process's engine client while the block runs."""
    from apps.gateway.engine_client import set_engine_client

    old = set_engine_client(engine)
    try:
        yield engine
    finally:
        set_engine_client(old)


def _check(engine: FakeEngine) -> EngineClient:
    return engine  # mypy: FakeEngine implements the protocol exactly
