"""Every transport keeps the same contract: transport x condition against one live server.

One uvicorn server (REST JSON, SSE, ``/ws/chat/``) and the batch chunk runner share one real
engine (the tiny model). Each row sets up a condition on a fresh tenant, sends a first request
where the condition needs one (it must succeed), changes what the row changes, then sends the
request under test; ``EXPECTED`` is what each transport must answer and what its SLO record
says. Batch lines: over rpm/tpm, a concurrency cap or a saturated engine they are paced (still
pending when the chunk hands them back, nothing fails; the cap and saturation rows then run
them to success); a spent budget or a revoked key ends them in the error file.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from django.utils import timezone
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]
MODEL = "smollm2-135m-instruct"
CHAT = "/v1/chat/completions"
TRANSPORTS = ("rest", "sse", "ws", "batch")
CONDITIONS = ("revoked", "rpm", "tpm", "budget", "key_cap", "too_long", "saturated")
LONG = "x " * 40_000  # more characters than the tiny model's 4,096-token context can hold

# condition -> (status, error code, SLO outcome of the request under test) for REST and SSE;
# WebSocket: the same code in an `error` message (a 401 also closes the socket with 4401).
# None: no record (a key no longer valid speaks for no tenant).
LIVE = {
    "revoked": (401, "invalid_api_key", None),
    "rpm": (429, "rate_limit_exceeded", "rejected_429"),
    "tpm": (429, "rate_limit_exceeded", "rejected_429"),
    "budget": (429, "insufficient_quota", "rejected_429"),
    "key_cap": (429, "rate_limit_exceeded", "rejected_429"),
    "too_long": (400, "context_length_exceeded", "rejected_400"),
    "saturated": (503, "engine_overloaded", "rejected_503"),
}
# condition -> what happens to the batch line under test: ("failed", code, SLO outcome) or
# ("paced", then-succeeds?, None: no record while it waits).
BATCH = {
    "revoked": ("failed", "invalid_api_key", None),
    "rpm": ("paced", False, None),
    "tpm": ("paced", False, None),
    "budget": ("failed", "insufficient_quota", "rejected_429"),
    "key_cap": ("paced", True, "ok"),
    "too_long": ("failed", "context_length_exceeded", "rejected_400"),
    "saturated": ("paced", True, "ok"),
}
TERMS = {"rpm": {"requests_per_min": 1}, "tpm": {"tokens_per_min": 1},
         "budget": {"daily_token_budget": 1}}
NEEDS_FIRST = ("revoked", "rpm", "tpm")


@dataclass
class Outcome:
    status: int | str  # HTTP status, "done", "error" (WebSocket), "failed"/"pending" (batch)
    code: str | None = None
    close_code: int | None = None
    request_id: str | None = None


def _body(content: str = "hello world", **extra: Any) -> dict:
    return {"model": MODEL, "messages": [{"role": "user", "content": content}],
            "max_tokens": 4, "temperature": 0, **extra}


class Rest:
    def __init__(self, server: Any, key: str, stream: bool) -> None:
        self.client = httpx.Client(base_url=server.url, timeout=60,
                                   headers={"Authorization": f"Bearer {key}"})
        self.stream = stream

    def send(self, content: str = "hello world") -> Outcome:
        body = _body(content, stream=self.stream)
        if not self.stream:
            response = self.client.post(CHAT, json=body)
            error = response.json().get("error") or {}
            return Outcome(response.status_code, error.get("code"))
        with self.client.stream("POST", CHAT, json=body) as response:
            raw = response.read().decode()
        if response.status_code != 200:
            return Outcome(response.status_code, json.loads(raw)["error"]["code"])
        frames = [json.loads(x[6:]) for x in raw.split("\n\n") if x.startswith("data: {")]
        errors = [f["error"]["code"] for f in frames if "error" in f]
        return Outcome("interrupted" if errors else 200, errors[0] if errors else None)

    def close(self) -> None:
        self.client.close()


class Socket:
    """One WebSocket kept open across the row's turns (a key revoked in between)."""

    def __init__(self, server: Any, key: str) -> None:
        self.ws = connect(f"{server.ws_url}/ws/chat/", subprotocols=["laser.v1", f"key.{key}"],
                          origin=server.url, open_timeout=10)
        assert json.loads(self.ws.recv(timeout=10))["type"] == "ready"

    def send(self, content: str = "hello world") -> Outcome:
        params = {"max_tokens": 4, "temperature": 0}
        self.ws.send(json.dumps({"type": "chat", "session_id": "s", "params": params,
                                 "messages": [{"role": "user", "content": content}]}))
        while True:
            try:
                message = json.loads(self.ws.recv(timeout=60))
            except ConnectionClosed as closed:
                return Outcome("closed", None, closed.rcvd.code if closed.rcvd else None)
            if message["type"] == "done":
                return Outcome("done", None, request_id=message["request_id"])
            if message["type"] == "error":
                close_code = None
                try:
                    self.ws.recv(timeout=2)
                except ConnectionClosed as closed:
                    close_code = closed.rcvd.code if closed.rcvd else None
                except TimeoutError:
                    pass
                return Outcome("error", message["error"]["code"], close_code)

    def close(self) -> None:
        self.ws.close()


class BatchLines:
    """A running batch of the row's key; each ``send`` adds one line and runs a chunk of it."""

    def __init__(self, tenant: Any, api_key: Any, engine: Any) -> None:
        from apps.batches.models import Batch

        self.engine, self.line_no = engine, 0
        self.batch = Batch.objects.create(
            tenant=tenant, api_key=api_key, input_file_uid="file-matrix", endpoint=CHAT,
            completion_window="24h", status="in_progress", output_expires_after_s=3600,
            deadline_at=timezone.now() + dt.timedelta(hours=1))

    def send(self, content: str = "hello world") -> Outcome:
        from apps.batches.models import BatchLine

        self.line_no += 1
        line = BatchLine.objects.create(batch=self.batch, line_no=self.line_no,
                                        custom_id=f"line-{self.line_no}", body=_body(content))
        return self.run(line)

    def run(self, line: Any) -> Outcome:
        from apps.batches.execution import chunk_run

        result = chunk_run(batch_id=self.batch.pk, first=line.line_no, last=line.line_no,
                           client=self.engine)
        line.refresh_from_db()
        if line.status == "pending":
            assert result.leftover == [line.line_no]  # handed back, to run again later
            return Outcome("pending", None, request_id=line.request_id)
        body = line.response["body"]
        code = body["error"]["code"] if "error" in body else None
        return Outcome(line.status, code, request_id=line.request_id)

    def close(self) -> None:
        pass


@contextmanager
def _slot_held(api_key: Any):
    """Another request of this key in flight (its slot held) until the block ends: a stream of
    the tiny model would finish before the request under test is sent."""
    from apps.gateway.serving import Caller, slots

    caller = Caller.for_key(api_key)
    slots.acquire(caller)
    try:
        yield
    finally:
        slots.release(caller)


def _records(tenant: Any) -> list[Any]:
    from apps.slo.models import RequestRecord
    from apps.slo.services import flush_reports

    flush_reports()
    return list(RequestRecord.objects.filter(tenant_id=tenant.pk).order_by("arrival"))


@pytest.mark.parametrize("condition", CONDITIONS)
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_each_transport_keeps_the_contract(transport, condition, laser_server, tiny_engine,
                                           contracted, plan_for, settings, monkeypatch):
    from apps.gateway import admission
    from apps.tenants.models import Plan

    now = time.time()  # one rate window for the whole case: it cannot straddle a minute's end
    monkeypatch.setattr(admission, "clock", lambda: now)
    settings.LASER_COLD_MIN_DEADLINE_S = 1
    settings.LASER_BATCH_CHUNK_SOFT_LIMIT_S = 1.0
    settings.LASER_BATCH_POLL_S = 0.2
    tenant, api_key, key = contracted(cold_deadline_s=3600, **TERMS.get(condition, {}))
    if condition == "key_cap":  # before the socket opens: an open socket keeps its caller's plan
        plan = plan_for(tenant, max_inflight_per_key=1)
    if transport == "batch":
        client: Any = BatchLines(tenant, api_key, tiny_engine)
    elif transport == "ws":
        client = Socket(laser_server, key)
    else:
        client = Rest(laser_server, key, stream=transport == "sse")
    ok = {"rest": 200, "sse": 200, "ws": "done", "batch": "succeeded"}[transport]
    with ExitStack() as stack:
        stack.callback(client.close)
        if condition in NEEDS_FIRST:
            assert client.send().status == ok
        if condition == "rpm" and transport != "batch":  # excess: admitted up to the ceiling
            assert client.send().status == ok  # (rpm 1 x burst 2); batch lines are paced at 1
        if condition == "revoked":
            from apps.tenants.services import api_key_revoke

            api_key_revoke(api_key=api_key)
        elif condition == "key_cap":
            stack.enter_context(_slot_held(api_key))
        elif condition == "saturated":
            settings.LASER_GATEWAY_MAX_QUEUED = 0
            from apps.gateway import serving

            serving._stats_cache["stats"] = None
        got = client.send(LONG if condition == "too_long" else "hello world")
        if transport == "batch" and BATCH[condition][0] == "paced":
            assert got.status == "pending"  # handed back, not failed, nothing booked for it
            assert not [r for r in _records(tenant) if r.request_id == got.request_id]
            if BATCH[condition][1]:  # the cause goes away: the line runs to success
                settings.LASER_GATEWAY_MAX_QUEUED = 512
                if condition == "key_cap":
                    Plan.objects.filter(pk=plan.pk).update(max_inflight_per_key=128)
                stack.close()
                got = client.run(client.batch.lines.get(line_no=client.line_no))
                assert got.status == "succeeded"
    from apps.gateway.admission import inflight
    from apps.gateway.serving import Caller, slots
    from tests.apps.gateway.live import wait_until

    # every exit released what it held, once: nothing of this key or tenant is left in flight
    assert wait_until(lambda: slots.held(Caller.for_key(api_key)) == (0, 0), timeout=5)
    assert wait_until(lambda: inflight.count == 0, timeout=5)
    records = _records(tenant)
    if transport == "batch":
        kind, code, outcome = BATCH[condition]
        if kind == "failed":
            assert (got.status, got.code) == ("failed", code)
            from apps.batches.selectors import request_counts

            assert request_counts(client.batch)["failed"] == 1  # the batch's progress shows it
        if outcome is not None:
            assert records[-1].outcome == outcome
        else:
            assert not [r for r in records if r.request_id == got.request_id]
        return
    status, code, outcome = LIVE[condition]
    if transport == "ws":
        assert (got.status, got.code) == ("error", code)
        assert got.close_code == (4401 if status == 401 else None)
    else:
        assert (got.status, got.code) == (status, code)
    booked = (condition in NEEDS_FIRST) + (condition == "rpm") + (outcome is not None)
    assert len(records) == booked
    if outcome is not None:
        assert (records[-1].outcome, records[-1].error_code) == (outcome, code)
