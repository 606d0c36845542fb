"""Hostile input to the Batches API and to batch input files: each one a 4xx naming the problem,
or a batch that fails visibly, never a 500 or a batch left ``validating`` (issue 18)."""

from __future__ import annotations

import json

import pytest

from apps.batches.models import Batch
from tests.apps.batches.conftest import chat_line, jsonl

pytestmark = pytest.mark.django_db
CHAT = "/v1/chat/completions"


def _post(api, body: dict | str):
    raw = body if isinstance(body, str) else json.dumps(body)
    return api.post("/v1/batches", data=raw, content_type="application/json")


def _batch_body(file_id: str, **fields) -> dict:
    return {"input_file_id": file_id, "endpoint": CHAT, "completion_window": "24h", **fields}


def _error(response) -> dict:
    assert 400 <= response.status_code < 500, response.content
    return response.json()["error"]


def test_endpoint_as_a_list_is_a_400_not_a_type_error(api, upload):
    error = _error(_post(api, _batch_body(upload([chat_line("a", "x")]).uid, endpoint=[CHAT])))
    assert (error["param"], error["code"]) == ("endpoint", "invalid_value")


def test_a_numeric_input_file_id_is_told_it_must_be_a_string(api):
    error = _error(_post(api, _batch_body(123)))  # type: ignore[arg-type]
    assert (error["param"], error["code"]) == ("input_file_id", "invalid_type")
    assert "string" in error["message"] and "required" not in error["message"]


def test_a_body_that_is_not_an_object_says_so(api):
    error = _error(_post(api, "[1, 2]"))
    assert error["code"] == "invalid_json" and "JSON object" in error["message"]


@pytest.mark.parametrize("raw", ["[" * 100_000, "[" * 5_000 + "]" * 5_000,
                                 '{"metadata": ' + '{"a": ' * 100 + "1" + "}" * 101])
def test_deeply_nested_json_is_a_400(api, raw, settings):
    settings.LASER_MAX_REQUEST_BYTES = 1_000_000
    response = _post(api, raw)
    assert response.status_code == 400, response.content
    assert response.json()["error"]["code"] == "invalid_json"


def test_nan_is_not_json(api):
    assert _error(_post(api, '{"input_file_id": NaN}'))["code"] == "invalid_json"


def test_a_body_over_the_size_limit_is_a_413_before_parsing(api, upload, settings):
    body = _batch_body(upload([chat_line("a", "x")]).uid, metadata={"k": "v" * 400})
    settings.LASER_MAX_REQUEST_BYTES = 200
    response = _post(api, body)
    assert response.status_code == 413 and response.json()["error"]["code"] == "request_too_large"


def _run_validation(api, queue, cold, rows: list) -> Batch:
    from apps.batches.files import file_create

    uploaded = file_create(tenant=cold.tenant, filename="in.jsonl", content=jsonl(rows),
                           purpose="batch")
    created = _post(api, _batch_body(uploaded.uid))
    assert created.status_code == 200, created.content
    queue.run_one()  # validate
    return Batch.objects.get(uid=created.json()["id"])


def test_a_line_separator_inside_a_json_string_is_not_a_line_break(api, queue, cold):
    text = "one\u2028two\u2029three\x85four\x1cfive"
    raw = json.dumps(chat_line("a", text), ensure_ascii=False)  # the characters, unescaped
    assert "\u2028" in raw
    batch = _run_validation(api, queue, cold, [raw, chat_line("b", "x")])
    assert batch.status == "in_progress", batch.errors
    line = batch.lines.get(custom_id="a")
    assert line.body["messages"][0]["content"] == text


def test_a_deeply_nested_line_fails_the_batch_naming_the_line(api, queue, cold):
    deep = '{"custom_id": "d", "method": "POST", "url": "/v1/chat/completions", "body": ' \
        + "[" * 5000 + "]" * 5000 + "}"
    batch = _run_validation(api, queue, cold, [chat_line("a", "x"), deep])
    assert batch.status == "failed"
    assert [(e["code"], e["line"]) for e in batch.errors["data"]] == [("invalid_json_line", 2)]
    assert "nested deeper" in batch.errors["data"][0]["message"]


def test_an_unexpected_validation_error_fails_the_batch_visibly(api, queue, cold, monkeypatch,
                                                                 caplog):
    from apps.batches import services

    def broken(*args, **kwargs):
        raise RuntimeError("bug")

    monkeypatch.setattr(services, "validate_input", broken)
    batch = _run_validation(api, queue, cold, [chat_line("a", "x")])
    assert batch.status == "failed" and batch.errors["data"][0]["code"] == "invalid_file"
    assert "RuntimeError: bug" in caplog.text


@pytest.mark.parametrize("path", ["/v1/files/file-\x00x", "/v1/batches/batch_\x00x",
                                  "/v1/batches/batch_\x00x/cancel", "/v1/files?after=a\x00",
                                  "/v1/batches?after=a\x00", "/v1/files?purpose=b\x00",
                                  "/v1/files/" + "f" * 300])
def test_ids_postgresql_cannot_hold_are_not_found_not_a_500(api, path):
    method = api.post if path.endswith("/cancel") else api.get
    response = method(path)
    assert response.status_code in (200, 404), response.content
    if response.status_code == 200:
        assert response.json()["data"] == []


@pytest.mark.parametrize("fields", [{"input_file_id": "file-\x00"},
                                    {"metadata": {"k": "v\x00"}}, {"metadata": {"\x00": "v"}}])
def test_nul_in_a_batch_create_body_is_a_4xx(api, upload, fields):
    body = {**_batch_body(upload([chat_line("a", "x")]).uid), **fields}
    assert _error(_post(api, body))["param"] in ("id", "metadata")  # id: the file not found


def test_a_nul_in_a_line_fails_the_batch_naming_the_line(api, queue, cold):
    batch = _run_validation(api, queue, cold, [chat_line("a\x00", "x"), chat_line("b", "\x00")])
    assert batch.status == "failed"
    assert [(e["code"], e["line"]) for e in batch.errors["data"]] == [
        ("invalid_custom_id", 1), ("invalid_body", 2)]


def test_a_nul_in_an_uploaded_file_name_is_dropped(api):
    from django.core.files.uploadedfile import SimpleUploadedFile

    upload = SimpleUploadedFile("in\x00.jsonl", jsonl([chat_line("a", "x")]))
    response = api.post("/v1/files", {"file": upload, "purpose": "batch"}, format="multipart")
    assert response.status_code == 200 and response.json()["filename"] == "in.jsonl"
