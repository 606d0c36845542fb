from __future__ import annotations

import threading

import pytest
from asgiref.sync import async_to_sync

from apps.slo import report_types, reporting, stats
from apps.slo.models import BatchRecord, RequestRecord
from apps.slo.services import BatchReport, flush_reports, report_batch, report_request, tbt_stats


def test_tbt_stats_of_known_gaps():
    times = [0.0, 0.1, 0.3, 0.6, 1.0]  # gaps 0.1 0.2 0.3 0.4
    p50, p99, worst = tbt_stats(times)
    assert p50 == pytest.approx(0.2) and p99 == pytest.approx(0.4) and worst == pytest.approx(0.4)
    assert tbt_stats([5.0]) == (None, None, None)
    # n > 1 choices: gaps are pooled, never measured across choices
    assert tbt_stats([[0.0, 1.0], [10.0, 10.5]])[2] == pytest.approx(1.0)


def test_percentile_is_nearest_rank():
    values = list(range(1, 101))
    assert stats.percentile(values, 99) == 99
    assert stats.percentile(values, 50) == 50
    assert stats.percentile([3.0], 99) == 3.0
    assert stats.percentile([], 99) is None


def test_unknown_outcome_fails_in_the_caller(tenant_factory):
    with pytest.raises(ValueError, match="outcome"):
        report_types.RequestReport("r", 1, "hot", "fine", 0.0, 1.0)


@pytest.mark.django_db
def test_reports_reach_the_database_only_on_flush(tenant_factory, make_report):
    tenant = tenant_factory()
    report = make_report(tenant, ttft=0.25, tbt_p99_s=0.05)
    report_request(report)
    assert RequestRecord.objects.count() == 0  # nothing written on the caller's thread
    assert flush_reports() == 1
    record = RequestRecord.objects.get()
    assert record.request_id == report.request_id and record.ttft_s == pytest.approx(0.25)
    assert record.tier_served == "hot" and record.tbt_p99_s == 0.05


@pytest.mark.django_db
def test_report_from_async_code_does_no_orm(tenant_factory, make_report):
    tenant = tenant_factory()

    async def finish() -> None:
        report_request(make_report(tenant))  # would raise SynchronousOnlyOperation if it did

    async_to_sync(finish)()
    assert flush_reports() == 1


@pytest.mark.django_db
def test_one_bad_record_does_not_sink_the_batch(tenant_factory, make_report):
    tenant = tenant_factory()
    report_request(make_report(tenant))
    ghost = make_report(tenant)
    ghost.tenant_id = 10**9
    report_request(ghost)
    report_request(make_report(tenant))
    flush_reports()
    assert RequestRecord.objects.count() == 2


@pytest.mark.django_db
def test_batch_reports_upsert(tenant_factory):
    tenant = tenant_factory()
    base = {"batch_id": "b1", "tenant_id": tenant.pk, "created_at": 0.0, "deadline": 100.0,
            "total": 4}
    report_batch(BatchReport(status="in_progress", completed=1, **base))
    report_batch(BatchReport(status="completed", completed=4, finished_at=50.0, **base))
    flush_reports()
    batch = BatchRecord.objects.get()
    assert batch.status == "completed" and batch.on_time


@pytest.mark.django_db(transaction=True)
def test_writer_thread_and_stop_lose_nothing(tenant_factory, make_report, settings):
    settings.LASER_SLO_FLUSH_INTERVAL_S = 0.05
    tenant = tenant_factory()
    writer = reporting._Reporter()
    senders = [
        threading.Thread(target=lambda: [writer.enqueue(make_report(tenant)) for _ in range(50)])
        for _ in range(4)
    ]
    writer.start()
    for t in senders:
        t.start()
    for t in senders:
        t.join()
    writer.stop()  # clean shutdown: joins the thread, then writes what is left
    assert writer.pending() == 0
    assert RequestRecord.objects.count() == 200


@pytest.fixture
def quiet_writer(settings):
    """A reporter of its own, written only when the test flushes it."""
    settings.LASER_SLO_AUTOFLUSH = False
    return reporting._Reporter()


@pytest.mark.django_db
def test_a_full_buffer_drops_the_oldest_and_counts_them(quiet_writer, tenant_factory,
                                                         make_report, settings, caplog):
    settings.LASER_SLO_BUFFER_MAX = 3
    tenant = tenant_factory()
    for i in range(5):
        quiet_writer.enqueue(make_report(tenant, request_id=f"full-{i}"))
    assert quiet_writer.pending() == 3 and quiet_writer.dropped_total == 2
    assert quiet_writer.flush() == 3
    stored = set(RequestRecord.objects.values_list("request_id", flat=True))
    assert stored == {"full-2", "full-3", "full-4"}
    assert "2 reports were dropped" in caplog.text


@pytest.mark.django_db
def test_a_report_that_cannot_be_written_is_isolated_and_the_rest_written(
        quiet_writer, tenant_factory, make_report, caplog):
    tenant = tenant_factory()
    for i in range(7):
        report = make_report(tenant, request_id=f"batch-{i}")
        if i == 3:
            report.tenant_id = "not-a-tenant-id"  # the writer cannot even build its row
        quiet_writer.enqueue(report)
    assert quiet_writer.flush() == 6 and quiet_writer.pending() == 0
    assert RequestRecord.objects.filter(request_id__startswith="batch-").count() == 6
    assert "dropped SLO report batch-3" in caplog.text


@pytest.mark.django_db
def test_an_outage_backs_off_and_keeps_every_report(quiet_writer, tenant_factory, make_report,
                                                    settings, monkeypatch):
    from django.db import OperationalError

    from apps.slo import writer

    settings.LASER_SLO_FLUSH_INTERVAL_S, settings.LASER_SLO_FLUSH_MAX_BACKOFF_S = 1.0, 5.0
    tenant = tenant_factory()
    for _ in range(4):
        quiet_writer.enqueue(make_report(tenant))
    real = writer.write_batch

    def down(items):
        raise OperationalError("could not connect to server")

    monkeypatch.setattr(writer, "write_batch", down)
    waits = []
    for _ in range(4):
        assert quiet_writer.flush(raise_errors=False) == 0
        waits.append(quiet_writer.backoff_s())
    assert waits == [2.0, 4.0, 5.0, 5.0] and quiet_writer.pending() == 4
    monkeypatch.setattr(writer, "write_batch", real)
    assert quiet_writer.flush() == 4 and quiet_writer.backoff_s() == 1.0
    assert RequestRecord.objects.count() == 4
