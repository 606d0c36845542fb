"""Laser's replica router: which engine replica takes a request. Plain Python over plain data,
so the same code runs in the Ray Serve request router and in the cluster simulator.

Each replica publishes a ``ReplicaLoad`` (its queue per tier, what it can hold for hot) and the
block hashes it has cached (``inference.kv.block_manager.prefix_hashes``, stable across
processes). Per request the router weighs three things:

- the prefix-cache hit: leading blocks of the prompt a replica holds save their prefill;
- the load per tier: queued hot prefill delays a hot first token, hot streams past the
  replica's ``hot_capacity`` stretch every hot TBT;
- the tier's contract: hot goes, among replicas with room for another hot stream within hot's
  TBT (``hot_capacity``), to the earliest estimated first token, its cached prefix discounted:
  a conversation stays with its KV unless that replica is hot-saturated or its queue costs
  more than the prefill the cache saves. Warm goes to the earliest first token; cold fills
  where hot is light.

Stats older than ``stale_s`` are not trusted: with none fresh, the router falls back to a
rendezvous hash of the prompt's first block (or round robin), which needs no stats at all.
Between two publications the router counts what it sent itself, so a burst does not all go to
the replica that looked idlest at the last publication.
"""

from __future__ import annotations

import itertools
from collections.abc import Container, Sequence
from dataclasses import dataclass, field
from hashlib import blake2b

from inference.request import Tier


@dataclass(frozen=True, slots=True)
class ReplicaLoad:
    """What one replica published at time ``at`` (seconds, the router's clock)."""

    at: float
    running: int = 0
    waiting: int = 0
    hot: int = 0  # hot requests running or waiting
    hot_prefill_tokens: int = 0  # prompt tokens of hot requests not computed yet
    prefill_tokens: int = 0  # the same, every tier
    hot_capacity: int = 64  # hot streams it holds with hot's TBT kept
    prefill_tps: float = 10_000.0  # prompt tokens a second at a full step budget


@dataclass(frozen=True, slots=True)
class RouteRequest:
    tier: Tier
    prompt_tokens: int
    block_hashes: Sequence[int] = ()  # prefix_hashes(prompt, salt, block_size)
    ttft_budget_s: float = 0.2  # the queueing hot may spend before its first token


@dataclass(frozen=True, slots=True)
class RouterConfig:
    block_size: int = 16
    stale_s: float = 2.0  # stats older than this are not trusted
    cold_hot_share: float = 0.5  # cold avoids replicas whose hot share is above this

    def __post_init__(self) -> None:
        if self.block_size < 1 or not self.stale_s > 0:
            raise ValueError("block_size and stale_s must be positive")


def leading_hits(hashes: Sequence[int], cached: Container[int]) -> int:
    """How many leading blocks of a prompt a replica holds (its cache matches a prefix)."""
    n = 0
    for h in hashes:
        if h not in cached:
            break
        n += 1
    return n


def rendezvous(key: int, replicas: int) -> int:
    """Highest-random-weight choice of a replica for ``key``: stable as replicas come and go."""
    def weight(i: int) -> bytes:
        return blake2b(f"{key}:{i}".encode(), digest_size=8).digest()
    return max(range(replicas), key=weight)


@dataclass(slots=True)
class _Sent:
    """What the router sent a replica since that replica's last publication."""

    at: float
    hot: int = 0
    tokens: int = 0  # prompt tokens not cached there
    hot_tokens: int = 0


@dataclass(slots=True)
class LaserRouter:
    config: RouterConfig = field(default_factory=RouterConfig)
    _sent: dict[int, _Sent] = field(default_factory=dict)
    _rr: itertools.count = field(default_factory=itertools.count)

    def choose(self, req: RouteRequest, loads: Sequence[ReplicaLoad], hits: Sequence[int],
               now: float) -> int:
        """Index of the replica for ``req``; ``hits[i]``: leading blocks replica i holds."""
        fresh = [i for i, load in enumerate(loads) if now - load.at <= self.config.stale_s]
        if not fresh:
            pick = (rendezvous(req.block_hashes[0], len(loads)) if req.block_hashes
                    else next(self._rr) % len(loads))
        elif req.tier is Tier.HOT:
            pick = self._hot(req, loads, hits, fresh)
        elif req.tier is Tier.COLD:
            pick = self._cold(req, loads, hits, fresh)
        else:
            pick = min(fresh, key=lambda i: (self._ttft(req, i, loads[i], hits[i], hot=False),
                                             loads[i].running))
        self._count(pick, req, loads[pick], hits[pick])
        return pick

    # ---- per tier ----------------------------------------------------------------------------
    def _hot(self, req: RouteRequest, loads: Sequence[ReplicaLoad], hits: Sequence[int],
             fresh: list[int]) -> int:
        ttft = {i: self._ttft(req, i, loads[i], hits[i], hot=True) for i in fresh}
        count = {i: self._hot_count(i, loads[i]) for i in fresh}
        room = [i for i in fresh if count[i] < loads[i].hot_capacity]
        if room:  # the earliest first token, the cached prefix discounted; then the cache
            return min(room, key=lambda i: (ttft[i], -hits[i], count[i]))
        # every replica hot-saturated: the least crowded, then the earliest first token
        return min(fresh, key=lambda i: (count[i] / loads[i].hot_capacity, ttft[i]))

    def _cold(self, req: RouteRequest, loads: Sequence[ReplicaLoad], hits: Sequence[int],
              fresh: list[int]) -> int:
        share = {i: self._hot_count(i, loads[i]) / loads[i].hot_capacity for i in fresh}
        light = [i for i in fresh if share[i] <= self.config.cold_hot_share] or fresh
        return min(light, key=lambda i: (self._ttft(req, i, loads[i], hits[i], hot=False),
                                         share[i]))

    # ---- estimates ---------------------------------------------------------------------------
    def _ttft(self, req: RouteRequest, i: int, load: ReplicaLoad, hit: int, *,
              hot: bool) -> float:
        """Seconds of prefill ahead of this request's first token on replica ``i``: hot waits
        only for hot (it preempts the rest), other tiers for everything queued."""
        sent = self._since(i, load)
        ahead = (load.hot_prefill_tokens + sent.hot_tokens if hot
                 else load.prefill_tokens + sent.tokens)
        own = max(1, req.prompt_tokens - hit * self.config.block_size)
        return (ahead + own) / load.prefill_tps

    def _hot_count(self, i: int, load: ReplicaLoad) -> int:
        return load.hot + self._since(i, load).hot

    def _since(self, i: int, load: ReplicaLoad) -> _Sent:
        s = self._sent.get(i)
        return s if s is not None and s.at == load.at else _Sent(load.at)

    def _count(self, i: int, req: RouteRequest, load: ReplicaLoad, hit: int) -> None:
        s = self._sent[i] = self._since(i, load)
        own = max(1, req.prompt_tokens - hit * self.config.block_size)
        s.tokens += own
        if req.tier is Tier.HOT:
            s.hot += 1
            s.hot_tokens += own
