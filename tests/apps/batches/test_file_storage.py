"""Files are stored and read in parts, uploads stream to a capped temporary file, each tenant
has a storage quota, and output files are written while their lines are read (issue 18)."""

from __future__ import annotations

import json

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from apps.batches.files import file_create, output_file_create
from apps.batches.models import BatchFile, BatchFilePart
from apps.batches.storage import PART_BYTES, content_chunks, content_lines
from apps.batches.validation import validate_input
from apps.core.errors import RequestTooLargeError
from apps.slo.selectors import contract_for
from tests.apps.batches.conftest import chat_line, jsonl

pytestmark = pytest.mark.django_db


def _upload(api, data: bytes, name: str = "in.jsonl"):
    return api.post("/v1/files", {"file": SimpleUploadedFile(name, data), "purpose": "batch"},
                    format="multipart")


def _padded_lines(total: int) -> bytes:
    """JSONL of about ``total`` bytes, lines of ~10 kB (so some straddle a part boundary)."""
    rows, size, i = [], 0, 0
    while size < total:
        row = chat_line(f"r{i}", "x" * 10_000)
        rows.append(row)
        size += len(json.dumps(row)) + 1
        i += 1
    return jsonl(rows)


def test_a_file_over_one_part_round_trips_in_parts(api):
    data = _padded_lines(int(2.5 * PART_BYTES))
    created = _upload(api, data)
    assert created.status_code == 200, created.content
    stored = BatchFile.objects.get(uid=created.json()["id"])
    assert stored.bytes == len(data) and stored.parts.count() == 3
    chunks = list(content_chunks(stored.pk))
    assert [len(c) for c in chunks] == [PART_BYTES, PART_BYTES, len(data) - 2 * PART_BYTES]
    response = api.get(f"/v1/files/{stored.uid}/content")
    assert response["Content-Length"] == str(len(data))
    streamed = list(response.streaming_content)
    assert len(streamed) == 3 and b"".join(streamed) == data


def test_lines_that_straddle_parts_validate_like_the_whole_file(cold, upload):
    data = _padded_lines(int(2.2 * PART_BYTES))
    stored = file_create(tenant=cold.tenant, filename="x.jsonl", content=data, purpose="batch")
    assert list(content_lines(stored.pk)) == data.split(b"\n")
    contract = contract_for(tenant=cold.tenant, tier="cold")
    result = validate_input(content_lines(stored.pk), endpoint="/v1/chat/completions",
                            tenant=cold.tenant, contract=contract)
    assert result.ok and len(result.lines) == data.count(b"\n")


def test_an_upload_streams_to_a_temporary_file_capped_at_the_limit(api, settings, monkeypatch):
    from apps.batches import uploads

    seen = []
    original = uploads.CappedUpload.file_complete

    def complete(self, size):
        uploaded = original(self, size)
        seen.append(type(uploaded).__name__)
        return uploaded

    monkeypatch.setattr(uploads.CappedUpload, "file_complete", complete)
    assert _upload(api, jsonl([chat_line("a", "x")])).status_code == 200
    assert seen == ["TemporaryUploadedFile"]  # on disk, even when small

    handler = uploads.CappedUpload(None, limit=10)
    handler.new_file("file", "in.jsonl", "application/octet-stream", None)
    handler.receive_data_chunk(b"x" * 10, 0)
    with pytest.raises(RequestTooLargeError):
        handler.receive_data_chunk(b"x", 10)


def test_a_declared_size_over_the_limit_is_refused_before_parsing(api, settings, monkeypatch):
    from django.http import multipartparser

    def never(self):
        raise AssertionError("the body was parsed")

    monkeypatch.setattr(multipartparser.MultiPartParser, "parse", never)
    settings.LASER_BATCH_MAX_FILE_BYTES = 1000
    response = _upload(api, b"x" * 200_000)
    assert response.status_code == 413 and response.json()["error"]["param"] == "file"


def test_the_plans_storage_quota_counts_live_files(api, cold, plan_for, settings):
    settings.LASER_FILE_STORAGE_MB = 1024  # the setting no longer decides: the plan does
    plan_for(cold.tenant, max_storage_bytes=1024 * 1024)
    first = _upload(api, _padded_lines(600_000))
    assert first.status_code == 200
    refused = _upload(api, _padded_lines(600_000))
    assert refused.status_code == 400
    error = refused.json()["error"]
    assert (error["code"], error["param"]) == ("storage_quota_exceeded", "file")
    assert api.delete(f"/v1/files/{first.json()['id']}").status_code == 200
    assert _upload(api, _padded_lines(600_000)).status_code == 200
    assert not BatchFilePart.objects.filter(file__uid=first.json()["id"]).exists()


def test_output_files_are_written_while_their_lines_are_read(cold):
    written_while_reading = []

    def lines():
        for i in range(3):
            yield b"y" * PART_BYTES
            written_while_reading.append(BatchFilePart.objects.count())

    created = output_file_create(tenant=cold.tenant, filename="out.jsonl", lines=lines(),
                                 ttl_s=3600)
    assert written_while_reading == [1, 2, 3]  # each part stored before the next is read
    assert created.bytes == 3 * PART_BYTES and created.parts.count() == 3


def test_batch_results_count_against_the_quota_and_refusals_state_bytes(
        api, cold, plan_for, queue, engine):
    """Issue 41: output files were not counted, and the next refusal said "(0 bytes)". The
    results of a running batch are still written past the quota (the documented headroom);
    after that a batch is refused before it runs and an upload with the bytes stated."""
    first = _upload(api, jsonl([chat_line(f"r{i}", "x" * 300, max_tokens=64)
                                for i in range(5)]))
    assert first.status_code == 200
    quota = 2 * first.json()["bytes"] + 100  # room for the input and as much again
    plan_for(cold.tenant, max_storage_bytes=quota)
    batch = api.post("/v1/batches", {"input_file_id": first.json()["id"],
                                     "endpoint": "/v1/chat/completions",
                                     "completion_window": "24h"}, format="json")
    assert batch.status_code == 200
    queue.drain()
    done = api.get(f"/v1/batches/{batch.json()['id']}").json()
    assert done["status"] == "completed" and done["output_file_id"]
    files = {f["id"]: f["bytes"] for f in api.get("/v1/files").json()["data"]}
    used = sum(files.values())
    assert used > quota and done["output_file_id"] in files  # the output counts
    again = api.post("/v1/batches", {"input_file_id": first.json()["id"],
                                     "endpoint": "/v1/chat/completions",
                                     "completion_window": "24h"}, format="json")
    assert again.status_code == 400, again.json()
    error = again.json()["error"]
    assert error["code"] == "storage_quota_exceeded"
    assert f"{used} of {quota} bytes" in error["message"]
    assert f"{first.json()['bytes']} bytes" in error["message"]
    refused = _upload(api, b"tiny\n")
    error = refused.json()["error"]
    assert (refused.status_code, error["code"]) == (400, "storage_quota_exceeded")
    assert "This file (5 bytes)" in error["message"]
    assert f"{used} of {quota} bytes" in error["message"]
    assert "(0 bytes)" not in error["message"]
