"""Redis and PostgreSQL restart under a running batch (issue 18): a web front end
(``manage.py serve``) and a real Celery worker (the tiny model in its own engine) on a
PostgreSQL cluster and a Redis (broker and rate limiter) of the test's own (``servers.py``).
Redis is killed (a crash; ``appendonly`` as in production) and started again a quarter of the
way in, PostgreSQL stopped (``pg_ctl -m fast``: every session cut) and started again half way.
Every line ends in the output file exactly once, none in an error file, and each line's SLO
record is booked once.
"""

from __future__ import annotations

import json
import os
import time

import openai
import pytest

from tests.apps.batches.conftest import jsonl
from tests.apps.batches.live import ROOT, TERMINAL, LiveStack, _common
from tests.faults.servers import PostgresServer, RedisServer

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
LINES = 60
DOWN_S = 2.0


@pytest.fixture
def servers(tmp_path):
    pg, redis = PostgresServer(), RedisServer(tmp_path / "redis")
    try:
        pg.init()
        redis.start()
        yield pg, redis
    finally:
        redis.kill()
        pg.close()


def _env(tmp_path, pg: PostgresServer, redis: RedisServer, model) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("LASER_") and k not in ("DATABASE_URL", "REDIS_URL")}
    return {**env, **_common(), "DATABASE_URL": pg.url, "REDIS_URL": redis.url,
            "LASER_EMBEDDED": "0", "LASER_BATCH_EMBEDDED_WORKER": "0",
            "LASER_VAR_DIR": str(tmp_path / "var"), "LASER_MODEL": str(model),
            "LASER_SERVED_MODEL_ID": "smollm2-135m-instruct",
            "LASER_MODEL_CACHE": str(tmp_path / "models"), "LASER_MAX_MODEL_LEN": "4096",
            "LASER_KV_MEMORY_MB": "16", "PYTHONPATH": str(ROOT),
            # small chunks, two lines at a time: the batch lasts long enough to be hit twice
            "LASER_BATCH_CHUNK_LINES": "10", "LASER_BATCH_CHUNK_CONCURRENCY": "2",
            "LASER_BATCH_RESTORE_INTERVAL_S": "1"}


def _line(i: int) -> dict:
    return {"custom_id": f"doc-{i}", "method": "POST", "url": "/v1/completions",
            "body": {"model": "smollm2-135m-instruct", "prompt": f"count {i}",
                     "max_tokens": 24, "temperature": 0}}


def _poll(client: openai.OpenAI, batch_id: str, until, timeout: float = 150):
    """``batches.retrieve`` until ``until(batch)``; errors while a server is away are retried."""
    end = time.monotonic() + timeout
    batch = None
    while time.monotonic() < end:
        try:
            batch = client.batches.retrieve(batch_id)
        except openai.APIError:
            batch = None
        if batch is not None and until(batch):
            return batch
        time.sleep(0.2)
    raise AssertionError(f"batch stuck: {batch}")


def _midway(client, batch_id: str, done: int):
    batch = _poll(client, batch_id, lambda b: b.request_counts.completed >= done
                  or b.status in TERMINAL)
    assert batch.status == "in_progress" and batch.request_counts.completed < LINES, batch
    return batch


def test_redis_and_postgres_restart_mid_batch_lose_and_double_nothing(tmp_path, servers,
                                                                      tiny_model_path):
    pg, redis = servers
    stack = LiveStack(tmp_path, _env(tmp_path, pg, redis, tiny_model_path))
    try:
        stack.manage("migrate", "--noinput", "-v0")
        stack.manage("bootstrap_demo")
        key = (tmp_path / "var" / "demo_api_key").read_text().strip()
        stack.server()
        stack.worker("worker")
        client = stack.client(key)
        uploaded = client.files.create(file=("in.jsonl", jsonl([_line(i) for i in range(LINES)])),
                                       purpose="batch")
        batch = client.batches.create(input_file_id=uploaded.id, completion_window="24h",
                                      endpoint="/v1/completions")

        _midway(client, batch.id, LINES // 4)
        redis.kill()
        time.sleep(DOWN_S)
        redis.start()

        _midway(client, batch.id, LINES // 2)
        pg.stop("fast")
        time.sleep(DOWN_S)
        pg.start()

        done = _poll(client, batch.id, lambda b: b.status in TERMINAL)
        stack.wait_idle()
        log = (tmp_path / "worker.log").read_text()
        assert done.status == "completed", (done, log[-3000:])
        assert (done.request_counts.completed, done.request_counts.failed) == (LINES, 0), done
        assert done.error_file_id is None
        output = client.files.content(done.output_file_id).text.splitlines()
        lines = [json.loads(x) for x in output]
        assert sorted(x["custom_id"] for x in lines) == sorted(f"doc-{i}" for i in range(LINES))
        assert all(x["response"]["status_code"] == 200 for x in lines)
        _assert_booked_once(pg, done.id)  # while the worker (and its record writer) runs
        # both outages reached the worker: its broker connection, then a chunk's queries
        assert "Connection to broker lost" in log and "database unavailable for batch" in log
    finally:
        stack.close()


def _assert_booked_once(pg: PostgresServer, batch_id: str) -> None:
    """Each line's SLO record once, ``ok`` (the worker's writer flushes within seconds)."""
    import psycopg

    query = ("SELECT request_id, outcome FROM slo_requestrecord WHERE batch_id = %s")
    end = time.monotonic() + 30
    while True:
        with psycopg.connect(pg.url) as conn:
            rows = conn.execute(query, (batch_id,)).fetchall()
        if len(rows) >= LINES or time.monotonic() > end:
            break
        time.sleep(0.5)
    ids = [r[0] for r in rows if r[1] == "ok"]
    assert len(ids) == len(set(ids)) == LINES, rows
