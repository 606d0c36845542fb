"""The routers a cluster run compares: Laser's (``inference.fleet.router``) and the baselines
operators run today, each given the same published loads and counting what it sent itself
since a replica's last publication.

- ``round-robin``: a Kubernetes Service, Ray Serve's default without stats;
- ``least-loaded``: fewest requests running + waiting (vLLM production-stack's session-less
  router, Ray Serve's power-of-two-choices taken to all replicas);
- ``prefix-affinity``: a rendezvous hash of the prompt's first block (a conversation and a
  shared system prompt stick to one replica, whatever its load);
- ``oracle``: the replica holding the longest cached prefix now, least loaded among equals
  (what a cache-only router could at best reach for the hit rate).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Protocol

from inference.fleet.router import LaserRouter, ReplicaLoad, RouterConfig, RouteRequest, rendezvous


class ClusterRouter(Protocol):
    needs_hits: bool

    def choose(self, req: RouteRequest, loads: Sequence[ReplicaLoad], hits: Sequence[int],
               now: float) -> int: ...


class _Counting:
    """Requests sent to each replica since its last publication, added to its load."""

    needs_hits = False

    def __init__(self) -> None:
        self._sent: dict[int, tuple[float, int]] = {}

    def busy(self, i: int, load: ReplicaLoad) -> int:
        at, n = self._sent.get(i, (load.at, 0))
        return load.running + load.waiting + (n if at == load.at else 0)

    def sent(self, i: int, load: ReplicaLoad) -> int:
        at, n = self._sent.get(i, (load.at, 0))
        self._sent[i] = (load.at, (n if at == load.at else 0) + 1)
        return i


class RoundRobin:
    needs_hits = False

    def __init__(self) -> None:
        self._next = itertools.count()

    def choose(self, req, loads, hits, now) -> int:
        return next(self._next) % len(loads)


class LeastLoaded(_Counting):
    def choose(self, req, loads, hits, now) -> int:
        i = min(range(len(loads)), key=lambda i: self.busy(i, loads[i]))
        return self.sent(i, loads[i])


class PrefixAffinity(_Counting):
    def choose(self, req, loads, hits, now) -> int:
        if not req.block_hashes:  # shorter than a block: nothing to stick to
            i = min(range(len(loads)), key=lambda i: self.busy(i, loads[i]))
        else:
            i = rendezvous(req.block_hashes[0], len(loads))
        return self.sent(i, loads[i])


class Oracle(_Counting):
    needs_hits = True

    def choose(self, req, loads, hits, now) -> int:
        i = min(range(len(loads)), key=lambda i: (-hits[i], self.busy(i, loads[i])))
        return self.sent(i, loads[i])


class _Laser(LaserRouter):
    needs_hits = True


ROUTERS = ("round-robin", "least-loaded", "prefix-affinity", "oracle", "laser")


def make_router(name: str, block_size: int) -> ClusterRouter:
    if name == "laser":
        return _Laser(RouterConfig(block_size=block_size))
    table: dict[str, Callable[[], ClusterRouter]] = {
        "round-robin": RoundRobin, "least-loaded": LeastLoaded,
        "prefix-affinity": PrefixAffinity, "oracle": Oracle}
    if name not in table:
        raise ValueError(f"unknown router {name!r}; known: {', '.join(ROUTERS)}")
    return table[name]()
