"""The engine-client protocol: all the web side (gateway, batches, metrics) knows of the engine.

``AsyncEngine`` implements it in process; the gateway's ``RemoteEngineClient`` implements it
over the Redis channel layer against the same contract (mypy checks both against it):

- ``start()``/``stop()`` bring the client up and down (loading the model in process; nothing
  to do for the remote client, whose workers live elsewhere); ``ready`` says whether a model is
  loaded and a step loop runs (remote: at least one live worker).
- ``await encode(request)`` renders the chat template and tokenises the prompt *off the event
  loop*, checked against the context: it raises ``InvalidParameter``/``PromptTooLong`` and
  returns the prompt's token ids, which the caller may hand to ``generate`` so the prompt is
  not tokenised twice.
- ``await generate(request, prompt_ids)`` admits the request, raising *before any work* on
  ``InvalidParameter``/``PromptTooLong`` (bad request), ``AdmissionRefused``/``EngineOverloaded``
  (refused, maybe retry later) or ``EngineUnavailable``; it returns a ``DeltaStreamProtocol``.
- Iterating the stream yields ``Delta`` values until every choice has a ``finish_reason``;
  ``EngineUnavailable`` is raised mid-stream if the engine dies. ``aclose()`` (or cancelling the
  consuming task, or dropping the stream) aborts the request and frees its KV blocks.
- ``await abort(request_id)`` ends a request from elsewhere; its stream then ends with
  ``finish_reason == "abort"`` deltas.
- ``await stats()`` returns an ``EngineStats``; ``stats_now()`` is the same for synchronous
  callers on any thread (the metrics view), never touching an event loop.
- ``token_text(token_id)`` is one token's text (logprobs), "" when unknown.
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

    @property
    def not_ready_reason(self) -> str | None: ...

    def start(self) -> None: ...

    def stop(self) -> None: ...

    async def encode(self, request: EngineRequest) -> list[int]: ...

    async def generate(self, request: EngineRequest,
                       prompt_ids: list[int] | None = None) -> DeltaStreamProtocol: ...

    async def abort(self, request_id: str) -> None: ...

    async def stats(self) -> EngineStats: ...

    def stats_now(self) -> EngineStats: ...

    def token_text(self, token_id: int) -> str: ...


__all__ = ["DeltaStreamProtocol", "EngineClient"]
