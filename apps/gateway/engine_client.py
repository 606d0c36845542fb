"""The process's one engine client (a registry, not an engine): ``get_engine_client()``,
``open_stream()``, ``complete()``.

``LASER_ENGINE_MODE=embedded`` (default): an in-process ``AsyncEngine`` singleton whose step loop
runs on a thread of this process; ``manage.py serve`` starts and stops it through
``apps.core.lifecycle``, anything else (tests, a shell, a Celery task) starts it on first use.
``remote``: ``RemoteEngineClient`` reaches ``manage.py run_engine`` workers over the Redis
channel layer. ``ray``: ``RayEngineClient`` reaches the replicas ``manage.py run_fleet`` deployed
on Ray Serve (docs/deploy.md). All satisfy ``inference.engine.client.EngineClient``.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

from asgiref.sync import async_to_sync
from django.conf import settings

from apps.gateway.collect import Collector, Completion
from inference.request import EngineRequest

if TYPE_CHECKING:  # importing inference.engine loads torch: only when an engine is built
    from inference.engine.async_engine import AsyncEngine
    from inference.engine.client import DeltaStreamProtocol, EngineClient
    from inference.engine.config import EngineConfig

logger = logging.getLogger(__name__)

_lock = threading.Lock()
_client: EngineClient | None = None


def engine_config() -> EngineConfig:
    """``EngineConfig`` from the settings table (``laser_platform/settings/inference.py``);
    ``inference`` never reads settings or the environment itself."""
    from inference.engine.config import EngineConfig

    values = dict(settings.LASER_ENGINE_CONFIG)
    if values["device"] == "auto":
        import torch

        values["device"] = "cuda" if torch.cuda.is_available() else "cpu"
    return EngineConfig(**values)


def build_async_engine(config: EngineConfig | None = None) -> AsyncEngine:
    """A new, not yet started ``AsyncEngine`` (embedded mode, and each ``run_engine`` worker)."""
    from inference.engine.async_engine import AsyncEngine

    return AsyncEngine(config if config is not None else engine_config())


def _new_client() -> EngineClient:
    if settings.LASER_ENGINE_MODE == "remote":
        from apps.gateway.remote.client import RemoteEngineClient

        return RemoteEngineClient()
    if settings.LASER_ENGINE_MODE == "ray":
        from inference.fleet.client import RayEngineClient

        return RayEngineClient(settings.LASER_RAY_ADDRESS, settings.LASER_RAY_APP)
    return build_async_engine()


def get_engine_client(*, start: bool = True) -> EngineClient:
    """The process's engine client (created on first call; started unless ``start=False``)."""
    global _client
    with _lock:
        if _client is None:
            _client = _new_client()
        client = _client
        if start and not client.ready:
            client.start()
    return client


def current_engine_client() -> EngineClient | None:
    """The process's engine client if one was created here, else None (creates nothing)."""
    return _client


def set_engine_client(client: EngineClient | None) -> EngineClient | None:
    """Install ``client`` as the process's engine client (tests, benchmarks); returns the old."""
    global _client
    with _lock:
        old, _client = _client, client
    return old


def stop_engine_client() -> None:
    """Stop and forget the process's client (the lifecycle stop hook)."""
    global _client
    with _lock:
        client, _client = _client, None
    if client is not None:
        client.stop()


async def open_stream(request: EngineRequest, client: EngineClient | None = None,
                      prompt_ids: list[int] | None = None) -> DeltaStreamProtocol:
    """Start ``request`` and return its delta stream, raising the engine's admission or
    validation error *now* (so a view can still answer 4xx/503 instead of a broken stream).
    Closing the stream (or cancelling its consumer) aborts the request."""
    client = client if client is not None else get_engine_client()
    return await client.generate(request, prompt_ids)


async def complete(request: EngineRequest, client: EngineClient | None = None) -> Completion:
    """Run ``request`` to its end and collect every choice, usage, token times and tier changes.

    Raises the engine's typed errors (``InvalidParameter``, ``PromptTooLong``,
    ``AdmissionRefused``, ``EngineUnavailable``...) unchanged; cancelling aborts the request.
    """
    collector = Collector(request.request_id, request.tier, request.sampling.n,
                          request.arrival_time)
    stream = await open_stream(request, client)
    try:
        async for delta in stream:
            collector.fold(delta)
    finally:
        await stream.aclose()  # a no-op once finished; aborts on error or cancellation
    return collector.close()


def complete_sync(request: EngineRequest, client: EngineClient | None = None) -> Completion:
    """``complete`` for synchronous callers (Celery tasks, management commands)."""
    return async_to_sync(complete)(request, client)
