"""A batch started in the web app has no API key: its lines run as the member who started it
(through the same serving path), to completed with an output file the page offers. Tasks run
from the in-test queue against the scripted engine (see tests/apps/batches/conftest.py)."""

from __future__ import annotations

import json

import pytest

from tests.apps.batches.conftest import engine, queue  # noqa: F401 (fixtures)
from tests.apps.web.test_pages import _upload

pytestmark = pytest.mark.django_db


def test_a_batch_started_in_the_app_runs_as_its_user(world, queue, engine):  # noqa: F811
    assert _upload(world.member, lines=3).status_code == 302
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


def test_a_member_removed_before_the_run_gets_every_line_refused(world, queue,  # noqa: F811
                                                                 engine):  # noqa: F811
    from apps.tenants.models import Membership

    assert _upload(world.member, lines=2).status_code == 302
    Membership.objects.filter(tenant=world.a, role="member").delete()
    queue.drain()
    [batch] = world.admin.get("/batches/progress.json").json()["batches"]
    assert batch["request_counts"] == {"total": 2, "completed": 0, "failed": 2}
    assert engine.requests == []
