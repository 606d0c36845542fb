"""An engine worker: one ``AsyncEngine`` served over the Redis channel layer.

It listens on its own channel ``<LASER_ENGINE_CHANNEL>.<worker id>`` and announces itself (its
channel, in-flight count and engine stats) with a heartbeat key that expires after
``LASER_ENGINE_WORKER_TTL_S``. On SIGTERM it stops announcing (no new work arrives), lets
in-flight requests finish up to ``LASER_DRAIN_TIMEOUT``, then stops the engine.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import socket
import uuid
from typing import Any

from django.conf import settings

from apps.gateway.remote import protocol, registry
from apps.gateway.remote.client import make_layer
from inference.engine.client import EngineClient
from inference.request import Delta

logger = logging.getLogger(__name__)


def default_worker_id() -> str:
    host = re.sub(r"[^A-Za-z0-9_-]", "-", socket.gethostname())[:40]
    return f"{host}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


class EngineWorker:
    def __init__(self, engine: EngineClient, worker_id: str | None = None) -> None:
        self.engine = engine
        self.worker_id = worker_id or default_worker_id()
        self.channel = f"{settings.LASER_ENGINE_CHANNEL}.{self.worker_id}"
        self.tasks: dict[str, asyncio.Task] = {}
        self.stopping = asyncio.Event()

    async def run(self) -> None:
        """Serve until ``stopping`` is set, then drain."""
        import redis.asyncio as aredis

        self.layer = make_layer()
        self.redis = aredis.Redis.from_url(settings.LASER_ENGINE_REDIS_URL)
        # Owned by this coroutine: however run() ends (drained, or cancelled like a crash), the
        # heartbeat must stop with it, or clients would wait on a worker that serves nobody.
        background = [asyncio.create_task(self._heartbeat()),
                      asyncio.create_task(self._receive())]
        logger.info("engine worker %s listening on %s", self.worker_id, self.channel)
        try:
            await self.stopping.wait()
            await _cancel(background)
            await self.redis.delete(registry.worker_key(self.worker_id))
            if self.tasks:
                await asyncio.wait(list(self.tasks.values()),
                                   timeout=settings.LASER_DRAIN_TIMEOUT)
        finally:
            await _cancel([*background, *self.tasks.values()])
            await self.redis.aclose()

    async def _heartbeat(self) -> None:
        ttl_ms = int(settings.LASER_ENGINE_WORKER_TTL_S * 1000)
        key = registry.worker_key(self.worker_id)
        while True:
            stats = self.engine.stats_now().to_dict()
            value = registry.encode(self.worker_id, self.channel, len(self.tasks), stats)
            await self.redis.set(key, value, px=ttl_ms)
            await asyncio.sleep(settings.LASER_ENGINE_HEARTBEAT_S)

    async def _receive(self) -> None:
        while True:
            message = await self.layer.receive(self.channel)
            kind = message.get("type")
            if kind == protocol.GENERATE:
                request_id = message["request"]["request_id"]
                self.tasks[request_id] = asyncio.create_task(self._serve(message))
            elif kind == protocol.ENCODE:
                request_id = message["request"]["request_id"] + protocol.ENCODE_SUFFIX
                self.tasks[request_id] = asyncio.create_task(self._encode(message, request_id))
            elif kind == protocol.ABORT:
                task = self.tasks.get(message.get("request_id", ""))
                if task is not None:
                    task.cancel()

    async def _send(self, reply: str, message: dict) -> None:
        await self.layer.send(reply, message)

    def _texts(self, delta: Delta) -> list:
        ids = set(delta.token_ids)
        for top in delta.top_logprobs or ():
            ids.update(top)
        return [[i, self.engine.token_text(i)] for i in ids]

    async def _encode(self, message: dict, reply_id: str) -> None:
        reply = message["reply"]
        answer: dict[str, Any]
        try:
            ids = await self.engine.encode(protocol.request_from_wire(message["request"]))
            answer = {"type": protocol.ENCODED, "request_id": reply_id, "ids": ids}
        except Exception as exc:
            answer = {"type": protocol.ERROR, "request_id": reply_id,
                      "error": protocol.error_to_wire(exc)}
        try:
            await self._send(reply, answer)
        finally:
            self.tasks.pop(reply_id, None)

    async def _serve(self, message: dict) -> None:
        reply, request_id = message["reply"], message["request"]["request_id"]
        try:
            request = protocol.request_from_wire(message["request"])
            stream = await self.engine.generate(request, message.get("prompt_ids"))
        except Exception as exc:
            await self._send(reply, {"type": protocol.ERROR, "request_id": request_id,
                                     "error": protocol.error_to_wire(exc)})
            self.tasks.pop(request_id, None)
            return
        wants_texts = request.sampling.logprobs
        try:
            await self._send(reply, {"type": protocol.STARTED, "request_id": request_id,
                                     "worker": self.worker_id})
            async for delta in stream:
                await self._send(reply, {
                    "type": protocol.DELTAS, "request_id": request_id,
                    "deltas": [protocol.delta_to_wire(delta)],
                    "texts": self._texts(delta) if wants_texts else None})
            await self._send(reply, {"type": protocol.END, "request_id": request_id})
        except asyncio.CancelledError:
            await stream.aclose()  # aborted by the client: free the KV blocks now
            raise
        except Exception as exc:
            logger.exception("request %s failed on worker %s", request_id, self.worker_id)
            await self._send(reply, {"type": protocol.ERROR, "request_id": request_id,
                                     "error": protocol.error_to_wire(exc)})
        finally:
            self.tasks.pop(request_id, None)


async def _cancel(tasks: list[asyncio.Task]) -> None:
    """Cancel ``tasks`` and wait until each has finished unwinding."""
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
