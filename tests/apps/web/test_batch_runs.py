"""A batch started in the web app has no API key: its lines run as the member who started it
(through the same serving path), to completed with an output file the page offers. Tasks run
from the in-test queue against the scripted engine (see tests/apps/batches/conftest.py)."""

from __future__ import annotations

import json

import pytest

from tests.apps.batches.conftest import engine, queue  # noqa: F401 (fixtures)
from tests.apps.web.test_pages import _line, _upload

pytestmark = pytest.mark.django_db


def _started(client, django_capture_on_commit_callbacks, **kwargs):
    """Upload through the page; its validation runs when the request's work commits."""
    with django_capture_on_commit_callbacks(execute=True):
        response = _upload(client, **kwargs)
    assert response.status_code == 302
    return response


def test_a_batch_started_in_the_app_runs_as_its_user(world, queue, engine,  # noqa: F811
                                                     django_capture_on_commit_callbacks):
    _started(world.member, django_capture_on_commit_callbacks, lines=3)
    assert queue.names() == ["chunk"]  # validated at upload, not by a worker
    queue.drain()
    [batch] = world.member.get("/batches/progress.json").json()["batches"]
    assert (batch["status"], batch["percent"]) == ("completed", 100)
    assert batch["request_counts"] == {"total": 3, "completed": 3, "failed": 0}
    assert batch["output_file_id"] in world.member.get("/batches/progress.json").json()["html"]
    download = world.member.get(f"/files/{batch['output_file_id']}/content")
    rows = [json.loads(x) for x in b"".join(download.streaming_content).splitlines()]
    assert sorted(r["custom_id"] for r in rows) == ["r0", "r1", "r2"]
    assert {r["response"]["status_code"] for r in rows} == {200}
    assert len(engine.requests) == 3 and {str(r.tier) for r in engine.requests} == {"cold"}
    from apps.batches.models import Batch
    from apps.slo.models import RequestRecord
    from apps.slo.services import flush_reports

    flush_reports()
    started = Batch.objects.get()
    booked = RequestRecord.objects.filter(batch_id=started.uid)
    assert started.created_by_id is not None and booked.count() == 3
    assert set(booked.values_list("api_key_id", "user_id")) == {(None, started.created_by_id)}


def test_a_member_removed_before_the_run_gets_every_line_refused(
        world, queue, engine, django_capture_on_commit_callbacks):  # noqa: F811
    from apps.tenants.models import Membership

    _started(world.member, django_capture_on_commit_callbacks, lines=2)
    Membership.objects.filter(tenant=world.a, role="member").delete()
    queue.drain()
    [batch] = world.admin.get("/batches/progress.json").json()["batches"]
    assert batch["request_counts"] == {"total": 2, "completed": 0, "failed": 2}
    assert engine.requests == []


@pytest.mark.django_db(transaction=True)  # autocommit, as served: validated within the upload
def test_a_bad_file_is_refused_at_upload_with_its_line_errors(world):
    from django.core.files.uploadedfile import SimpleUploadedFile

    content = b"\n".join([_line(0).encode(), _line(1).encode()[:30], b"not json",
                           _line(3).encode()])
    response = world.member.post("/batches/start", {
        "file": SimpleUploadedFile("bad.jsonl", content), "endpoint": "/v1/chat/completions",
        "completion_window": "24h"})
    page = response.content.decode()
    assert response.status_code == 400 and 'id="batch-file-errors"' in page
    assert "<strong>line 2</strong>: Invalid JSON" in page
    assert "<strong>line 3</strong>: Invalid JSON" in page
    [batch] = world.member.get("/batches/progress.json").json()["batches"]
    assert batch["status"] == "failed" and batch["error_file_id"] in page
    assert [r["line"] for r in batch["reasons"]["shown"]] == [2, 3]
    download = world.member.get(f"/files/{batch['error_file_id']}/content")
    rows = [json.loads(x) for x in b"".join(download.streaming_content).splitlines()]
    assert [(r["error"]["line"], r["error"]["code"]) for r in rows] == [
        (2, "invalid_json_line"), (3, "invalid_json_line")]
