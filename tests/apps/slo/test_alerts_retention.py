"""Breach alerts fire once per term and window; retention prunes records, keeps aggregates."""

from __future__ import annotations

import datetime as dt
import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
from django.core import mail

from apps.slo import alerts, fulfilment, retention
from apps.slo.models import AlertSettings, BreachAlert, RequestRecord, UsageDaily
from apps.slo.services import contract_create, flush_reports, report_request
from tests.apps.slo.conftest import T0

pytestmark = pytest.mark.django_db
HOUR = dt.timedelta(hours=1)


@pytest.fixture
def webhook():
    received: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
            length = int(self.headers["Content-Length"])
            received.append(json.loads(self.rfile.read(length)))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/hook", received
    server.shutdown()
    server.server_close()


def _materialise_and_alert(now, capture):
    with capture(execute=True):
        rows = fulfilment.materialise(now=now)
        return alerts.raise_breaches(rows)


def test_a_missed_term_alerts_once_per_window(tenant_factory, user_factory, make_report,
                                              webhook, settings, eager_celery,
                                              django_capture_on_commit_callbacks):
    settings.LASER_SLO_ALERT_WINDOWS = ["hour"]
    settings.LASER_SLO_WEBHOOK_ALLOWED_HOSTS = ["127.0.0.1"]  # the test's receiver is local
    url, received = webhook
    tenant = tenant_factory()
    user_factory(tenant=tenant, role="admin", email="ops@alpha.test")
    contract_create(tenant=tenant, tier="hot")
    AlertSettings.objects.create(tenant=tenant, webhook_url=url)
    for at in (10, 20, 30):
        report_request(make_report(tenant, at=at, ttft=0.9))  # P99 0.9 s > 0.2 s
    report_request(make_report(tenant, at=HOUR.seconds + 10, ttft=0.05))  # next hour is fine
    flush_reports()

    created = _materialise_and_alert(T0 + 3 * HOUR, django_capture_on_commit_callbacks)
    again = _materialise_and_alert(T0 + 3 * HOUR, django_capture_on_commit_callbacks)
    assert again == []
    assert sorted(a.term for a in created) == ["ttft_p99", "ttft_within"]
    assert BreachAlert.objects.count() == 2  # minute windows do not alert with this setting
    assert sorted(p["term"] for p in received) == ["ttft_p99", "ttft_within"]
    assert received[0]["tenant"] == tenant.slug and received[0]["window"] == "hour"
    assert len(mail.outbox) == 2 and mail.outbox[0].to == ["ops@alpha.test"]
    assert "missed" in mail.outbox[0].subject
    # Re-raising the same rows (a second worker racing) sends nothing either.
    rows = fulfilment.series("hour", T0, T0 + HOUR)
    assert alerts.raise_breaches([{**r, "final": True} for r in rows]) == []
    assert BreachAlert.objects.get(term="ttft_p99").webhook_status == "delivered: HTTP 204"


def test_disabled_alerts_are_recorded_but_not_sent(tenant_factory, make_report, settings,
                                                   eager_celery,
                                                   django_capture_on_commit_callbacks):
    settings.LASER_SLO_ALERT_WINDOWS = ["minute"]
    tenant = tenant_factory()
    contract_create(tenant=tenant, tier="hot")
    AlertSettings.objects.create(tenant=tenant, enabled=False, emails="x@y.test")
    report_request(make_report(tenant, ttft=0.9))
    flush_reports()
    assert _materialise_and_alert(T0 + HOUR, django_capture_on_commit_callbacks)
    assert mail.outbox == []


def test_retention_prunes_records_and_keeps_aggregates_and_usage(
        tenant_factory, api_key_factory, make_report, settings):
    settings.LASER_SLO_RETENTION_DAYS = 2
    tenant = tenant_factory()
    key, _ = api_key_factory(tenant=tenant)
    contract_create(tenant=tenant, tier="hot")
    old = [make_report(tenant, at=i, api_key_id=key.pk, ttft=0.1) for i in range(3)]
    recent = make_report(tenant, at=3 * 86400, ttft=0.1)
    for report in (*old, recent):
        report_request(report)
    flush_reports()
    day0 = fulfilment.series("day", T0, T0 + dt.timedelta(days=1))

    counts = retention.prune(now=T0 + dt.timedelta(days=3, hours=1))
    assert counts["records"] == 3
    assert list(RequestRecord.objects.values_list("request_id", flat=True)) == [recent.request_id]
    kept = fulfilment.series("day", T0, T0 + dt.timedelta(days=1))
    assert kept[0]["final"] and kept[0]["stats"] == day0[0]["stats"]
    usage = UsageDaily.objects.get(day=T0.date())
    assert (usage.requests, usage.prompt_tokens, usage.completion_tokens) == (3, 30, 60)
    assert usage.key_prefix == key.prefix


def test_nothing_is_pruned_before_it_is_materialised(tenant_factory, make_report, settings):
    settings.LASER_SLO_RETENTION_DAYS = 2
    tenant = tenant_factory()
    report_request(make_report(tenant, ttft=0.1))
    flush_reports()
    # "now" is the moment of the record: the day is open, nothing is due for deletion.
    assert retention.prune(now=T0 + dt.timedelta(minutes=5))["records"] == 0
    assert RequestRecord.objects.count() == 1
