"""A scripted engine client for the batches app's unit tests.

It implements the ``EngineClient`` protocol (generate → delta stream, abort, stats, ready) with
no model: the answer to a request is ``"echo:" + its last message``, one delta per word, after
``delay_s``. Abort ends the stream with ``finish_reason == "abort"``, like the engine. The
end-to-end tests use the real engine; these tests exercise the batch machinery around it.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

from inference.engine.stats import EngineStats
from inference.request import Delta, EngineRequest


class FakeStream:
    def __init__(self, engine: FakeEngine, request: EngineRequest) -> None:
        self.engine, self.request = engine, request
        self.loop = asyncio.get_running_loop()
        self.aborted = asyncio.Event()
        self._gen = self._deltas()

    def __aiter__(self) -> FakeStream:
        return self

    async def __anext__(self) -> Delta:
        return await self._gen.__anext__()

    async def aclose(self) -> None:
        await self._gen.aclose()

    def _delta(self, text: str, ids: tuple[int, ...], finish: str | None) -> Delta:
        return Delta(self.request.request_id, 0, text, ids, tuple(time.time() for _ in ids),
                     self.request.tier, finish_reason=finish, prompt_tokens=7,
                     completion_tokens=len(ids))

    async def _deltas(self):
        words = self.engine.answer(self.request).split(" ")
        limit = self.request.sampling.max_tokens
        for i, word in enumerate(words[:limit]):
            try:
                await asyncio.wait_for(self.aborted.wait(), self.engine.delay_s / len(words))
            except TimeoutError:
                pass
            if self.aborted.is_set():
                yield self._delta("", (), "abort")
                return
            last = i == min(len(words), limit) - 1
            finish = None if not last else ("length" if len(words) > limit else "stop")
            yield self._delta(word if i == 0 else " " + word, (i + 1,), finish)
        self.engine.finished.append(self.request.request_id)


class FakeEngine:
    def __init__(self, *, delay_s: float = 0.0,
                 refuse: Callable[[EngineRequest], Exception | None] | None = None) -> None:
        self.delay_s = delay_s
        self.refuse = refuse
        self.requests: list[EngineRequest] = []
        self.aborted: list[str] = []
        self.finished: list[str] = []
        self._streams: dict[str, FakeStream] = {}
        self._lock = threading.Lock()

    @property
    def ready(self) -> bool:
        return True

    not_ready_reason: str | None = None

    @staticmethod
    def answer(request: EngineRequest) -> str:
        if request.messages:
            return "echo: " + request.messages[-1]["content"]
        return "echo: " + (request.prompt or "")

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass

    async def encode(self, request: EngineRequest) -> list[int]:
        return list(range(7))

    def token_text(self, token_id: int) -> str:
        return ""

    async def generate(self, request: EngineRequest,
                       prompt_ids: list[int] | None = None) -> FakeStream:
        problem = self.refuse(request) if self.refuse else None
        if problem is not None:
            raise problem
        stream = FakeStream(self, request)
        with self._lock:
            self.requests.append(request)
            self._streams[request.request_id] = stream
        return stream

    async def abort(self, request_id: str) -> None:
        with self._lock:
            self.aborted.append(request_id)
            stream = self._streams.get(request_id)
        if stream is not None:
            stream.loop.call_soon_threadsafe(stream.aborted.set)

    async def stats(self) -> EngineStats:
        return self.stats_now()

    def stats_now(self) -> EngineStats:
        return EngineStats(running={"cold": len(self._streams)}, max_model_len=2048)
