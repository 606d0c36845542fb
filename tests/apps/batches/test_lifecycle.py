"""A batch from creation to its terminal status, with the scripted engine and the in-test queue:
completion, line-level refusals, redelivery (exactly once), expiry, cancel, resume, cleanup."""

from __future__ import annotations

import datetime as dt
import json
import threading
import time

import pytest
from django.utils import timezone

from apps.batches import services
from apps.batches.execution import ChunkRunner, chunk_run
from apps.batches.finalize import batch_finalize
from apps.batches.models import Batch, BatchFile, BatchLine
from apps.batches.selectors import request_counts
from apps.batches.storage import content_chunks
from apps.batches.sweep import cleanup, resume, sweep
from inference.errors import EngineOverloaded
from inference.request import Tier
from tests.apps.batches.conftest import chat_line

pytestmark = pytest.mark.django_db


def _create(cold, upload, rows, window="24h"):
    return services.batch_create(tenant=cold.tenant, api_key=cold.key,
                                 input_file_id=upload(rows).uid,
                                 endpoint="/v1/chat/completions", completion_window=window)


def _lines(file_uid: str | None) -> list[dict]:
    if file_uid is None:
        return []
    content = b"".join(content_chunks(BatchFile.objects.get(uid=file_uid).pk))
    return [json.loads(x) for x in content.decode().splitlines()]


def _file_uid(batch, which):
    batch.refresh_from_db()
    found = getattr(batch, which)
    return found.uid if found else None


def test_batch_runs_to_completed_with_output_joined_on_custom_id(cold, upload, queue, engine,
                                                                 settings):
    settings.LASER_BATCH_CHUNK_LINES = 2
    batch = _create(cold, upload, [chat_line(f"r{i}", f"doc {i}") for i in range(5)])
    assert batch.status == "validating" and queue.names() == ["validate"]
    queue.run_one()
    batch.refresh_from_db()
    assert batch.status == "in_progress"
    assert queue.items == [("chunk", (batch.pk, 1, 5))]  # one turn queued per batch
    queue.run_one()  # runs 2 lines, then queues the rest behind the other batches
    assert queue.items == [("chunk", (batch.pk, 3, 5))]
    queue.drain()
    batch.refresh_from_db()
    assert batch.status == "completed" and batch.finished_at <= batch.deadline_at
    assert batch.on_time is True
    assert request_counts(batch) == {"total": 5, "completed": 5, "failed": 0}
    out = {x["custom_id"]: x for x in _lines(_file_uid(batch, "output_file"))}
    assert sorted(out) == [f"r{i}" for i in range(5)]
    body = out["r3"]["response"]["body"]
    assert out["r3"]["response"]["status_code"] == 200 and out["r3"]["error"] is None
    assert body["choices"][0]["message"]["content"] == "echo: doc 3"
    assert body["object"] == "chat.completion"
    assert batch.error_file is None
    # Every line went to the engine as a cold request carrying the batch deadline.
    assert {r.tier for r in engine.requests} == {Tier.COLD}
    assert {r.deadline for r in engine.requests} == {batch.deadline_at.timestamp()}
    assert batch.usage["output_tokens"] == sum(
        x["response"]["body"]["usage"]["completion_tokens"] for x in out.values())


def test_refused_lines_go_to_the_error_file_with_the_endpoint_response(cold, upload, queue,
                                                                       engine):
    rows = [chat_line("good", "fine"), chat_line("bad", "x", temperature=9)]
    batch = _create(cold, upload, rows)
    queue.drain()
    batch.refresh_from_db()
    assert batch.status == "completed"
    assert request_counts(batch) == {"total": 2, "completed": 1, "failed": 1}
    [err] = _lines(_file_uid(batch, "error_file"))
    assert err["custom_id"] == "bad" and err["response"]["status_code"] == 400
    assert err["response"]["body"]["error"]["param"] == "temperature"
    assert [x["custom_id"] for x in _lines(_file_uid(batch, "output_file"))] == ["good"]
    assert len(engine.requests) == 1  # the refused line never reached the engine


def test_file_level_errors_fail_the_batch(cold, upload, queue, engine):
    batch = _create(cold, upload, [chat_line("a", "x"), chat_line("a", "y")])
    queue.drain()
    batch.refresh_from_db()
    assert batch.status == "failed" and batch.failed_at is not None
    assert batch.errors["data"][0]["code"] == "duplicate_custom_id"
    assert not engine.requests and not batch.lines.exists()


def test_redelivered_chunk_writes_nothing_twice(cold, upload, queue, engine):
    batch = _create(cold, upload, [chat_line(f"r{i}", f"d{i}") for i in range(4)])
    queue.run_one()  # validate
    name, args = queue.items[0]
    first = chunk_run(batch_id=batch.pk, first=args[1], last=args[2])
    again = chunk_run(batch_id=batch.pk, first=args[1], last=args[2])  # a redelivery
    assert (first.written, again.written) == (4, 0)
    assert len(engine.requests) == 4


def test_chunk_killed_midway_is_completed_by_the_redelivery(cold, upload, queue, engine,
                                                            monkeypatch):
    """A worker dying after some writes: the redelivered chunk runs only the rest."""
    batch = _create(cold, upload, [chat_line(f"r{i}", f"d{i}") for i in range(6)])
    queue.run_one()
    real = ChunkRunner._write_success
    calls = {"n": 0}

    def dying(self, *a):
        calls["n"] += 1
        if calls["n"] >= 4:  # dead from the 4th write on; not an Exception: nothing swallows it
            raise SystemExit("worker killed")
        return real(self, *a)

    monkeypatch.setattr(ChunkRunner, "_write_success", dying)
    _, args = queue.items[0]
    with pytest.raises(SystemExit):
        chunk_run(batch_id=batch.pk, first=args[1], last=args[2])
    assert request_counts(batch)["completed"] == 3
    monkeypatch.setattr(ChunkRunner, "_write_success", real)
    queue.drain()  # the redelivered chunk, then finalize
    batch.refresh_from_db()
    out = _lines(_file_uid(batch, "output_file"))
    assert batch.status == "completed"
    assert sorted(x["custom_id"] for x in out) == [f"r{i}" for i in range(6)]


def test_expiry_keeps_finished_lines_and_expires_the_rest(cold, upload, queue, engine):
    batch = _create(cold, upload, [chat_line(f"r{i}", f"d{i}") for i in range(3)])
    queue.run_one()
    line = batch.lines.get(custom_id="r0")
    ChunkRunner(batch, [line], engine).run()  # one line finished before the deadline
    Batch.objects.filter(pk=batch.pk).update(deadline_at=timezone.now())
    assert sweep() == 1
    batch.refresh_from_db()
    assert batch.status == "expired" and batch.expired_at is not None
    assert batch.on_time is False
    assert [x["custom_id"] for x in _lines(_file_uid(batch, "output_file"))] == ["r0"]
    errors = _lines(_file_uid(batch, "error_file"))
    assert [(x["custom_id"], x["error"]["code"]) for x in errors] == [
        ("r1", "batch_expired"), ("r2", "batch_expired")]
    assert request_counts(batch) == {"total": 3, "completed": 1, "failed": 2}
    queue.drain()  # chunks arriving after expiry do nothing
    assert len(engine.requests) == 1


def test_a_line_refused_for_now_keeps_its_place_and_holds_later_lines(cold, upload, queue,
                                                                       engine, settings):
    """The engine refuses the first line once (saturated, Retry-After 1 s): no later line is
    sent in that wait, and the refused line goes first when it is over (it used to go to the
    back of the chunk, behind lines that then took every slot)."""
    settings.LASER_BATCH_CHUNK_CONCURRENCY = 2
    batch = _create(cold, upload, [chat_line(f"r{i}", f"d{i}") for i in range(5)])
    queue.run_one()  # validation
    name = {x.request_id: x.custom_id for x in batch.lines.all()}
    refused: list[str] = []

    def once(request):
        if name[request.request_id] == "r0" and not refused:
            refused.append(request.request_id)
            return EngineOverloaded("saturated", tier=Tier.COLD, retry_after_s=0.2)
        return None

    engine.refuse, engine.delay_s = once, 0.3
    queue.drain()
    batch.refresh_from_db()
    assert batch.status == "completed" and refused
    # r1 was already on its way with r0; nothing else started before r0's second try, which
    # went out with r2 (two slots), ahead of r3 and r4
    order = [name[r.request_id] for r in engine.requests]
    assert (order[0], set(order[1:3]), set(order[3:])) == ("r1", {"r0", "r2"}, {"r3", "r4"})


def test_a_database_error_inside_serving_retries_the_chunk_not_fails_it(cold, upload, queue,
                                                                        engine, monkeypatch):
    """The serving path wraps a database error met while resolving the contract in a 500;
    the chunk must still raise the database error, which the task retries (a faults run saw
    the task fail instead, its lines left pending)."""
    from django.db import OperationalError

    from apps.batches import execution
    from apps.core.errors import ServerError

    batch = _create(cold, upload, [chat_line("r0", "d0")])
    queue.run_one()  # validation

    async def down(**kwargs):
        try:
            raise OperationalError("terminating connection due to administrator command")
        except OperationalError as exc:
            raise ServerError("The server had an error processing your request.") from exc

    monkeypatch.setattr(execution, "serve", down)
    with pytest.raises(OperationalError):
        chunk_run(batch_id=batch.pk, first=0, last=10)
    assert batch.lines.get().status == "pending"


def test_running_chunk_stops_at_the_deadline_and_aborts_engine_work(cold, upload, queue,
                                                                    engine, settings):
    settings.LASER_BATCH_POLL_S = 0.05
    engine.delay_s = 30.0
    batch = _create(cold, upload, [chat_line("slow", "a b c d")])
    queue.run_one()
    Batch.objects.filter(pk=batch.pk).update(
        deadline_at=timezone.now() + dt.timedelta(seconds=0.3))
    queue.drain()
    batch.refresh_from_db()
    assert batch.status == "expired"
    assert engine.aborted == [batch.lines.get().request_id]


@pytest.mark.django_db(transaction=True)  # the chunk runs on its own thread (and connection)
def test_cancel_aborts_in_flight_lines_and_keeps_finished_ones(cold, upload, queue, engine,
                                                               settings):
    settings.LASER_BATCH_POLL_S = 0.05
    batch = _create(cold, upload, [chat_line("fast", "x")] +
                    [chat_line(f"slow{i}", "a b c d e f") for i in range(3)])
    queue.run_one()
    fast = batch.lines.get(custom_id="fast")
    ChunkRunner(batch, [fast], engine).run()
    engine.delay_s = 30.0
    slow = list(batch.lines.filter(custom_id__startswith="slow"))
    runner = ChunkRunner(batch, slow, engine)
    thread = threading.Thread(target=_run_and_close, args=(runner,))
    thread.start()
    deadline = time.monotonic() + 10
    while len(engine.requests) < 4 and time.monotonic() < deadline:
        time.sleep(0.01)
    cancelled = services.batch_cancel(tenant=cold.tenant, batch_id=batch.uid)
    assert cancelled.status == "cancelling"
    thread.join(10)
    assert not thread.is_alive() and runner.result.stopped == "cancelling"
    assert sorted(engine.aborted) == sorted(x.request_id for x in slow)
    batch_finalize(batch_id=batch.pk)
    batch.refresh_from_db()
    assert batch.status == "cancelled" and batch.cancelled_at is not None
    assert [x["custom_id"] for x in _lines(_file_uid(batch, "output_file"))] == ["fast"]
    assert {x["error"]["code"] for x in _lines(_file_uid(batch, "error_file"))} == {
        "batch_cancelled"}


def _run_and_close(runner: ChunkRunner) -> None:
    from django.db import connection

    try:
        runner.run()
    finally:
        connection.close()


def test_cancel_of_a_finished_batch_is_refused(cold, upload, queue, engine):
    batch = _create(cold, upload, [chat_line("a", "x")])
    queue.drain()
    from apps.core.errors import BadRequestError

    with pytest.raises(BadRequestError):
        services.batch_cancel(tenant=cold.tenant, batch_id=batch.uid)


def test_resume_re_enqueues_only_what_is_unfinished(cold, upload, queue, engine, settings):
    settings.LASER_BATCH_CHUNK_LINES = 2
    batch = _create(cold, upload, [chat_line(f"r{i}", "x") for i in range(4)])
    queue.run_one()
    queue.run_one()  # first chunk done, second lost with the process
    queue.items.clear()
    assert resume() == 1
    assert queue.items == [("chunk", (batch.pk, 3, 4))]
    queue.drain()
    batch.refresh_from_db()
    assert batch.status == "completed" and len(engine.requests) == 4


def test_cleanup_deletes_expired_files_and_results_but_keeps_the_batch(cold, upload, queue,
                                                                       engine):
    batch = _create(cold, upload, [chat_line("a", "x")])
    queue.drain()
    batch.refresh_from_db()
    later = batch.finished_at + dt.timedelta(seconds=batch.output_expires_after_s + 1)
    files, lines = cleanup(now=later)
    assert (files, lines) == (2, 1)  # input + output file; one line
    batch.refresh_from_db()
    assert batch.status == "completed" and batch.output_file is None
    assert not BatchLine.objects.filter(batch=batch).exists()


def test_every_line_and_the_batch_reach_the_slo_books(cold, upload, queue, engine):
    from apps.slo.models import BatchRecord, RequestRecord
    from apps.slo.reporting import flush_reports

    rows = [chat_line("a", "x"), chat_line("b", "y"), chat_line("bad", "z", temperature=9)]
    batch = _create(cold, upload, rows)
    queue.drain()
    flush_reports()
    records = RequestRecord.objects.filter(batch_id=batch.uid)
    assert sorted(records.values_list("outcome", flat=True)) == ["ok", "ok", "rejected_400"]
    assert set(records.values_list("tier_asked", flat=True)) == {"cold"}
    assert records.filter(deadline__isnull=False).count() == 3
    record = BatchRecord.objects.get(batch_id=batch.uid)
    assert (record.status, record.total, record.completed, record.failed) == (
        "completed", 3, 2, 1)
    assert record.finished_at is not None
