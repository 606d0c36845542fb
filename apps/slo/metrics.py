"""Prometheus metrics on ``/metrics`` (bearer ``LASER_METRICS_TOKEN`` or a staff session).

Per-request series (TTFT, TBT, queue-time histograms; requests, tokens and demotions counters)
are observed by the report writer thread, off the request's path. SLO attainment gauges, and the
engine gauges the gateway registers here (``apps/gateway/metrics.py``), are collected at scrape
time, only by the (sync) view: under ASGI Django runs it on its sync thread, where the ORM and
``async_to_sync`` are allowed. Nothing here may scrape on an event loop's thread.
"""

from __future__ import annotations

import datetime as dt
import hmac
import logging
from collections.abc import Iterable, Iterator
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

logger = logging.getLogger(__name__)
REGISTRY = CollectorRegistry(auto_describe=True)
LABELS = ("tenant", "tier")
_LATENCY = (0.01, 0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1, 2, 5, 10, 30, 60)

TTFT = Histogram("laser_ttft_seconds", "Time to first token.", LABELS, buckets=_LATENCY,
                 registry=REGISTRY)
TBT = Histogram("laser_tbt_p99_seconds", "Per-request P99 time between tokens.", LABELS,
                buckets=_LATENCY, registry=REGISTRY)
QUEUE = Histogram("laser_queue_seconds", "Arrival to first schedule.", LABELS,
                  buckets=_LATENCY, registry=REGISTRY)
REQUESTS = Counter("laser_requests", "Finished requests by outcome.", (*LABELS, "outcome"),
                   registry=REGISTRY)
TOKENS = Counter("laser_tokens", "Tokens by kind (prompt, completion).", (*LABELS, "kind"),
                 registry=REGISTRY)
DEMOTIONS = Counter("laser_demotions", "Requests demoted to a lower tier.", LABELS,
                    registry=REGISTRY)

def _slugs(tenant_ids: Iterable[int]) -> dict[int, str]:
    """Tenant label values; one query per batch (ids are never cached: tests and SQLite may
    reuse an id for a different tenant)."""
    from apps.tenants.models import Tenant

    ids = set(tenant_ids)
    return dict(Tenant.objects.filter(pk__in=ids).values_list("pk", "slug")) if ids else {}


def observe_reports(reports: Iterable[Any]) -> None:
    """Fold written reports into the per-request series (called by the writer thread)."""
    reports = list(reports)
    slugs = _slugs(int(r.tenant_id) for r in reports)
    for r in reports:
        labels = (slugs.get(int(r.tenant_id), str(r.tenant_id)), r.tier_asked)
        REQUESTS.labels(*labels, r.outcome).inc()
        TOKENS.labels(*labels, "prompt").inc(r.prompt_tokens or 0)
        TOKENS.labels(*labels, "completion").inc(r.completion_tokens or 0)
        if r.ttft_s is not None:
            TTFT.labels(*labels).observe(r.ttft_s)
        if r.tbt_p99_s is not None:
            TBT.labels(*labels).observe(r.tbt_p99_s)
        if r.queue_s is not None:
            QUEUE.labels(*labels).observe(r.queue_s)
        if r.demoted:
            DEMOTIONS.labels(*labels).inc()


class _AttainmentCollector(Collector):
    """SLO attainment per tenant and tier, computed when Prometheus scrapes."""

    def describe(self) -> Iterator[Any]:
        """The family without reading anything. Without it the ``auto_describe`` registry
        would call ``collect`` on ``register``, i.e. at import, and the first import happens
        while resolving the first request's URL, on the ASGI server's event loop."""
        yield _attainment_family()

    def collect(self) -> Iterator[Any]:
        yield from self._attainment()

    def _attainment(self) -> Iterator[Any]:
        from apps.slo import fulfilment

        now = timezone.now()
        family = _attainment_family()
        try:
            rows = fulfilment.series("minute", now - dt.timedelta(hours=1), now)
        except Exception:
            logger.warning("attainment unavailable for /metrics", exc_info=True)
            rows = []
        groups: dict[tuple[int, str], list[fulfilment.WindowRow]] = {}
        for row in rows:
            groups.setdefault((row["tenant_id"], row["tier"]), []).append(row)
        slugs = _slugs(tenant_id for tenant_id, _ in groups)
        for (tenant_id, tier), group in sorted(groups.items()):
            value = fulfilment.attainment(group, tier)["attainment"]
            if value is not None:
                family.add_metric([slugs.get(tenant_id, str(tenant_id)), tier], value)
        yield family


def _attainment_family() -> GaugeMetricFamily:
    return GaugeMetricFamily(
        "laser_slo_attainment",
        "Share of minute windows in the last hour whose headline term was kept.",
        labels=["tenant", "tier"])


REGISTRY.register(_AttainmentCollector())


def _authorised(request: HttpRequest) -> bool:
    token = getattr(settings, "LASER_METRICS_TOKEN", "")
    header = request.headers.get("Authorization", "")
    if token and header.startswith("Bearer "):
        return hmac.compare_digest(header[7:].strip().encode(), token.encode())
    user = getattr(request, "user", None)
    from apps.slo.access import is_platform_staff

    return bool(user is not None and is_platform_staff(user))


def metrics_view(request: HttpRequest) -> HttpResponse:
    if not _authorised(request):
        response = HttpResponse("metrics need a bearer token or a staff session\n", status=401,
                                content_type="text/plain")
        response["WWW-Authenticate"] = 'Bearer realm="laser-metrics"'
        return response
    return HttpResponse(generate_latest(REGISTRY),
                        content_type="text/plain; version=0.0.4; charset=utf-8")
