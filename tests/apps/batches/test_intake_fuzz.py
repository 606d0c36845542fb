"""Hypothesis fuzz of the batch doors (issue 41, item 6): ``POST /v1/batches`` bodies and batch
input lines with arbitrary Unicode, deep and wide nesting and huge numbers, whole or in one
field. A body gets a 4xx in the OpenAI shape or a batch; a file's validation never raises and
never leaves a batch ``validating``: it runs or fails naming lines, and whatever it stored is
text PostgreSQL can hold (no NUL, no lone surrogate)."""

from __future__ import annotations

import json
import logging

import pytest
from hypothesis import given
from hypothesis import strategies as st

from apps.batches.models import Batch
from tests.apps.batches.conftest import chat_line
from tests.apps.batches.test_line_intake import validated
from tests.apps.core.intake_fuzz import assert_openai_error, documents, fuzz, storable

pytestmark = pytest.mark.django_db
CHAT = "/v1/chat/completions"


def _line_docs() -> st.SearchStrategy[str]:
    base = chat_line("a", "hi", max_tokens=2)
    return documents(base, ["custom_id", "method", "url", "body", "body.messages",
                            "body.messages.0.content", "body.model", "body.max_tokens",
                            "body.*", "*"])


@fuzz(80)
@given(lines=st.lists(_line_docs(), min_size=1, max_size=3))
def test_a_file_of_hostile_lines_runs_or_fails_naming_lines(lines, api, queue, cold, caplog):
    caplog.set_level(logging.ERROR)
    caplog.clear()
    content = ("\n".join(lines) + "\n").encode("utf-8", "surrogatepass")
    batch = validated(api, queue, cold, content)
    assert batch.status in ("in_progress", "failed"), batch.status
    if batch.status == "failed":
        assert batch.errors["data"] and storable(batch.errors)
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
    for custom_id, body in batch.lines.values_list("custom_id", "body"):
        assert storable(custom_id) and storable(body)


BATCH = {"input_file_id": "file-x", "endpoint": CHAT, "completion_window": "24h",
         "metadata": {"k": "v"}}


@fuzz(60)
@given(raw=documents(BATCH, ["input_file_id", "endpoint", "completion_window", "metadata",
                             "metadata.k", "metadata.*", "*"]))
def test_a_hostile_batch_body_is_a_4xx_or_a_batch(raw, api, upload, queue):
    doc = raw.replace('"file-x"', json.dumps(upload([chat_line("a", "hi")]).uid))
    response = api.post("/v1/batches", data=doc.encode("utf-8", "surrogatepass"),
                        content_type="application/json")
    assert response.status_code < 500, (ascii(doc[:200]), response.content[:200])
    if response.status_code >= 400:
        assert_openai_error(response.json())
    else:
        assert storable(Batch.objects.get(uid=response.json()["id"]).metadata)
