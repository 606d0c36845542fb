"""Batch input lines go through the one JSON intake (issue 41): a lone surrogate or a NUL
anywhere in a line (its ``custom_id``, its body, a key) fails the batch naming the line and the
field, instead of a 500 error line or a batch stuck in ``validating``."""

from __future__ import annotations

import json

import pytest

from apps.batches.models import Batch
from tests.apps.batches.conftest import chat_line, jsonl

pytestmark = pytest.mark.django_db
CHAT = "/v1/chat/completions"


def validated(api, queue, cold, content: bytes) -> Batch:
    """The batch of a file holding ``content``, created through the API and validated (the
    chunks it queued are not run)."""
    from apps.batches.files import file_create

    uploaded = file_create(tenant=cold.tenant, filename="in.jsonl", content=content,
                           purpose="batch")
    created = api.post("/v1/batches", data=json.dumps({
        "input_file_id": uploaded.uid, "endpoint": CHAT, "completion_window": "24h"}),
        content_type="application/json")
    assert created.status_code == 200, created.content
    queue.run_one()  # validate
    queue.items.clear()
    return Batch.objects.get(uid=created.json()["id"])


@pytest.mark.parametrize("row, code, param", [
    (chat_line("a\ud800", "x"), "invalid_custom_id", "custom_id"),
    (chat_line("b", "\udfff"), "invalid_body", "body.messages[0].content"),
    (chat_line("c", "x", user="n\x00l"), "invalid_body", "body.user"),
    (chat_line("d\x00", "x"), "invalid_custom_id", "custom_id"),
    ({**chat_line("e", "x"), "\ud800": 1}, "invalid_json_line", "\\ud800"),
])
def test_bad_text_in_a_line_fails_the_batch_naming_line_and_field(api, queue, cold, row, code,
                                                                   param):
    batch = validated(api, queue, cold, jsonl([chat_line("fine", "x"), row]))
    assert batch.status == "failed"
    [error] = batch.errors["data"]
    assert (error["code"], error["line"], error["param"]) == (code, 2, param)
    error["message"].encode("utf-8")  # stored and shown: text, whatever the line held
    assert param in error["message"]


def test_a_surrogate_pair_is_text_and_runs(api, queue, cold):
    batch = validated(api, queue, cold, jsonl([chat_line("\U0001F600", "smile \U0001F600")]))
    assert batch.status == "in_progress", batch.errors
    assert batch.lines.get().custom_id == "\U0001F600"
