"""Fixtures for the batches app: a tenant with a cold contract, a scripted engine, and an
in-test task queue standing in for the broker (tasks run when the test drains it)."""

from __future__ import annotations

import json
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest

from tests.apps.batches.fakes import FakeEngine


def chat_line(custom_id: str, content: str, *, max_tokens: int = 8, **body: Any) -> dict:
    from django.conf import settings

    return {"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions",
            "body": {"model": settings.LASER_SERVED_MODEL_ID, "max_tokens": max_tokens,
                     "messages": [{"role": "user", "content": content}], **body}}


def jsonl(rows: list[Any]) -> bytes:
    return b"".join((r if isinstance(r, str) else json.dumps(r)).encode() + b"\n" for r in rows)


@pytest.fixture(autouse=True)
def _manual_slo_flush(request, settings) -> None:
    # No SLO writer thread: it would touch the test database from another thread. Reports a
    # test made are written before its database goes away (or they would be flushed at exit).
    settings.LASER_SLO_AUTOFLUSH = False
    yield
    if request.node.get_closest_marker("django_db"):
        from apps.slo.reporting import flush_reports

        flush_reports()


@pytest.fixture
def cold(tenant_factory, api_key_factory, settings) -> SimpleNamespace:
    """A tenant whose cold contract promises 1 h (so windows of 1h..24h are allowed)."""
    from apps.slo.services import contract_create

    settings.LASER_COLD_MIN_DEADLINE_S = 1
    tenant = tenant_factory()
    contract_create(tenant=tenant, tier="cold", cold_deadline_s=3600)
    key, raw = api_key_factory(tenant=tenant, default_tier="cold")
    return SimpleNamespace(tenant=tenant, key=key, raw=raw)


@pytest.fixture
def engine() -> FakeEngine:
    from apps.gateway.engine_client import set_engine_client

    fake = FakeEngine()
    old = set_engine_client(fake)
    yield fake
    set_engine_client(old)


class TaskQueue:
    """Collects what services enqueue; ``drain()`` runs it like a (single) worker would."""

    def __init__(self) -> None:
        self.items: list[tuple[str, tuple]] = []

    def put(self, send: Callable[..., None], *args: int) -> None:
        self.items.append((send.__name__, args))

    def sent(self, send: Callable[..., None], *args: int) -> bool:
        self.put(send, *args)
        return True

    def names(self) -> list[str]:
        return [name for name, _ in self.items]

    def run_one(self) -> tuple[str, tuple]:
        from apps.batches import tasks

        name, args = self.items.pop(0)
        task = {"validate": tasks.validate_batch, "chunk": tasks.run_chunk,
                "chunk_later": tasks.run_chunk, "finalize": tasks.finalize_batch}[name]
        task(*args[:3] if name == "chunk_later" else args)  # the countdown passes at once
        return name, args

    def drain(self, limit: int = 1000) -> int:
        ran = 0
        while self.items and ran < limit:
            self.run_one()
            ran += 1
        return ran


@pytest.fixture
def queue(monkeypatch) -> TaskQueue:
    from apps.batches import enqueue

    q = TaskQueue()
    monkeypatch.setattr(enqueue, "after_commit", q.put)
    monkeypatch.setattr(enqueue, "sent", q.sent)
    return q


@pytest.fixture
def api(cold):
    from rest_framework.test import APIClient

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {cold.raw}")
    return client


@pytest.fixture
def upload(cold) -> Callable[..., Any]:
    """``upload(rows) -> BatchFile`` for the ``cold`` tenant."""
    from apps.batches.files import file_create

    def make(rows: list[Any], *, tenant: Any = None) -> Any:
        return file_create(tenant=tenant or cold.tenant, filename="in.jsonl",
                           content=jsonl(rows), purpose="batch")

    return make


@pytest.fixture(autouse=True)
def _nothing_left_in_flight():
    """Every line's serving path released what it held (its slots and the process count)."""
    yield
    from apps.gateway.serving import slots
    from tests.apps.gateway.live import wait_until

    assert wait_until(lambda: not slots._requests, timeout=5), dict(slots._requests)
