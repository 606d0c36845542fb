"""``RayEngineClient``: the ``EngineClient`` protocol over a Ray Serve engine deployment.

The web process connects to the Ray cluster (``address``) and holds a handle to the
``EngineReplica`` deployment of ``inference.fleet.serve``; Laser's request router picks the
replica of each ``generate``. The client tokenises through a replica (``encode``), so the
router can hash the prompt's blocks and the replica does not tokenise again.

A replica that dies mid-stream does not end the stream: the request goes again, to a
survivor, as the prompt plus the tokens already sent (re-prefilled, from the prefix cache
where it holds them) asking only for the tokens still missing; the caller sees one stream
with one longer gap. Only single-choice requests without a grammar constraint migrate (a
grammar's state or several choices cannot be rebuilt from the tokens alone); others end
with ``EngineUnavailable`` as before. ``migrations`` counts them.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections import Counter
from typing import Any

from inference.engine.stats import EngineStats
from inference.errors import EngineUnavailable
from inference.request import Delta, EngineRequest


def _replica_died(err: BaseException) -> bool:
    from ray.exceptions import ActorDiedError, ActorUnavailableError, RayActorError

    return isinstance(err, (ActorDiedError, ActorUnavailableError, RayActorError))


class RayStream:
    """The deltas of one request; migrates it when its replica dies (module docstring)."""

    def __init__(self, client: RayEngineClient, request: EngineRequest, prompt_ids: list[int],
                 response: Any) -> None:
        self.client, self.request, self.prompt_ids = client, request, prompt_ids
        self.response = response
        self.sent: list[int] = []  # tokens delivered so far
        self.replicas: list[str] = []  # the replica it ran on, then each it moved to
        self.done = False

    def __aiter__(self) -> RayStream:
        return self

    async def __anext__(self) -> Delta:
        if self.done:
            raise StopAsyncIteration
        while True:
            try:
                delta = await self.response.__anext__()
                break
            except StopAsyncIteration:
                self.done = True
                raise
            except Exception as err:
                if not _replica_died(err) or not self._can_migrate():
                    self.done = True
                    raise EngineUnavailable(f"the engine replica died: {err}") from err
                await self._migrate()
        return self._fix(delta)

    async def aclose(self) -> None:
        if not self.done:
            self.done = True
            self.response.cancel()
        self.client._streams.pop(self.request.request_id, None)

    def _can_migrate(self) -> bool:
        r = self.request
        return r.sampling.n == 1 and r.constraint is None

    async def _migrate(self) -> None:
        """Send what is left of the request to a survivor, from the prompt + sent tokens."""
        r = self.request
        left = r.sampling.max_tokens - len(self.sent)
        again = dataclasses.replace(
            r, prompt=None, messages=None, prompt_token_ids=self.prompt_ids + self.sent,
            sampling=dataclasses.replace(r.sampling, max_tokens=max(1, left)))
        self.client.migrations += 1
        self.response, replica = await self.client._start(again, self.prompt_ids + self.sent)
        self.replicas.append(replica)

    def _fix(self, delta: Delta) -> Delta:
        """Counts as if the request never moved: the re-sent tokens are completion."""
        moved = len(self.sent)
        self.sent.extend(delta.token_ids)
        if not moved or not (delta.prompt_tokens or delta.completion_tokens):
            return delta
        return dataclasses.replace(delta, prompt_tokens=delta.prompt_tokens - moved,
                                   completion_tokens=delta.completion_tokens + moved)


class RayEngineClient:
    """Reaches the ``name`` Serve application on the Ray cluster at ``address``."""

    def __init__(self, address: str | None = None, name: str = "laser",
                 handle: Any = None) -> None:
        self.address, self.name, self.handle = address, name, handle
        self._streams: dict[str, RayStream] = {}
        self._stats = EngineStats(ready=False)
        self.migrations = 0
        self.routed: Counter[str] = Counter()  # requests started per replica id

    # ---- lifecycle -----------------------------------------------------------------------
    def start(self) -> None:
        if self.handle is None:
            import ray
            from ray import serve

            if not ray.is_initialized():
                ray.init(address=self.address or "auto", log_to_driver=False)
            self.handle = serve.get_deployment_handle("EngineReplica", self.name)

    def stop(self) -> None:
        """The replicas belong to Serve: nothing of theirs stops with this process."""

    @property
    def ready(self) -> bool:
        return self.handle is not None

    @property
    def not_ready_reason(self) -> str | None:
        return None if self.ready else "not connected to the Ray Serve engine deployment"

    # ---- EngineClient --------------------------------------------------------------------
    async def encode(self, request: EngineRequest) -> list[int]:
        return await self.handle.encode.remote(request)

    async def generate(self, request: EngineRequest,
                       prompt_ids: list[int] | None = None) -> RayStream:
        if prompt_ids is None:
            prompt_ids = await self.encode(request)
        response, replica = await self._start(request, prompt_ids)
        stream = self._streams[request.request_id] = RayStream(self, request, prompt_ids,
                                                                 response)
        stream.replicas.append(replica)
        self.routed[replica] += 1
        return stream

    async def _start(self, request: EngineRequest, prompt_ids: list[int]) -> tuple[Any, str]:
        """Route and admit: errors before any work (bad request, refusal) raise here.
        Returns the response stream and the replica that took it."""
        for attempt in range(3):
            response = self.handle.options(stream=True).generate.remote(request, prompt_ids)
            try:
                _, replica = await response.__anext__()  # (STARTED, replica id)
                return response, replica
            except Exception as err:
                if not _replica_died(err) or attempt == 2:
                    raise
                await asyncio.sleep(0.2)  # not started: re-routed to a survivor
        raise EngineUnavailable("no engine replica took the request")

    async def abort(self, request_id: str) -> None:
        stream = self._streams.get(request_id)
        if stream is not None:
            await stream.aclose()

    async def stats(self) -> EngineStats:
        self._stats = EngineStats.from_dict(await self.handle.stats.remote())
        return self._stats

    def stats_now(self) -> EngineStats:
        """The last ``stats()`` answer (one replica's), never blocking a caller's thread."""
        return self._stats

    def token_text(self, token_id: int) -> str:
        return ""
