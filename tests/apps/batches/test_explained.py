"""Batches that explain themselves (issue 43): a batch that fails validation carries ``errors``
naming each bad line and an error file with the same reasons; progress counts the lines as they
are checked; the web page's upload validates before it answers; a second validation of the same
batch queues no second turn."""

from __future__ import annotations

import json

import pytest

from apps.batches import services, validation
from apps.batches.models import Batch
from apps.batches.selectors import request_counts
from apps.batches.storage import content_chunks
from tests.apps.batches.conftest import chat_line

pytestmark = pytest.mark.django_db

TRUNCATED = json.dumps(chat_line("t", "cut"))[:40]
BAD_FILE = [chat_line("a", "fine"), TRUNCATED, "not json at all", chat_line("b", "fine")]


def _create(cold, upload, rows, **kwargs):
    return services.batch_create(tenant=cold.tenant, api_key=cold.key,
                                 input_file_id=upload(rows).uid,
                                 endpoint="/v1/chat/completions", completion_window="24h",
                                 **kwargs)


def test_a_failed_validation_names_each_bad_line_and_writes_an_error_file(cold, upload, queue):
    batch = _create(cold, upload, BAD_FILE)
    queue.drain()
    batch.refresh_from_db()
    assert batch.status == "failed"
    errors = batch.errors["data"]
    assert [(e["line"], e["code"]) for e in errors] == [(2, "invalid_json_line"),
                                                        (3, "invalid_json_line")]
    assert all(e["message"].startswith("Invalid JSON") for e in errors)
    assert batch.error_file is not None and batch.output_file is None
    lines = [json.loads(x) for x in b"".join(content_chunks(batch.error_file.pk)).splitlines()]
    assert [x["error"] for x in lines] == errors
    assert request_counts(batch) == {"total": 0, "completed": 0, "failed": 0}


def test_progress_counts_the_lines_as_they_are_checked(cold, upload, queue, monkeypatch):
    monkeypatch.setattr(validation, "PROGRESS_EVERY", 2)
    batch = _create(cold, upload, [chat_line(f"r{i}", "x") for i in range(5)])
    seen = []
    real = validation._refusal

    def watching(*args, **kwargs):
        seen.append(request_counts(Batch.objects.get(pk=batch.pk))["total"])
        return real(*args, **kwargs)

    monkeypatch.setattr(validation, "_refusal", watching)
    queue.run_one()
    assert seen == [0, 2, 2, 4, 4]  # the count read while each line was being checked
    batch.refresh_from_db()
    assert batch.status == "in_progress" and request_counts(batch)["total"] == 5


def test_the_web_upload_validates_before_it_answers(cold, upload, queue, settings,
                                                    django_capture_on_commit_callbacks):
    def create(rows):  # the view runs in autocommit: on_commit callbacks run at once
        with django_capture_on_commit_callbacks(execute=True):
            return _create(cold, upload, rows, validate_now=True)

    assert create(BAD_FILE).status == "failed" and queue.items == []  # nothing left to do
    assert create([chat_line("a", "x")]).status == "in_progress"
    assert queue.names() == ["chunk"]
    settings.LASER_BATCH_INLINE_VALIDATE_BYTES = 10
    assert create([chat_line("a", "x")]).status == "validating"
    assert queue.names()[-1] == "validate"


def test_a_second_validation_queues_no_second_turn(cold, upload, queue):
    batch = _create(cold, upload, [chat_line("a", "x")])
    queue.run_one()
    assert queue.names() == ["chunk"]
    # a duplicate that read "validating" before the first one moved the batch on
    line = validation.InputLine(1, "a", chat_line("a", "x")["body"])
    services._start(batch, [line])
    assert queue.names() == ["chunk"]
