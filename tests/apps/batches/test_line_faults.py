"""A fault of ours while a batch line runs is an error line (500) naming the line's request id,
logged once with its traceback and that id (issue 41)."""

from __future__ import annotations

import json
import logging

import pytest

from apps.batches import services
from apps.batches.models import BatchFile
from apps.batches.storage import content_chunks
from tests.apps.batches.conftest import chat_line
from tests.apps.core.fault_log import BUG, assert_fault_logged

pytestmark = pytest.mark.django_db


def test_a_fault_in_a_line_is_a_logged_500_error_line(cold, upload, queue, engine, monkeypatch,
                                                     caplog):
    caplog.set_level(logging.ERROR, logger="laser.errors")

    async def broken(*args, **kwargs):
        raise RuntimeError(BUG)

    monkeypatch.setattr(engine, "generate", broken)
    batch = services.batch_create(tenant=cold.tenant, api_key=cold.key,
                                  input_file_id=upload([chat_line("a", "hi")]).uid,
                                  endpoint="/v1/chat/completions", completion_window="24h")
    queue.drain()
    batch.refresh_from_db()
    content = b"".join(content_chunks(BatchFile.objects.get(pk=batch.error_file_id).pk))
    [line] = [json.loads(x) for x in content.decode().splitlines()]
    response = line["response"]
    assert response["status_code"] == 500
    assert response["request_id"] in response["body"]["error"]["message"]
    assert_fault_logged(caplog, response["request_id"])
