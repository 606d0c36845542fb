"""Faults that lose or leak nothing (issue 18): the SLO record writer across failed flushes, and
the rate limiter's Redis counters."""

from __future__ import annotations

import time
import uuid

import pytest
from django.db import OperationalError

pytestmark = pytest.mark.django_db


@pytest.fixture
def failing_writes(monkeypatch):
    """``failing_writes(n)``: the next ``n`` batch writes fail as a lost connection would."""
    from apps.slo import writer

    real = writer.write_batch

    def arm(n: int) -> list[int]:
        calls = []

        def write_batch(items):
            calls.append(len(items))
            if len(calls) <= n:
                raise OperationalError("server closed the connection unexpectedly")
            return real(items)

        monkeypatch.setattr(writer, "write_batch", write_batch)
        return calls

    return arm


def _reports(tenant, count: int):
    from apps.slo.report_types import RequestReport
    from apps.slo.reporting import report_request

    now = time.time()
    for i in range(count):
        report_request(RequestReport(
            request_id=f"fault-{uuid.uuid4().hex}", tenant_id=tenant.pk, tier_asked="hot",
            outcome="ok", arrival=now, finished_at=now + 1, prompt_tokens=1,
            completion_tokens=1))


def _stored(tenant) -> int:
    from apps.slo.models import RequestRecord

    return RequestRecord.objects.filter(tenant_id=tenant.pk).count()


def test_the_writer_keeps_its_buffer_across_a_failed_flush(tenant_factory, settings,
                                                           failing_writes):
    from apps.slo.reporting import flush_reports

    settings.LASER_SLO_AUTOFLUSH = False
    tenant = tenant_factory()
    failing_writes(1)
    _reports(tenant, 5)
    with pytest.raises(OperationalError):
        flush_reports()
    assert _stored(tenant) == 0
    assert flush_reports() == 5 and _stored(tenant) == 5  # the 5 kept across the failure
    assert flush_reports() == 0


def test_the_writer_loses_nothing_across_a_long_database_outage(tenant_factory, settings,
                                                                failing_writes):
    from apps.slo.reporting import flush_reports

    settings.LASER_SLO_AUTOFLUSH = False
    tenant = tenant_factory()
    failing_writes(5)
    _reports(tenant, 5)
    for _ in range(6):  # five failed flushes (the database is down), then one that works
        try:
            flush_reports()
        except OperationalError:
            pass
    assert _stored(tenant) == 5


@pytest.mark.redis
def test_settle_leaves_no_counter_without_a_ttl(settings):
    """Fixed (issue 16): settle sets the minute key's TTL again when the request outlived it."""
    import os

    import redis

    from apps.gateway.ratelimit import Ask, Limits, RedisLimiter

    url = os.environ["REDIS_URL"]
    limiter = RedisLimiter(url)
    tenant, now = f"ttl-{uuid.uuid4().hex[:8]}", time.time()
    verdict = limiter.check(tenant, "hot", Limits(None, None, None), Ask(50, 50), now)
    client = redis.Redis.from_url(url)
    client.delete(verdict.ticket.minute_key)  # the request outlived the window's key
    limiter.settle(verdict.ticket, 40, now + 130)
    keys = client.keys(f"laser:rl:{tenant}:*")
    try:
        assert keys and all(client.ttl(key) > 0 for key in keys)
    finally:
        client.delete(*keys)
