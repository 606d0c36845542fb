"""The engine as a Ray Serve deployment, and Laser's router as its request router.

``EngineReplica`` holds one ``AsyncEngine`` (a replica per GPU, or per CPU socket); Serve
health-checks it (``check_health``), restarts it, places it and scales it. Every
``routing_stats_period_s`` Serve asks each replica for ``record_routing_stats``: its
``ReplicaLoad`` and the hashes of the KV blocks it has cached; ``LaserRequestRouter`` turns
those into one ``LaserRouter.choose`` per ``generate`` call (other calls go to the first
replica Serve offers). ``deploy()`` starts it all on a running Ray cluster; the web side
reaches it through ``inference.fleet.client.RayEngineClient``.

Importing this module needs ``ray[serve]`` (an optional install, ``requirements-fleet.txt``).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import AsyncIterator
from typing import Any

from ray import serve
from ray.serve.request_router import PendingRequest, RequestRouter, RunningReplica

from inference.engine.async_engine import AsyncEngine
from inference.engine.config import EngineConfig
from inference.fleet.router import (
    LaserRouter,
    ReplicaLoad,
    RouterConfig,
    RouteRequest,
    leading_hits,
)
from inference.kv.block_manager import prefix_hashes
from inference.request import Delta, EngineRequest, Tier

STARTED = "started"  # the first item of every generate stream: (STARTED, replica id)


class EngineReplica:
    """One engine replica (the deployment's class; ``deploy`` wraps it with Serve)."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.engine = AsyncEngine(EngineConfig(**config))
        self.engine.start(wait=True)

    async def encode(self, request: EngineRequest) -> list[int]:
        return await self.engine.encode(request)

    async def generate(self, request: EngineRequest,
                       prompt_ids: list[int] | None = None,
                       ) -> AsyncIterator[Delta | tuple[str, str]]:
        """``(STARTED, replica id)`` once admitted (errors before any work raise instead),
        then the deltas. A caller that cancels the stream aborts the request here."""
        stream = await self.engine.generate(request, prompt_ids)
        try:
            yield STARTED, serve.get_replica_context().replica_id.to_full_id_str()
            async for delta in stream:
                yield delta
        finally:
            await stream.aclose()

    async def stats(self) -> dict[str, Any]:
        return self.engine.stats_now().to_dict()

    def check_health(self) -> None:
        if not self.engine.ready:
            raise RuntimeError(self.engine.not_ready_reason or "the engine is not ready")

    def record_routing_stats(self) -> dict[str, Any]:
        """What the router weighs: this replica's load per tier and its cached block hashes."""
        core = self.engine.engine
        if core is None:
            return {}
        with core._lock:  # the step thread mutates the scheduler and the cache
            s = core.scheduler
            hot = hot_prefill = prefill = 0
            bs = s.kv.block_size
            for q in [*s.in_flight(), *s.waiting]:
                done = q.num_computed_tokens or bs * leading_hits(
                    prefix_hashes(q.prompt_token_ids, q.salt, bs), s.kv._cached)
                left = max(0, q.num_prompt_tokens - done)
                prefill += left
                if q.tier is Tier.HOT:
                    hot, hot_prefill = hot + 1, hot_prefill + left
            load = ReplicaLoad(time.time(), len(s.in_flight()), len(s.waiting), hot, hot_prefill,
                               prefill, core.config.max_num_seqs)
            hashes = list(s.kv._cached)
        return {"load": dataclasses.asdict(load), "hashes": hashes,
                "block_size": core.config.block_size}


class LaserRequestRouter(RequestRouter):
    """Ray Serve's request-router interface around ``LaserRouter``."""

    def initialize_state(self, **kwargs: Any) -> None:
        self.core = LaserRouter(RouterConfig(**kwargs))
        self._sets: dict[Any, tuple[float, frozenset[int]]] = {}

    async def choose_replicas(self, candidate_replicas: list[RunningReplica],
                              pending_request: PendingRequest | None = None,
                              ) -> list[list[RunningReplica]]:
        if (pending_request is None or pending_request.metadata.call_method != "generate"
                or len(candidate_replicas) < 2):
            return [candidate_replicas]
        stats = [r.routing_stats or {} for r in candidate_replicas]
        loads = [ReplicaLoad(**s["load"]) if s else ReplicaLoad(at=0.0) for s in stats]
        request, prompt_ids = (list(pending_request.args) + [None])[:2]
        block_size = next((s["block_size"] for s in stats if s), self.core.config.block_size)
        hashes = (prefix_hashes(prompt_ids, request.cache_salt or "", block_size)
                  if prompt_ids else [])
        hits = [leading_hits(hashes, self._cached(r, s)) for r, s in
                zip(candidate_replicas, stats)]
        route = RouteRequest(request.tier, len(prompt_ids or ()), hashes,
                             request.targets.ttft_p99_s)
        pick = self.core.choose(route, loads, hits, time.time())
        rest = [r for i, r in enumerate(candidate_replicas) if i != pick]
        return [[candidate_replicas[pick]], rest]

    def _cached(self, replica: RunningReplica, stats: dict) -> frozenset[int]:
        """The replica's published hashes as a set, rebuilt only when it publishes again."""
        at = stats.get("load", {}).get("at", 0.0)
        key = replica.replica_id
        held = self._sets.get(key)
        if held is None or held[0] != at:
            held = self._sets[key] = (at, frozenset(stats.get("hashes", ())))
        return held[1]


def deploy(config: dict[str, Any], *, num_replicas: int = 2, name: str = "laser",
           num_cpus: float = 1.0, num_gpus: float = 0.0, stats_period_s: float = 0.5,
           router_kwargs: dict[str, Any] | None = None) -> Any:
    """Run the engine deployment on the connected Ray cluster; returns its handle."""
    router = {"request_router_class": LaserRequestRouter,
              "request_router_kwargs": router_kwargs or {},
              "request_routing_stats_period_s": stats_period_s,
              "request_routing_stats_timeout_s": max(1.0, 2 * stats_period_s)}
    deployment: Any = serve.deployment(EngineReplica)  # ray's overloads type it as a decorator
    app = deployment.options(
        name="EngineReplica", num_replicas=num_replicas,
        ray_actor_options={"num_cpus": num_cpus, "num_gpus": num_gpus},
        request_router_config=router, health_check_period_s=2.0,
        max_ongoing_requests=256).bind(config)
    return serve.run(app, name=name, route_prefix=None)
