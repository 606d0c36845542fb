"""/metrics: protected; per-request histograms by tenant and tier; engine and attainment gauges."""

from __future__ import annotations

import logging

import pytest
from django.test import AsyncClient, Client
from django.utils import timezone
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from apps.gateway import metrics as engine_metrics
from apps.slo import metrics
from apps.slo.services import contract_create, flush_reports, report_request
from inference.engine.stats import EngineStats

pytestmark = pytest.mark.django_db


def _sample(text: str, name: str, **labels: str) -> float | None:
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return sample.value
    return None


def test_metrics_need_a_token_or_staff(client, user_factory, tenant_factory, settings):
    settings.LASER_METRICS_TOKEN = "s3cret"
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer s3cret").status_code == 200
    member = Client()
    member.force_login(user_factory(tenant=tenant_factory(), role="admin", is_staff=True))
    assert member.get("/metrics").status_code == 401  # a tenant admin is not platform staff
    staff = Client()
    staff.force_login(user_factory(is_staff=True))
    assert staff.get("/metrics").status_code == 200


def test_reports_feed_histograms_counters_and_attainment(tenant_factory, make_report, settings):
    settings.LASER_METRICS_TOKEN = "t"
    tenant = tenant_factory(slug="metrics-tenant")
    contract_create(tenant=tenant, tier="hot")
    now = timezone.now().timestamp() - 1
    for ttft in (0.05, 0.15):
        report = make_report(tenant, ttft=ttft, tbt_p99_s=0.02, queue_s=0.01, demoted=True)
        report.arrival, report.finished_at = now - 1, now
        report_request(report)
    flush_reports()
    text = Client().get("/metrics", HTTP_AUTHORIZATION="Bearer t").content.decode()
    labels = {"tenant": "metrics-tenant", "tier": "hot"}
    assert _sample(text, "laser_ttft_seconds_count", **labels) == 2
    assert _sample(text, "laser_ttft_seconds_bucket", **labels, le="0.1") == 1  # 0.05 in, 0.15 out
    assert _sample(text, "laser_tbt_p99_seconds_count", **labels) == 2
    assert _sample(text, "laser_queue_seconds_count", **labels) == 2
    assert _sample(text, "laser_demotions_total", **labels) == 2
    assert _sample(text, "laser_requests_total", **labels, outcome="ok") == 2
    # Demoted, not demotable → both count against hot: the one window is missed.
    assert _sample(text, "laser_slo_attainment", **labels) == 0.0


def test_engine_gauges_come_from_the_engine_client(monkeypatch, settings):
    settings.LASER_METRICS_TOKEN = "t"
    stats = {"running": {"hot": 2, "warm": 1, "cold": 0}, "waiting": {"hot": 0, "cold": 5},
             "kv_usage": 0.25, "num_preemptions": 3, "tokens_per_s": 12.5, "ready": True}
    monkeypatch.setattr(engine_metrics, "engine_stats", lambda: stats)
    text = Client().get("/metrics", HTTP_AUTHORIZATION="Bearer t").content.decode()
    assert _sample(text, "laser_engine_running", tier="hot") == 2
    assert _sample(text, "laser_engine_waiting", tier="cold") == 5
    assert _sample(text, "laser_kv_usage_ratio") == 0.25
    assert _sample(text, "laser_engine_preemptions_total") == 3
    assert _sample(text, "laser_engine_ready") == 1


def test_no_engine_in_this_process_means_not_ready(settings, monkeypatch):
    monkeypatch.setattr("apps.gateway.metrics.current_engine_client", lambda: None)
    settings.LASER_METRICS_TOKEN = "t"
    text = Client().get("/metrics", HTTP_AUTHORIZATION="Bearer t").content.decode()
    assert _sample(text, "laser_engine_ready") == 0
    assert _sample(text, "laser_kv_usage_ratio") is None


class _RemoteStub:
    """The part of an ``EngineClient`` the metrics read: ``ready`` and ``stats_now()``."""

    ready = True
    not_ready_reason = None

    def __init__(self, stats: dict) -> None:
        self._stats, self.calls = stats, 0

    def stats_now(self) -> EngineStats:
        self.calls += 1
        return EngineStats.from_dict(self._stats)


_STATS = {"running": {"hot": 1}, "waiting": {"cold": 2}, "kv_usage": 0.5, "num_preemptions": 4,
          "tokens_per_s": 3.0, "ready": True}


@pytest.mark.asyncio
async def test_registering_the_collector_reads_nothing_on_the_event_loop(monkeypatch, caplog):
    # The first ASGI request imports this module while resolving its URL, on the server's loop:
    # registering there must not scrape (ORM: SynchronousOnlyOperation; AsyncToSync: RuntimeError).
    stub = _RemoteStub(_STATS)
    monkeypatch.setattr("apps.gateway.metrics.current_engine_client", lambda: stub)
    registry = CollectorRegistry(auto_describe=True)
    with caplog.at_level(logging.DEBUG):
        registry.register(engine_metrics.EngineCollector())
        registry.register(metrics._AttainmentCollector())
    assert stub.calls == 0
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    with pytest.raises(ValueError, match="Duplicated"):  # describe() still names the families
        registry.register(engine_metrics.EngineCollector())


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_metrics_over_asgi_with_a_remote_engine_log_no_error(monkeypatch, settings, caplog):
    settings.LASER_METRICS_TOKEN = "t"
    stub = _RemoteStub(_STATS)
    monkeypatch.setattr("apps.gateway.metrics.current_engine_client", lambda: stub)
    with caplog.at_level(logging.WARNING):
        response = await AsyncClient().get("/metrics", headers={"Authorization": "Bearer t"})
    assert response.status_code == 200
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert stub.calls == 1
    text = response.content.decode()
    names = {family.name for family in text_string_to_metric_families(text)}
    assert names >= {"laser_ttft_seconds", "laser_tbt_p99_seconds", "laser_queue_seconds",
                     "laser_requests", "laser_tokens", "laser_demotions", "laser_engine_ready",
                     "laser_engine_running", "laser_engine_waiting", "laser_kv_usage_ratio",
                     "laser_engine_tokens_per_second", "laser_engine_preemptions",
                     "laser_slo_attainment"}
    assert _sample(text, "laser_engine_waiting", tier="cold") == 2
    assert _sample(text, "laser_engine_preemptions_total") == 4
