"""Files and Batches HTTP API: shapes (checked with the openai SDK's own types), errors,
pagination and tenant isolation."""

from __future__ import annotations

import datetime as dt

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from openai.types import Batch, FileDeleted, FileObject
from rest_framework.test import APIClient

from apps.batches.models import Batch as BatchRow
from apps.batches.models import BatchLine
from apps.batches.sweep import cleanup
from tests.apps.batches.conftest import chat_line, jsonl

pytestmark = pytest.mark.django_db


def _upload(api, rows, purpose="batch", **extra):
    data = {"file": SimpleUploadedFile("in.jsonl", jsonl(rows)), "purpose": purpose, **extra}
    return api.post("/v1/files", data, format="multipart")


def _error(response):
    return response.status_code, response.json()["error"]["param"]


def test_file_round_trip(api):
    created = _upload(api, [chat_line("a", "x")])
    assert created.status_code == 200
    obj = FileObject.model_validate(created.json())
    assert (obj.purpose, obj.filename, obj.bytes) == ("batch", "in.jsonl", len(jsonl(
        [chat_line("a", "x")])))
    assert obj.expires_at - obj.created_at == 30 * 24 * 3600
    assert FileObject.model_validate(api.get(f"/v1/files/{obj.id}").json()) == obj
    content = api.get(f"/v1/files/{obj.id}/content")
    assert content.status_code == 200 and content.getvalue() == jsonl([chat_line("a", "x")])
    listed = api.get("/v1/files").json()
    assert [f["id"] for f in listed["data"]] == [obj.id] and listed["has_more"] is False
    deleted = FileDeleted.model_validate(api.delete(f"/v1/files/{obj.id}").json())
    assert deleted.deleted and api.get(f"/v1/files/{obj.id}").status_code == 404


def test_file_content_ignores_the_accept_header(api):
    # The openai SDK asks for application/binary; a 406 would break files.content().
    file_id = _upload(api, [chat_line("a", "x")]).json()["id"]
    content = api.get(f"/v1/files/{file_id}/content", HTTP_ACCEPT="application/binary")
    assert content.status_code == 200 and content.getvalue() == jsonl([chat_line("a", "x")])
    missing = api.get("/v1/files/file-nope/content", HTTP_ACCEPT="application/binary")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "file_not_found"


def test_file_expiry_policy_and_bad_uploads(api, settings):
    ok = _upload(api, [chat_line("a", "x")], **{"expires_after[anchor]": "created_at",
                                                "expires_after[seconds]": "7200"})
    assert ok.json()["expires_at"] - ok.json()["created_at"] == 7200
    assert _error(_upload(api, [chat_line("a", "x")], purpose="fine-tune")) == (400, "purpose")
    assert _error(_upload(api, [chat_line("a", "x")], **{"expires_after[anchor]": "created_at",
                                                         "expires_after[seconds]": "60"})) == (
        400, "expires_after.seconds")
    settings.LASER_BATCH_MAX_FILE_BYTES = 10
    assert _error(_upload(api, [chat_line("a", "x")])) == (413, "file")
    assert api.post("/v1/files", {"purpose": "batch"}, format="multipart").status_code == 400


def test_unauthenticated_requests_get_401(cold):
    assert APIClient().get("/v1/files").status_code == 401
    assert APIClient().get("/v1/batches").status_code == 401


def _batch(api, file_id, **body):
    return api.post("/v1/batches", {"input_file_id": file_id, "endpoint": "/v1/chat/completions",
                                    "completion_window": "24h", **body}, format="json")


def test_batch_create_retrieve_list_cancel(api, queue):
    file_id = _upload(api, [chat_line("a", "x")]).json()["id"]
    created = _batch(api, file_id, metadata={"job": "nightly"})
    assert created.status_code == 200
    batch = Batch.model_validate(created.json())
    assert (batch.status, batch.input_file_id, batch.metadata) == (
        "validating", file_id, {"job": "nightly"})
    assert batch.expires_at - batch.created_at == 24 * 3600
    assert batch.request_counts.total == 0
    assert Batch.model_validate(api.get(f"/v1/batches/{batch.id}").json()).id == batch.id
    cancelled = Batch.model_validate(api.post(f"/v1/batches/{batch.id}/cancel").json())
    assert cancelled.status == "cancelling" and cancelled.cancelling_at is not None
    queue.drain()
    final = Batch.model_validate(api.get(f"/v1/batches/{batch.id}").json())
    assert final.status == "cancelled" and final.cancelled_at is not None


def test_finished_batch_keeps_request_counts_and_model_after_cleanup(api, queue, engine,
                                                                    settings):
    rows = [chat_line("a", "x"), chat_line("b", "y"), chat_line("bad", "z", temperature=9)]
    file_id = _upload(api, rows).json()["id"]
    batch_id = _batch(api, file_id).json()["id"]
    queue.run_one()  # validate
    running = api.get(f"/v1/batches/{batch_id}").json()  # live from the lines while running
    assert running["request_counts"] == {"total": 3, "completed": 0, "failed": 1}
    assert running["model"] == settings.LASER_SERVED_MODEL_ID
    queue.drain()
    counts = {"total": 3, "completed": 2, "failed": 1}

    def shown() -> list[tuple]:
        one = Batch.model_validate(api.get(f"/v1/batches/{batch_id}").json())
        listed = Batch.model_validate(api.get("/v1/batches").json()["data"][0])
        return [(b.status, b.request_counts.model_dump(), b.model) for b in (one, listed)]

    done = [("completed", counts, settings.LASER_SERVED_MODEL_ID)] * 2
    assert shown() == done
    row = BatchRow.objects.get(uid=batch_id)
    later = row.finished_at + dt.timedelta(seconds=row.output_expires_after_s + 1)
    assert cleanup(now=later)[1] == 3
    assert not BatchLine.objects.filter(batch=row).exists()
    assert shown() == done


def test_batch_list_is_paginated_newest_first(api):
    file_id = _upload(api, [chat_line("a", "x")]).json()["id"]
    ids = [_batch(api, file_id).json()["id"] for _ in range(5)]
    page = api.get("/v1/batches?limit=2").json()
    assert [b["id"] for b in page["data"]] == ids[::-1][:2]
    assert (page["has_more"], page["first_id"], page["last_id"]) == (True, ids[4], ids[3])
    rest = api.get(f"/v1/batches?limit=10&after={page['last_id']}").json()
    assert [b["id"] for b in rest["data"]] == ids[::-1][2:] and rest["has_more"] is False
    assert _error(api.get("/v1/batches?limit=0")) == (400, "limit")


@pytest.mark.parametrize(("body", "param"), [
    ({"endpoint": "/v1/embeddings"}, "endpoint"),
    ({"completion_window": "30m"}, "completion_window"),  # the contract promises 1h
    ({"completion_window": "48h"}, "completion_window"),
    ({"completion_window": "soon"}, "completion_window"),
    ({"metadata": {"k": 1}}, "metadata"),
    ({"output_expires_after": {"anchor": "created_at", "seconds": 10}},
     "output_expires_after.seconds"),
])
def test_batch_create_refuses_with_the_parameter_named(api, body, param):
    file_id = _upload(api, [chat_line("a", "x")]).json()["id"]
    assert _error(_batch(api, file_id, **body)) == (400, param)


def test_batch_create_needs_a_cold_contract(api_key_factory, tenant_factory):
    _, raw = api_key_factory(tenant=tenant_factory())
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    file_id = _upload(client, [chat_line("a", "x")]).json()["id"]
    assert _error(_batch(client, file_id)) == (400, "completion_window")


def test_other_tenants_files_and_batches_are_invisible(api, cold, api_key_factory,
                                                       tenant_factory):
    file_id = _upload(api, [chat_line("a", "x")]).json()["id"]
    batch_id = _batch(api, file_id).json()["id"]
    _, raw = api_key_factory(tenant=tenant_factory())
    other = APIClient()
    other.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    for url in (f"/v1/files/{file_id}", f"/v1/files/{file_id}/content",
                f"/v1/batches/{batch_id}"):
        response = other.get(url)
        assert response.status_code == 404 and "error" in response.json()
    assert other.delete(f"/v1/files/{file_id}").status_code == 404
    assert other.post(f"/v1/batches/{batch_id}/cancel").status_code == 404
    assert other.get("/v1/files").json()["data"] == []
    assert other.get("/v1/batches").json()["data"] == []
    assert _batch(other, file_id).status_code == 404
