"""The OpenAI SDK's batch workflow against a live Laser: a web front end (uvicorn) and a real
Celery worker process on Redis, with the real SmolLM2 in the worker. Results equal a direct
engine call; cancel and a short completion window end a running batch with partial results."""

from __future__ import annotations

import json
import math
import time

import pytest

from tests.apps.batches.conftest import chat_line, jsonl
from tests.apps.batches.live import LiveStack, shared_env, wait_batch

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.redis,
              pytest.mark.timeout(240), pytest.mark.django_db(transaction=True)]
COUNTS = ("prompt_tokens", "completion_tokens", "total_tokens")
LONG = "Count from 1 to 1000, separated by commas."


@pytest.fixture(scope="module")
def stack(django_db_setup, django_db_blocker, tmp_path_factory):
    with django_db_blocker.unblock():
        # 4 lines in the engine at once: the 80 long lines below (~120 tokens each, greedy) then
        # need ~2,400 decode steps of a memory-bound 540 MB model, minutes on any CPU, so they
        # outlast the 20 s window
        live = LiveStack(tmp_path_factory.mktemp("live-sdk"),
                         shared_env(LASER_BATCH_CHUNK_CONCURRENCY="4"))
    try:
        live.server()
        live.worker("sdk")
        yield live
    finally:
        live.close()


@pytest.fixture(autouse=True)
def _worker_idle_after_test(stack, transactional_db):
    # transactional_db first, so its flush runs after this wait
    yield
    stack.wait_idle()


@pytest.fixture
def tenant(tenant_factory, api_key_factory, settings):
    """A tenant whose cold contract promises 5 s, so short windows are allowed."""
    from apps.slo.services import contract_create

    settings.LASER_COLD_MIN_DEADLINE_S = 1
    owner = tenant_factory()
    contract_create(tenant=owner, tier="cold", cold_deadline_s=5)
    key, raw = api_key_factory(tenant=owner, default_tier="cold")
    return owner, key, raw


def _submit(client, rows, window="24h", **extra):
    uploaded = client.files.create(file=("in.jsonl", jsonl(rows)), purpose="batch")
    return client.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions",
                                 completion_window=window, **extra)


def _lines(client, file_id):
    if file_id is None:
        return {}
    rows = [json.loads(x) for x in client.files.content(file_id).text.splitlines()]
    assert len(rows) == len({r["custom_id"] for r in rows})
    return {r["custom_id"]: r for r in rows}


def _direct(tenant, rows):
    """The same greedy requests, straight into a fresh in-process engine."""
    from apps.batches.rendering import response_body
    from apps.gateway.engine_client import build_async_engine, complete_sync
    from apps.gateway.params import parse_chat_request
    from apps.slo.selectors import contract_for

    owner, _, _ = tenant
    contract = contract_for(tenant=owner, tier="cold")
    engine = build_async_engine()
    engine.start()
    try:
        bodies = {}
        for row in rows:
            # the batch's own deadline, not the tenant's short per-request one: the laser
            # policy refuses cold work it estimates late, and this call compares outputs only
            parsed = parse_chat_request(row["body"], tenant=owner,
                                        contract=contract, request_id=f"direct-{row['custom_id']}",
                                        deadline=time.time() + 3600)
            bodies[row["custom_id"]] = response_body(
                parsed, complete_sync(parsed.engine_request, engine), engine)
        return bodies
    finally:
        engine.stop()


def test_sdk_batch_round_trip_equals_direct_engine_calls(stack, tenant):
    client = stack.client(tenant[2])
    rows = [chat_line(f"q{i}", text, max_tokens=10, temperature=0) for i, text in enumerate(
        ["What is the capital of France?", "Name three colours."])]
    rows.append(chat_line("refused", "x", temperature=9))
    batch = _submit(client, rows, metadata={"job": "sdk"},
                    output_expires_after={"anchor": "created_at", "seconds": 7200})
    assert batch.status == "validating" and batch.metadata == {"job": "sdk"}
    assert batch.id in [b.id for b in client.batches.list(limit=5)]
    done = wait_batch(client, batch.id)
    assert done.status == "completed", done
    assert (done.request_counts.total, done.request_counts.completed,
            done.request_counts.failed) == (3, 2, 1)
    out, errors = _lines(client, done.output_file_id), _lines(client, done.error_file_id)
    assert client.files.retrieve(done.output_file_id).expires_at - done.completed_at in (
        7199, 7200, 7201)
    assert errors["refused"]["response"]["status_code"] == 400
    direct = _direct(tenant, rows[:2])
    for custom_id, body in direct.items():
        got = out[custom_id]["response"]["body"]
        assert got["choices"][0]["message"] == body["choices"][0]["message"], custom_id
        assert got["choices"][0]["finish_reason"] == body["choices"][0]["finish_reason"]
        # cached_tokens depend on what ran before (prefix cache), not on the answer
        assert [got["usage"][k] == body["usage"][k] for k in COUNTS] == [True] * 3


def _long_batch(client, window="24h"):
    rows = [chat_line(f"short{i}", "Hi", max_tokens=2) for i in range(2)]
    rows += [chat_line(f"long{i}", LONG, max_tokens=400, temperature=0) for i in range(80)]
    return _submit(client, rows, window=window)


def _check_partial(client, batch, status, code):
    assert batch.status == status, batch
    out, errors = _lines(client, batch.output_file_id), _lines(client, batch.error_file_id)
    assert {"short0", "short1"} <= set(out), {k: r.get("error") or r["response"]["body"]
                                              for k, r in errors.items() if "short" in k}
    assert errors and {r["error"]["code"] for r in errors.values()} == {code}
    assert len(out) + len(errors) == batch.request_counts.total == 82
    assert batch.request_counts.completed == len(out)


def test_sdk_cancel_stops_a_running_batch_and_keeps_finished_lines(stack, tenant):
    client = stack.client(tenant[2])
    batch = _long_batch(client)
    wait_batch(client, batch.id, until=lambda b: b.request_counts.completed >= 2)
    cancelling = client.batches.cancel(batch.id)
    assert cancelling.status in ("cancelling", "cancelled")
    done = wait_batch(client, batch.id)
    _check_partial(client, done, "cancelled", "batch_cancelled")
    assert done.cancelled_at is not None


def test_short_window_expires_a_running_batch_and_keeps_finished_lines(stack, tenant):
    client = stack.client(tenant[2])
    # The window must leave time for the two short lines on this host (a slow CI run once
    # finished neither within 20 s): time a batch of two such lines first, and give the long
    # batch four times that. The long lines take minutes whatever the window.
    started = time.monotonic()
    probe = _submit(client, [chat_line(f"probe{i}", "Hi", max_tokens=2) for i in range(2)])
    assert wait_batch(client, probe.id).status == "completed"
    window = max(20, math.ceil(4 * (time.monotonic() - started)))
    batch = _long_batch(client, window=f"{window}s")
    assert batch.expires_at - batch.created_at == window
    done = wait_batch(client, batch.id, timeout=window + 120)
    _check_partial(client, done, "expired", "batch_expired")
    assert done.expired_at >= batch.expires_at
