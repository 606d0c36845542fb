"""Cold execution is fair across tenants: a chunk is one turn of one batch (its first
``LASER_BATCH_CHUNK_LINES`` pending lines), the rest of the batch goes to the back of the queue,
and a tenant waiting for its rate window gives the worker back (its turn is re-enqueued with a
countdown) instead of holding it. Validation and finalization go to their own queue."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest
from celery import current_app

from apps.batches import services
from apps.batches.models import Batch
from apps.gateway import admission
from tests.apps.batches.conftest import chat_line

pytestmark = pytest.mark.django_db


def _tenant(tenant_factory, api_key_factory, **terms):
    from apps.slo.services import contract_create

    tenant = tenant_factory()
    contract_create(tenant=tenant, tier="cold", cold_deadline_s=3600, **terms)
    key, _ = api_key_factory(tenant=tenant, default_tier="cold")
    return SimpleNamespace(tenant=tenant, key=key)


def _create(who, upload, n: int, tag: str):
    rows = [chat_line(f"{tag}{i}", f"d{i}") for i in range(n)]
    return services.batch_create(tenant=who.tenant, api_key=who.key,
                                 input_file_id=upload(rows, tenant=who.tenant).uid,
                                 endpoint="/v1/chat/completions", completion_window="24h")


def _status(batch) -> str:
    return Batch.objects.get(pk=batch.pk).status


def test_a_rate_paced_batch_hands_the_worker_to_another_tenants_batch(
        cold, upload, queue, engine, settings, tenant_factory, api_key_factory, monkeypatch):
    settings.LASER_COLD_MIN_DEADLINE_S = 1
    # the limiter counts fixed minutes: its clock stays mid-minute, so no window ends mid-test
    mid_minute = time.time() // 60 * 60 + 30
    monkeypatch.setattr(admission, "clock", lambda: mid_minute)
    slow = _tenant(tenant_factory, api_key_factory, requests_per_min=1)
    paced = _create(slow, upload, 3, "s")
    other = _create(cold, upload, 2, "o")
    queue.run_one()
    queue.run_one()  # both validated: one turn each queued, the slow tenant's first
    assert queue.items == [("chunk", (paced.pk, 1, 3)), ("chunk", (other.pk, 1, 2))]
    queue.run_one()  # one line is served, the others must wait for the next minute: turn over
    name, args = queue.items[-1]
    assert (name, args[0], args[2]) == ("chunk_later", paced.pk, 3)
    assert 1 <= args[3] <= 60  # re-enqueued with the rate window's countdown
    assert queue.items[0] == ("chunk", (other.pk, 1, 2))  # the other tenant goes first
    queue.run_one()
    queue.run_one()  # its finalization
    assert _status(other) == "completed" and _status(paced) == "in_progress"
    served = [r.request_id.rsplit("_", 1)[0] for r in engine.requests]
    assert served == [f"batch_req_{paced.pk}"] + [f"batch_req_{other.pk}"] * 2


def test_turns_alternate_between_batches_whatever_their_sizes(
        cold, upload, queue, engine, settings, tenant_factory, api_key_factory):
    settings.LASER_BATCH_CHUNK_LINES = 2
    settings.LASER_COLD_MIN_DEADLINE_S = 1
    big, small = _create(cold, upload, 6, "b"), None
    second = _tenant(tenant_factory, api_key_factory)
    small = _create(second, upload, 2, "s")
    queue.run_one()
    queue.run_one()
    queue.drain()
    batches = {f"batch_req_{big.pk}": "big", f"batch_req_{small.pk}": "small"}
    order = [batches[r.request_id.rsplit("_", 1)[0]] for r in engine.requests]
    # the small batch's only turn comes right after the big one's first, not after all three
    assert order == ["big", "big", "small", "small", "big", "big", "big", "big"]
    assert _status(big) == _status(small) == "completed"


def _queue(task: str) -> str:
    return current_app.amqp.router.route({}, task)["queue"].name


def test_control_tasks_have_a_queue_of_their_own(settings):
    control = settings.LASER_BATCH_CONTROL_QUEUE
    assert _queue("batches.validate") == _queue("batches.finalize") == control
    # neither the chunks nor the periodic sweep and cleanup can hold a validation
    assert control not in {_queue(t) for t in ("batches.chunk", "batches.sweep",
                                               "batches.cleanup")}
    # a worker started without -Q consumes both queues
    assert {q.name for q in current_app.amqp.queues.values()} >= {control, "celery"}


def test_parallel_turns_split_a_batch_into_ranges(cold, upload, queue, engine, settings):
    settings.LASER_BATCH_PARALLEL_TURNS = 2
    batch = _create(cold, upload, 5, "p")
    queue.run_one()
    assert queue.items == [("chunk", (batch.pk, 1, 3)), ("chunk", (batch.pk, 4, 5))]
    queue.drain()
    assert _status(batch) == "completed" and len(engine.requests) == 5


def test_a_turn_never_waits_past_the_visibility_timeout(settings):
    from apps.batches.tasks import MAX_COUNTDOWN_S

    assert MAX_COUNTDOWN_S < settings.CELERY_VISIBILITY_TIMEOUT


def test_a_tenant_with_more_batches_gets_no_more_lines_per_round(
        cold, upload, queue, engine, settings, tenant_factory, api_key_factory):
    """Turns go round the batches; a turn's lines are shared by the tenant's running batches,
    so two batches of one tenant get as many lines per round as one batch of another."""
    settings.LASER_BATCH_CHUNK_LINES = 2
    settings.LASER_COLD_MIN_DEADLINE_S = 1
    other = _tenant(tenant_factory, api_key_factory)
    mine = [_create(cold, upload, 4, "a"), _create(cold, upload, 4, "b")]
    theirs = _create(other, upload, 4, "c")
    for _ in range(3):
        queue.run_one()  # the three validations
    queue.drain()
    tenant_of = {f"batch_req_{b.pk}": "mine" for b in mine} | {
        f"batch_req_{theirs.pk}": "theirs"}
    order = [tenant_of[r.request_id.rsplit("_", 1)[0]] for r in engine.requests]
    assert order[:4].count("theirs") == 2, order  # round one: 1 + 1 lines of mine, 2 of theirs
    assert order[4:8].count("theirs") == 2, order
    assert {_status(b) for b in (*mine, theirs)} == {"completed"}


def test_a_turn_the_broker_refuses_is_run_by_the_task_itself(cold, upload, queue, engine,
                                                             settings, monkeypatch):
    """The next turn is the batch's only message: with the broker away (Redis restarting) the
    task keeps the batch's turns instead of leaving them to the sweep."""
    from apps.batches import enqueue, tasks

    settings.LASER_BATCH_CHUNK_LINES = 2
    batch = _create(cold, upload, 5, "r")
    queue.run_one()  # validation: one turn queued
    refused = []
    monkeypatch.setattr(enqueue, "sent", lambda send, *args: refused.append(args) and False)
    monkeypatch.setattr(tasks.time, "sleep", lambda s: None)
    _, args = queue.items.pop(0)
    tasks.run_chunk(*args)
    assert refused == [(batch.pk, 3, 5), (batch.pk, 5, 5)]  # each hand-over was tried
    assert _status(batch) == "completed" and len(engine.requests) == 5
