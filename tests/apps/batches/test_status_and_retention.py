"""``manage.py batch_status`` (progress in a terminal) and retention: files and results expire
after ``output_expires_after`` and the periodic cleanup task deletes them; a finished batch
keeps its ``request_counts`` and ``model`` on its row."""

from __future__ import annotations

import datetime as dt
import importlib
import io

import pytest
from django.apps import apps as app_registry
from django.core.management import CommandError, call_command

from apps.batches import services
from apps.batches.execution import ChunkRunner
from apps.batches.models import Batch, BatchFile, BatchLine
from apps.batches.sweep import cleanup
from tests.apps.batches.conftest import chat_line

pytestmark = pytest.mark.django_db


def _create(cold, upload, rows, **extra):
    return services.batch_create(tenant=cold.tenant, api_key=cold.key,
                                 input_file_id=upload(rows).uid,
                                 endpoint="/v1/chat/completions", completion_window="24h",
                                 **extra)


def _status(*args: str) -> str:
    out = io.StringIO()
    call_command("batch_status", *args, stdout=out)
    return out.getvalue()


def test_batch_status_shows_progress_while_running_and_the_outcome_at_the_end(
        cold, upload, queue, engine):
    batch = _create(cold, upload, [chat_line(f"r{i}", "x") for i in range(4)])
    assert "0/0 done" in _status(batch.uid) and "validating" in _status(batch.uid)
    queue.run_one()  # validate
    ChunkRunner(batch, list(batch.lines.order_by("line_no")[:1]), engine).run()
    running = _status(batch.uid)
    assert f"[{'#' * 10}{'.' * 30}]  25.0%  1/4 done (1 ok, 0 failed)  in_progress" in running
    assert "deadline in 23h 59m" in running
    queue.drain()
    assert "100.0%  4/4 done (4 ok, 0 failed)  completed  on time" in _status(batch.uid,
                                                                           "--watch")


def test_batch_status_of_an_unknown_batch_is_an_error(db):
    with pytest.raises(CommandError, match="No such batch"):
        _status("batch_nope")


def test_results_expire_after_output_expires_after_and_the_input_file_later(
        cold, upload, queue, engine):
    two_hours = 7200
    batch = _create(cold, upload, [chat_line("a", "x"), chat_line("bad", "x", temperature=9)],
                    output_expires_after={"anchor": "created_at", "seconds": two_hours})
    queue.drain()
    batch.refresh_from_db()
    outputs = [batch.output_file.uid, batch.error_file.uid]
    ttl = batch.output_file.expires_at - batch.output_file.created_at
    assert abs(ttl.total_seconds() - two_hours) < 1
    assert cleanup(now=batch.finished_at + dt.timedelta(seconds=two_hours - 60)) == (0, 0)
    assert cleanup(now=batch.finished_at + dt.timedelta(seconds=two_hours + 60)) == (2, 2)
    assert not BatchFile.objects.filter(uid__in=outputs).exists()
    assert not BatchLine.objects.filter(batch=batch).exists()
    assert BatchFile.objects.filter(uid=batch.input_file_uid).exists()  # 30 days by default
    batch.refresh_from_db()
    assert batch.status == "completed" and batch.output_file is None


def test_cleanup_and_sweep_are_periodic_celery_tasks(settings):
    from laser_platform.celery import app

    schedule = {entry["task"]: entry["schedule"] for entry in
                settings.CELERY_BEAT_SCHEDULE.values()}
    assert schedule["batches.cleanup"] == dt.timedelta(hours=1)
    assert schedule["batches.sweep"] == dt.timedelta(seconds=settings.LASER_BATCH_SWEEP_S)
    app.loader.import_default_modules()
    assert {"batches.cleanup", "batches.sweep"} <= set(app.tasks)


def test_migration_backfills_counts_and_model_of_finished_batches(cold, upload, queue, engine):
    migration = importlib.import_module("apps.batches.migrations.0002_progress_and_kept_counts")
    done = _create(cold, upload, [chat_line("a", "x"), chat_line("bad", "x", temperature=9)])
    queue.drain()
    running = _create(cold, upload, [chat_line("b", "x")])
    queue.run_one()  # validated, not run
    Batch.objects.update(request_counts=None, model=None, progress_at=None)
    migration.backfill(app_registry, None)
    done.refresh_from_db()
    running.refresh_from_db()
    assert done.request_counts == {"total": 2, "completed": 1, "failed": 1}
    assert done.model == running.model is not None
    assert running.request_counts is None and running.progress_at is not None
    assert done.progress_at is None
