"""Who is alive: engine workers heartbeat a Redis key with a TTL; clients read the keys.

A worker that stops heartbeating (killed, hung, partitioned) disappears within
``LASER_ENGINE_WORKER_TTL_S``: new requests stop going to it and streams waiting on it fail.
Routing: a chat session goes to the live worker with the highest rendezvous hash of
(session, worker), so it stays on the worker holding its KV cache and only the sessions of a
dead worker move; requests without a session go to the least loaded worker.
Keys live under ``LASER_ENGINE_CHANNEL``, so deployments (or test runs) sharing one Redis
never see each other's workers.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from django.conf import settings


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    worker_id: str
    channel: str
    inflight: int
    stats: dict[str, Any]


def key_prefix() -> str:
    return f"laser:{settings.LASER_ENGINE_CHANNEL}:worker:"


def worker_key(worker_id: str) -> str:
    return key_prefix() + worker_id


def encode(worker_id: str, channel: str, inflight: int, stats: dict[str, Any]) -> str:
    return json.dumps({"worker_id": worker_id, "channel": channel, "inflight": inflight,
                       "stats": stats})


def _decode(raw: bytes | str | None) -> WorkerInfo | None:
    if raw is None:
        return None
    try:
        data = json.loads(raw)
        return WorkerInfo(data["worker_id"], data["channel"], int(data["inflight"]),
                          data.get("stats") or {})
    except (ValueError, KeyError, TypeError):
        return None


async def live_workers(redis: Any) -> dict[str, WorkerInfo]:
    keys = [key async for key in redis.scan_iter(match=key_prefix() + "*", count=100)]
    values = await redis.mget(keys) if keys else []
    infos = (_decode(v) for v in values)
    return {i.worker_id: i for i in infos if i is not None}


def live_workers_sync(redis: Any) -> dict[str, WorkerInfo]:
    keys = list(redis.scan_iter(match=key_prefix() + "*", count=100))
    values = redis.mget(keys) if keys else []
    infos = (_decode(v) for v in values)
    return {i.worker_id: i for i in infos if i is not None}


def _score(session_id: str, worker_id: str) -> int:
    digest = hashlib.blake2b(f"{session_id}|{worker_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def pick(workers: dict[str, WorkerInfo], session_id: str | None,
         outstanding: dict[str, int]) -> WorkerInfo | None:
    """The worker for a request: sticky by session (rendezvous hashing), else least loaded."""
    if not workers:
        return None
    if session_id:
        best = max(workers, key=lambda w: _score(session_id, w))
        return workers[best]
    return min(workers.values(),
               key=lambda w: (max(w.inflight, outstanding.get(w.worker_id, 0)), w.worker_id))
