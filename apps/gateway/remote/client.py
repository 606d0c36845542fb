"""``RemoteEngineClient``: the ``EngineClient`` protocol over the Redis channel layer.

Each event loop that uses the client gets its own channel layer, Redis connection and reply
channel, plus one dispatcher task that routes replies to the waiting request by id (so web
processes, Celery threads and ``complete_sync`` calls can share the client safely).
A worker that vanishes from the registry while a request waits on it turns into
``EngineUnavailable`` for that request; a request it never started is re-sent to a survivor.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from typing import Any

from django.conf import settings

from apps.gateway.remote import protocol, registry
from inference.engine.stats import EngineStats
from inference.errors import EngineUnavailable
from inference.request import Delta, EngineRequest

_WORKERS_TTL_S = 0.5


def make_layer() -> Any:
    """The engine's own channel layer (big capacity: deltas must never be dropped)."""
    from channels_redis.core import RedisChannelLayer

    return RedisChannelLayer(hosts=[settings.LASER_ENGINE_REDIS_URL], prefix="laser-engine",
                             capacity=100_000, expiry=120)


class _LoopState:
    def __init__(self) -> None:
        import redis.asyncio as aredis

        self.layer = make_layer()
        self.redis = aredis.Redis.from_url(settings.LASER_ENGINE_REDIS_URL)
        self.queues: dict[str, asyncio.Queue] = {}
        self.reply = ""
        self.dispatcher: asyncio.Task | None = None
        self.workers: dict[str, registry.WorkerInfo] = {}
        self.workers_at = 0.0

    async def start(self) -> None:
        self.reply = await self.layer.new_channel()
        self.dispatcher = asyncio.create_task(self._dispatch())

    async def _dispatch(self) -> None:
        while True:
            message = await self.layer.receive(self.reply)
            queue = self.queues.get(message.get("request_id", ""))
            if queue is not None:
                queue.put_nowait(message)


class RemoteEngineClient:
    """Reaches ``manage.py run_engine`` workers; see the module docstring."""

    def __init__(self) -> None:
        self._states: dict[int, _LoopState] = {}
        self._owner: dict[str, registry.WorkerInfo] = {}
        self._outstanding: dict[str, int] = defaultdict(int)
        self._texts: dict[int, str] = {}
        self._sync_redis: Any = None
        self._ready_at, self._ready = 0.0, False

    # ---- plumbing -------------------------------------------------------------------------
    async def _state(self) -> _LoopState:
        loop = asyncio.get_running_loop()
        state = self._states.get(id(loop))
        if state is None or state.dispatcher is None or state.dispatcher.done():
            state = self._states[id(loop)] = _LoopState()
            await state.start()
        return state

    async def _workers(self, state: _LoopState, fresh: bool = False) -> dict:
        if fresh or time.monotonic() - state.workers_at > _WORKERS_TTL_S:
            state.workers = await registry.live_workers(state.redis)
            state.workers_at = time.monotonic()
        return state.workers

    async def alive(self, state: _LoopState, worker: registry.WorkerInfo) -> bool:
        return bool(await state.redis.exists(registry.worker_key(worker.worker_id)))

    def token_text(self, token_id: int) -> str:
        return self._texts.get(token_id, "")

    def remember_texts(self, texts: list | None) -> None:
        for token_id, text in texts or ():
            self._texts[int(token_id)] = text

    # ---- EngineClient --------------------------------------------------------------------
    def start(self) -> None:
        """Nothing to start here: the workers are processes of their own."""

    def stop(self) -> None:
        """Nothing to stop here (each event loop's connections close with their loop)."""

    @property
    def not_ready_reason(self) -> str | None:
        return None if self.ready else "no live engine worker"

    @property
    def ready(self) -> bool:
        """At least one live worker (read synchronously, cached for a second)."""
        if time.monotonic() - self._ready_at > 1.0:
            import redis

            try:
                self._ready = bool(registry.live_workers_sync(self._redis_sync()))
            except redis.RedisError:
                self._ready = False
            self._ready_at = time.monotonic()
        return self._ready

    async def _pick(self, state: _LoopState, request: EngineRequest,
                    tried: set[str]) -> registry.WorkerInfo:
        workers = {k: v for k, v in (await self._workers(state, fresh=bool(tried))).items()
                   if k not in tried}
        worker = registry.pick(workers, request.session_id, self._outstanding)
        if worker is None:
            raise EngineUnavailable("no engine worker is alive")
        tried.add(worker.worker_id)
        return worker

    async def encode(self, request: EngineRequest) -> list[int]:
        """Tokenised by a worker (the one the request would run on): the web process loads no
        tokenizer, and its event loop never tokenises."""
        state = await self._state()
        reply_id = request.request_id + protocol.ENCODE_SUFFIX
        tried: set[str] = set()
        while True:
            worker = await self._pick(state, request, tried)
            queue: asyncio.Queue = asyncio.Queue()
            state.queues[reply_id] = queue
            try:
                await state.layer.send(worker.channel, {
                    "type": protocol.ENCODE, "request": protocol.request_to_wire(request),
                    "reply": state.reply})
                message = await _next_message(self, state, worker, queue)
            except _WorkerGone:
                continue
            finally:
                state.queues.pop(reply_id, None)
            if message["type"] == protocol.ERROR:
                raise protocol.error_from_wire(message["error"])
            return [int(i) for i in message["ids"]]

    async def generate(self, request: EngineRequest,
                       prompt_ids: list[int] | None = None) -> RemoteStream:
        state = await self._state()
        tried: set[str] = set()
        while True:
            worker = await self._pick(state, request, tried)
            queue: asyncio.Queue = asyncio.Queue()
            state.queues[request.request_id] = queue
            await state.layer.send(worker.channel, {
                "type": protocol.GENERATE, "request": protocol.request_to_wire(request),
                "prompt_ids": prompt_ids, "reply": state.reply})
            stream = RemoteStream(self, state, worker, request.request_id, queue)
            try:
                await stream.wait_started()
            except _WorkerGone:
                state.queues.pop(request.request_id, None)
                continue  # never started: the next live worker gets it
            except BaseException:
                state.queues.pop(request.request_id, None)
                raise
            self._owner[request.request_id] = worker
            self._outstanding[worker.worker_id] += 1
            return stream

    async def abort(self, request_id: str) -> None:
        worker = self._owner.get(request_id)
        if worker is not None:
            state = await self._state()
            await state.layer.send(worker.channel, {"type": protocol.ABORT,
                                                    "request_id": request_id})

    async def stats(self) -> EngineStats:
        state = await self._state()
        return _sum_stats(await self._workers(state))

    def stats_now(self) -> EngineStats:
        """``stats()`` for synchronous callers: the registry read over a sync connection."""
        import redis

        try:
            return _sum_stats(registry.live_workers_sync(self._redis_sync()))
        except redis.RedisError:
            return EngineStats(ready=False)

    def _redis_sync(self) -> Any:
        if self._sync_redis is None:
            import redis

            self._sync_redis = redis.Redis.from_url(settings.LASER_ENGINE_REDIS_URL)
        return self._sync_redis

    def _finished(self, request_id: str) -> None:
        worker = self._owner.pop(request_id, None)
        if worker is not None:
            self._outstanding[worker.worker_id] -= 1


_LIMITS = ("max_model_len", "max_prompt_bytes")  # the same on every worker: kept, not summed


def _sum_stats(workers: dict[str, registry.WorkerInfo]) -> EngineStats:
    """Every live worker's stats added up (counts per tier too)."""
    total: dict[str, Any] = {"ready": bool(workers)}
    for info in workers.values():
        for name, value in info.stats.items():
            if isinstance(value, dict):
                bucket = total.setdefault(name, {})
                for k, v in value.items():
                    bucket[k] = bucket.get(k, 0) + v
            elif name in _LIMITS:
                total[name] = max(total.get(name, 0), value)
            elif isinstance(value, (int, float)) and not isinstance(value, bool):
                total[name] = total.get(name, 0) + value
    return EngineStats.from_dict(total)


class _WorkerGone(Exception):
    pass


async def _next_message(client: RemoteEngineClient, state: _LoopState,
                        worker: registry.WorkerInfo, queue: asyncio.Queue) -> dict:
    """The next reply for one request; ``_WorkerGone`` when its worker stops heartbeating."""
    period = settings.LASER_ENGINE_HEARTBEAT_S
    while True:
        try:
            return await asyncio.wait_for(queue.get(), timeout=period)
        except TimeoutError:
            if not await client.alive(state, worker):
                raise _WorkerGone() from None


class RemoteStream:
    """Deltas of one remote request; ``aclose`` (or cancellation) aborts it on the worker."""

    def __init__(self, client: RemoteEngineClient, state: _LoopState,
                 worker: registry.WorkerInfo, request_id: str, queue: asyncio.Queue) -> None:
        self.client, self.state, self.worker = client, state, worker
        self.request_id, self.queue = request_id, queue
        self._buffer: list[Delta] = []
        self._finished = False

    async def _next_message(self) -> dict:
        return await _next_message(self.client, self.state, self.worker, self.queue)

    async def wait_started(self) -> None:
        message = await self._next_message()
        if message["type"] == protocol.ERROR:
            raise protocol.error_from_wire(message["error"])
        if message["type"] != protocol.STARTED:
            self.queue.put_nowait(message)  # deltas overtook nothing; keep order anyway

    def __aiter__(self) -> RemoteStream:
        return self

    async def __anext__(self) -> Delta:
        while not self._buffer:
            if self._finished:
                raise StopAsyncIteration
            try:
                message = await self._next_message()
            except _WorkerGone:
                self._end()
                raise EngineUnavailable(
                    f"engine worker {self.worker.worker_id} died mid-request") from None
            except asyncio.CancelledError:
                await self.aclose()
                raise
            kind = message["type"]
            if kind == protocol.DELTAS:
                self.client.remember_texts(message.get("texts"))
                self._buffer.extend(protocol.delta_from_wire(d) for d in message["deltas"])
            elif kind == protocol.END:
                self._end()
            elif kind == protocol.ERROR:
                self._end()
                raise protocol.error_from_wire(message["error"])
        return self._buffer.pop(0)

    def _end(self) -> None:
        if not self._finished:
            self._finished = True
            self.state.queues.pop(self.request_id, None)
            self.client._finished(self.request_id)

    async def aclose(self) -> None:
        if self._finished:
            return
        self._end()
        try:
            await self.state.layer.send(self.worker.channel, {"type": protocol.ABORT,
                                                              "request_id": self.request_id})
        except Exception:  # the worker may be gone; nothing left to abort then
            pass
