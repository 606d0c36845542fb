"""The engine's gauges on ``/metrics``: read through ``EngineClient.stats_now()`` at scrape time
and registered on the SLO app's registry (``apps/slo/metrics.py``) when the gateway app loads."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from apps.gateway.engine_client import current_engine_client
from apps.slo.metrics import REGISTRY

logger = logging.getLogger(__name__)


def engine_stats() -> dict | None:
    """This process's engine client's stats as a dict, or None when no engine is up here.

    ``stats_now()`` is synchronous on every client (the remote one reads the worker registry
    over its own connection), so this is safe on any thread and never touches an event loop.
    """
    client = current_engine_client()
    if client is None or not client.ready:
        return None
    try:
        return client.stats_now().to_dict()
    except Exception:
        logger.warning("engine stats unavailable for /metrics", exc_info=True)
        return None


class EngineCollector(Collector):
    """Running and waiting requests per tier, KV usage, tokens/s and preemptions."""

    def describe(self) -> Iterator[Any]:
        """The families without reading anything (``register`` calls it, see slo.metrics)."""
        return self._families({"ready": True})

    def collect(self) -> Iterator[Any]:
        return self._families(engine_stats())

    @staticmethod
    def _families(stats: dict | None) -> Iterator[Any]:
        ready = GaugeMetricFamily("laser_engine_ready", "1 when the engine serves here.")
        ready.add_metric([], 1.0 if stats and stats.get("ready", True) else 0.0)
        yield ready
        if not stats:
            return
        for name in ("running", "waiting"):
            family = GaugeMetricFamily(f"laser_engine_{name}", f"Requests {name} per tier.",
                                       labels=["tier"])
            for tier, count in (stats.get(name) or {}).items():
                family.add_metric([str(tier)], float(count))
            yield family
        yield GaugeMetricFamily("laser_kv_usage_ratio", "Fraction of KV blocks in use.",
                                value=float(stats.get("kv_usage", 0.0)))
        yield GaugeMetricFamily("laser_engine_tokens_per_second", "Generated tokens/s.",
                                value=float(stats.get("tokens_per_s", 0.0)))
        yield CounterMetricFamily("laser_engine_preemptions", "Preemptions since start.",
                                  value=float(stats.get("num_preemptions", 0)))


def install() -> None:
    """Register the engine gauges on ``/metrics`` (once, from ``GatewayConfig.ready``)."""
    REGISTRY.register(EngineCollector())
