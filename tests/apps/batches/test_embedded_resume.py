"""Embedded mode (``manage.py serve``: engine, ASGI server and worker thread in one process,
SQLite, in-memory broker): SIGKILL the process mid-batch, start it again, and the batch
resumes from the database and completes with every line exactly once."""

from __future__ import annotations

import signal

import pytest

from tests.apps.batches.conftest import jsonl
from tests.apps.batches.live import (
    LiveStack,
    embedded_env,
    output_ids,
    tiny_line,
    wait_batch,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]
LINES = 60


def test_unfinished_batch_resumes_after_a_restart(tmp_path):
    stack = LiveStack(tmp_path, embedded_env(tmp_path / "var", LASER_BATCH_CHUNK_LINES="10"))
    try:
        stack.manage("migrate", "--noinput")
        stack.manage("bootstrap_demo")
        key = (tmp_path / "var" / "demo_api_key").read_text().strip()
        first = stack.server("first")
        client = stack.client(key)
        uploaded = client.files.create(
            file=("in.jsonl", jsonl([tiny_line(i) for i in range(LINES)])), purpose="batch")
        batch = client.batches.create(input_file_id=uploaded.id, completion_window="24h",
                                      endpoint="/v1/completions")
        wait_batch(client, batch.id, until=lambda b: b.request_counts.completed >= 10)
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=10)

        stack.server("second")  # a new port: the client follows stack.url
        client = stack.client(key)
        at_restart = client.batches.retrieve(batch.id)
        assert at_restart.request_counts.completed < LINES, "the kill came too late"
        done = wait_batch(client, batch.id, timeout=150)
        assert done.status == "completed", done
        assert (done.request_counts.completed, done.request_counts.failed) == (LINES, 0)
        ids = output_ids(client, done)
    finally:
        stack.close()
    assert len(ids) == LINES and set(ids) == {f"doc-{i}" for i in range(LINES)}
