"""The periodic sweep re-enqueues the work of a batch whose messages are gone for good (a failed
enqueue after commit, a chunk acked at its time limit): separate workers have no resume. A
re-enqueued chunk next to its original still writes each ``custom_id`` once."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from django.utils import timezone

from apps.batches import execution, services
from apps.batches.execution import ChunkRunner, chunk_run
from apps.batches.models import Batch, BatchLine
from apps.batches.selectors import request_counts
from apps.batches.storage import content_chunks
from apps.batches.sweep import redispatch, sweep
from tests.apps.batches.conftest import chat_line

pytestmark = pytest.mark.django_db


def _create(cold, upload, n: int):
    rows = [chat_line(f"r{i}", f"d{i}") for i in range(n)]
    return services.batch_create(tenant=cold.tenant, api_key=cold.key,
                                 input_file_id=upload(rows).uid,
                                 endpoint="/v1/chat/completions", completion_window="24h")


def _age(batch, settings, extra_s: float = 1.0) -> None:
    """As if no task touched the batch for longer than the stall bound."""
    past = timezone.now() - dt.timedelta(seconds=settings.LASER_BATCH_STALL_S + extra_s)
    Batch.objects.filter(pk=batch.pk).update(progress_at=past)


def _custom_ids(batch) -> list[str]:
    batch.refresh_from_db()
    content = b"".join(content_chunks(batch.output_file_id))
    return [json.loads(x)["custom_id"] for x in content.decode().splitlines()]


def test_stall_bound_lets_redis_redeliver_first(settings):
    assert settings.LASER_BATCH_STALL_S > settings.CELERY_VISIBILITY_TIMEOUT
    assert settings.CELERY_VISIBILITY_TIMEOUT > settings.LASER_BATCH_CHUNK_HARD_LIMIT_S
    assert execution.HEARTBEAT_S < settings.LASER_BATCH_STALL_S


def test_sweep_re_enqueues_a_lost_chunk_once_per_stall_bound(cold, upload, queue, engine,
                                                             settings):
    settings.LASER_BATCH_CHUNK_LINES = 2
    batch = _create(cold, upload, 4)
    queue.run_one()  # validate: two chunks
    queue.run_one()  # the first chunk runs
    queue.items.clear()  # the second one's message is gone for good
    sweep()
    assert queue.items == []  # not stalled yet
    _age(batch, settings)
    sweep()
    assert queue.items == [("chunk", (batch.pk, 3, 4))]
    sweep()
    assert len(queue.items) == 1  # the re-enqueue reset the clock
    queue.drain()
    batch.refresh_from_db()
    assert batch.status == "completed" and len(engine.requests) == 4
    assert _custom_ids(batch) == ["r0", "r1", "r2", "r3"]


def test_a_re_enqueued_chunk_next_to_its_original_writes_each_custom_id_once(
        cold, upload, queue, engine, settings):
    batch = _create(cold, upload, 4)
    queue.run_one()  # validate; the chunk message is only slow, not lost
    _age(batch, settings)
    assert redispatch() == 1
    assert queue.names() == ["chunk", "chunk"]  # the original and the duplicate
    queue.drain()
    batch.refresh_from_db()
    assert batch.status == "completed" and len(engine.requests) == 4  # the second one skipped
    assert _custom_ids(batch) == ["r0", "r1", "r2", "r3"]


def test_duplicate_chunks_running_at_once_write_each_line_once(cold, upload, queue, engine,
                                                               settings):
    batch = _create(cold, upload, 4)
    queue.run_one()
    queue.items.clear()
    # Both read the same pending lines before either writes: the engine runs them twice,
    # the conditional writes keep one result each.
    pending = [list(batch.lines.order_by("line_no")) for _ in range(2)]
    written = [ChunkRunner(batch, lines, engine).run().written for lines in pending]
    assert written == [4, 0] and len(engine.requests) == 8
    _age(batch, settings)
    redispatch()
    queue.drain()  # no pending line left: finalization
    batch.refresh_from_db()
    assert batch.status == "completed"
    assert _custom_ids(batch) == ["r0", "r1", "r2", "r3"]
    assert request_counts(batch) == {"total": 4, "completed": 4, "failed": 0}


def test_running_chunks_keep_their_batch_from_being_re_enqueued(cold, upload, queue, engine,
                                                                settings, monkeypatch):
    settings.LASER_BATCH_CHUNK_LINES = 2
    batch = _create(cold, upload, 4)
    queue.run_one()
    _age(batch, settings)
    chunk_run(batch_id=batch.pk, first=1, last=2)  # a chunk starting marks progress
    assert redispatch() == 0
    _age(batch, settings)
    monkeypatch.setattr(execution, "HEARTBEAT_S", 0.0)  # and so does one still running
    ChunkRunner(batch, list(batch.lines.filter(line_no=3)), engine).run()
    assert redispatch() == 0


def test_a_lost_validation_is_re_enqueued(cold, upload, queue, engine, settings):
    batch = _create(cold, upload, 2)
    queue.items.clear()
    _age(batch, settings)
    sweep()
    assert queue.items == [("validate", (batch.pk,))]
    queue.drain()
    batch.refresh_from_db()
    assert batch.status == "completed"


def test_redispatch_is_bounded_per_run_oldest_first(cold, upload, queue, engine, settings,
                                                    django_assert_max_num_queries):
    settings.LASER_BATCH_SWEEP_REDISPATCH = 1
    older, newer = _create(cold, upload, 1), _create(cold, upload, 1)
    queue.drain()  # both complete
    idle = [_create(cold, upload, 1) for _ in range(5)]
    queue.items.clear()  # every validation lost
    _age(idle[1], settings, extra_s=60)
    _age(idle[3], settings)
    with django_assert_max_num_queries(8):  # no work per idle or finished batch
        assert redispatch() == 1
    assert queue.items == [("validate", (idle[1].pk,))]
    assert redispatch() == 1 and queue.items[-1] == ("validate", (idle[3].pk,))
    assert redispatch() == 0
    assert {older.pk, newer.pk}.isdisjoint(args[0] for _, args in queue.items)


def test_a_batch_past_its_deadline_expires_instead(cold, upload, queue, engine, settings):
    batch = _create(cold, upload, 2)
    queue.run_one()
    queue.items.clear()
    _age(batch, settings)
    Batch.objects.filter(pk=batch.pk).update(deadline_at=timezone.now())
    sweep()
    batch.refresh_from_db()
    assert batch.status == "expired" and queue.items == []
    assert set(BatchLine.objects.filter(batch=batch).values_list("status", flat=True)) == {
        "expired"}
