"""The web side's one handle on the engine: ``get_engine_client()``, ``stream()``, ``complete()``.

``LASER_ENGINE_MODE=embedded`` (default): an in-process ``AsyncEngine`` singleton whose step loop
runs on a thread of this process; ``manage.py serve`` starts and stops it through
``apps.core.lifecycle``, anything else (tests, a shell, a Celery task) starts it on first use.
``remote``: ``RemoteEngineClient`` reaches ``manage.py run_engine`` workers over the Redis
channel layer. Both satisfy ``inference.engine.client.EngineClient``.
"""

from __future__ import annotations

import inspect
import logging
import threading
from collections.abc import AsyncIterator
from typing import Any

from asgiref.sync import async_to_sync
from django.conf import settings

from apps.gateway.collect import Collector, Completion
from inference.request import Delta, EngineRequest

logger = logging.getLogger(__name__)

BUNDLED_MODEL_NAMES = {"", "smollm2-135m-instruct", "smollm2", "default"}

_lock = threading.Lock()
_client: Any = None


def engine_config() -> Any:
    """``EngineConfig`` from the Django settings (``inference`` never reads settings itself)."""
    from inference.engine.config import EngineConfig

    model = settings.LASER_MODEL
    device = settings.LASER_DEVICE
    if device == "auto":
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    return EngineConfig.from_env(
        model=None if model.lower() in BUNDLED_MODEL_NAMES else model,
        device=device,
        kv_memory_mb=float(settings.LASER_KV_MEMORY_MB),
        block_size=settings.LASER_KV_BLOCK_SIZE,
        max_num_seqs=settings.LASER_MAX_NUM_SEQS,
        max_model_len=settings.LASER_MAX_MODEL_LEN,
        max_num_batched_tokens=settings.LASER_MAX_BATCH_TOKENS,
        matmul_dtype=settings.LASER_MATMUL_DTYPE,
        num_threads=settings.LASER_THREADS,
        wide_threads=settings.LASER_WIDE_THREADS,
        policy=settings.LASER_POLICY,
        overload_ttft_factor=settings.LASER_OVERLOAD_TTFT_FACTOR,
    )


def build_async_engine(config: Any = None) -> Any:
    """A new, not yet started ``AsyncEngine`` (embedded mode, and each ``run_engine`` worker)."""
    from inference.engine.async_engine import AsyncEngine

    config = config if config is not None else engine_config()
    factory = getattr(AsyncEngine, "from_config", None)
    return factory(config) if factory is not None else AsyncEngine(config)


def _start(client: Any) -> None:
    start = getattr(client, "start", None)
    if start is not None and not is_ready(client):
        start()


def is_ready(client: Any) -> bool:
    ready = getattr(client, "ready", True)
    return bool(ready() if callable(ready) else ready)


def get_engine_client(*, start: bool = True) -> Any:
    """The process's engine client (created on first call; started unless ``start=False``)."""
    global _client
    with _lock:
        if _client is None:
            if settings.LASER_ENGINE_MODE == "remote":
                from apps.gateway.remote.client import RemoteEngineClient

                _client = RemoteEngineClient()
            else:
                _client = build_async_engine()
        client = _client
        if start:
            _start(client)
    return client


def set_engine_client(client: Any) -> Any:
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
    stop = getattr(client, "stop", None)
    if stop is not None:
        stop()


async def open_stream(request: EngineRequest, client: Any = None) -> AsyncIterator[Delta]:
    """Start ``request`` and return its delta iterator, raising the engine's admission or
    validation error *now* (so a view can still answer 4xx/503 instead of a broken stream)."""
    client = client if client is not None else get_engine_client()
    iterator = client.generate(request)
    if inspect.isawaitable(iterator):
        iterator = await iterator
    return _guarded(client, iterator, request.request_id)


async def _guarded(client: Any, iterator: Any, request_id: str) -> AsyncIterator[Delta]:
    finished = False
    try:
        async for delta in iterator:
            yield delta
        finished = True
    finally:
        if not finished:
            await _close_and_abort(client, iterator, request_id)


async def _close_and_abort(client: Any, iterator: Any, request_id: str) -> None:
    try:
        aclose = getattr(iterator, "aclose", None)
        if aclose is not None:
            await aclose()
    finally:
        result = client.abort(request_id)
        if inspect.isawaitable(result):
            await result


async def complete(request: EngineRequest, client: Any = None) -> Completion:
    """Run ``request`` to its end and collect every choice, usage, token times and tier changes.

    Raises the engine's typed errors (``InvalidParameter``, ``PromptTooLong``,
    ``AdmissionRefused``, ``EngineUnavailable``...) unchanged; cancelling aborts the request.
    """
    collector = Collector(request.request_id, request.tier, request.sampling.n,
                          request.arrival_time)
    iterator = await open_stream(request, client)
    async for delta in iterator:
        collector.fold(delta)
    return collector.close()


def complete_sync(request: EngineRequest, client: Any = None) -> Completion:
    """``complete`` for synchronous callers (Celery tasks, management commands)."""
    return async_to_sync(complete)(request, client)
