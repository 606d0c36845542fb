"""The engine-client protocol: all the web side (gateway, batches, metrics) knows of the engine.

``AsyncEngine`` implements it in process; the gateway's remote client implements it over the
Redis channel layer against the same contract:

- ``await generate(request)`` validates and admits the request, raising *before any work* on
  ``InvalidParameter``/``PromptTooLong`` (bad request), ``AdmissionRefused``/``EngineOverloaded``
  (refused, maybe retry later) or ``EngineUnavailable``; it returns a ``DeltaStream``.
- Iterating the stream yields ``Delta`` values until every choice has a ``finish_reason``;
  ``EngineUnavailable`` is raised mid-stream if the engine dies. ``aclose()`` (or cancelling the
  consuming task, or dropping the stream) aborts the request and frees its KV blocks.
- ``await abort(request_id)`` ends a request from elsewhere; its stream then ends with
  ``finish_reason == "abort"`` deltas.
- ``await stats()`` returns an ``EngineStats`` (``to_dict()`` for the wire); ``ready`` says
  whether a model is loaded and the step loop runs.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol, runtime_checkable

from inference.request import Delta, EngineRequest

from .stats import EngineStats


@runtime_checkable
class DeltaStreamProtocol(Protocol):
    def __aiter__(self) -> AsyncIterator[Delta]: ...

    async def __anext__(self) -> Delta: ...

    async def aclose(self) -> None: ...


@runtime_checkable
class EngineClient(Protocol):
    @property
    def ready(self) -> bool: ...

    async def generate(self, request: EngineRequest) -> DeltaStreamProtocol: ...

    async def abort(self, request_id: str) -> None: ...

    async def stats(self) -> EngineStats: ...


__all__ = ["DeltaStreamProtocol", "EngineClient"]
