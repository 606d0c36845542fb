"""Traces for cluster runs: the scenarios of ``sim.scenarios`` scaled to N replicas, and a
generated long-shared-prefix trace.

``shared_prefix``: hot requests to ``apps`` applications, each with a system prompt of
``prefix_tokens`` shared by all its requests (its tenant's salt), then a question of 50-400
tokens of its own; answers of 50-300 tokens. Apps are picked with Zipf(``skew``) popularity,
so the most popular app alone is more than one replica's work at cluster scale, and all
apps' prefixes together are more than one replica's KV cache: a router must both spread a
hot prefix and keep each prefix's requests on few replicas. Arrivals are Poisson at
``2 x load`` a second.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

from inference.request import Tier
from sim.scenarios import SCENARIOS
from sim.traces import TraceRequest


def shared_prefix(load: float = 1.0, duration_s: float = 600.0, seed: int = 0,
                  root: Path | None = None, *, apps: int = 200, prefix_tokens: int = 4096,
                  skew: float = 0.8) -> list[TraceRequest]:
    rng = random.Random(seed)
    weights = [1 / (k + 1) ** skew for k in range(apps)]
    blocks = prefix_tokens // 16
    out: list[TraceRequest] = []
    t = 0.0
    while True:
        t += rng.expovariate(2.0 * load)
        if t >= duration_s:
            return out
        app = rng.choices(range(apps), weights)[0]
        prefix = tuple((app << 16) + i for i in range(blocks))
        out.append(TraceRequest(t, Tier.HOT, prefix_tokens + rng.randint(50, 400),
                                rng.randint(50, 300), prefix_blocks=prefix,
                                tenant=f"t{app % 8}"))


CLUSTER_SCENARIOS: dict[str, Callable[..., list[TraceRequest]]] = {
    "S2": SCENARIOS["S2"], "MT": SCENARIOS["MT"], "SP": shared_prefix}


def cluster_trace(scenario: str, load_per_replica: float, replicas: int, duration_s: float,
                  seed: int = 0) -> list[TraceRequest]:
    """``scenario`` at ``replicas`` times a one-replica load: the same mix, N times the rate."""
    return CLUSTER_SCENARIOS[scenario](load_per_replica * replicas, duration_s, seed)
