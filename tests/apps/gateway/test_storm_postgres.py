"""A storm of streams through the gateway on PostgreSQL (issue 41): 200 simultaneous streamed
chats, the official ``openai`` SDK against uvicorn and the real engine (the tiny model), while a
thread counts the database's sessions. The server allows 100 connections (CI's and the team's
PostgreSQL); a stream that kept its request's connection while it streamed would need 200 (21
of 200 got 500 ``too many clients already``), and without the pool the arrivals alone opened
up to 85."""

from __future__ import annotations

import asyncio
import threading
import time

import openai
import pytest

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres,
              pytest.mark.slow, pytest.mark.timeout(300)]
STREAMS, KEYS, MAX_TOKENS = 200, 4, 8  # 4 keys: 50 each, under the per-key slot cap
POOL = 16  # DB_POOL_MAX_SIZE as a deployment behind PostgreSQL sets it


@pytest.fixture
def pooled(django_db_blocker):
    """psycopg's pool of ``POOL`` sessions for this test's server threads, as
    ``DB_POOL_MAX_SIZE`` makes it for a process (the threads share the settings dict the
    pool is read from); the rest of the suite runs without one."""
    from django.db import connection

    from tests.apps.gateway.live import close_server_connections

    with django_db_blocker.unblock():
        connection.close()
    options = connection.settings_dict.setdefault("OPTIONS", {})
    options["pool"] = {"min_size": 0, "max_size": POOL, "timeout": 30.0}
    yield POOL
    with django_db_blocker.unblock():
        close_server_connections()  # the pool's sessions and the pool itself
    options.pop("pool", None)


class Sessions:
    """Samples, on its own connection, the sessions open on the test database and the
    requests the gateway serves at that moment; keeps the samples."""

    def __init__(self) -> None:
        from django.conf import settings

        self.params = dict(settings.DATABASES["default"])
        self.samples: list[tuple[int, int]] = []  # (requests in flight, sessions)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Sessions:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        import psycopg

        from apps.gateway.admission import inflight

        p = self.params
        with psycopg.connect(host=p["HOST"], port=p["PORT"] or 5432, user=p["USER"],
                             password=p["PASSWORD"] or None, dbname=p["NAME"],
                             autocommit=True) as conn:
            while not self._stop.is_set():
                row = conn.execute("SELECT count(*) FROM pg_stat_activity "
                                   "WHERE datname = current_database() "
                                   "AND pid <> pg_backend_pid()").fetchone()
                self.samples.append((inflight.count, row[0] if row else 0))
                time.sleep(0.02)


def _storm(url: str, keys: list[str]) -> list[tuple[str, int, str | None]]:
    """(text, completion tokens, finish reason) of every stream, or the error's name."""

    async def one(client: openai.AsyncOpenAI, i: int) -> tuple[str, int, str | None]:
        try:
            stream = await client.chat.completions.create(
                model="smollm2-135m-instruct", max_tokens=MAX_TOKENS, temperature=0,
                messages=[{"role": "user", "content": f"storm {i}"}], stream=True,
                stream_options={"include_usage": True})
            text, usage, finish = "", 0, None
            async for chunk in stream:
                for choice in chunk.choices:
                    text += choice.delta.content or ""
                    finish = choice.finish_reason or finish
                if chunk.usage is not None:
                    usage = chunk.usage.completion_tokens
            return text, usage, finish
        except openai.APIError as exc:
            return f"{type(exc).__name__}: {exc}", 0, None

    async def run() -> list[tuple[str, int, str | None]]:
        clients = [openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0,
                                      timeout=240) for key in keys]
        try:
            return await asyncio.gather(*(one(clients[i % len(clients)], i)
                                          for i in range(STREAMS)))
        finally:
            for client in clients:
                await client.close()

    return asyncio.run(run())


def test_200_streams_through_the_gateway_hold_no_database_connection_while_streaming(
        laser_server, tiny_engine, contracted, api_key_factory, pooled):
    tenant, _, first = contracted()
    keys = [first] + [api_key_factory(tenant=tenant, default_tier="hot")[1]
                      for _ in range(KEYS - 1)]
    with Sessions() as sessions:
        results = _storm(laser_server.url, keys)
    lost = [r for r in results if r[1:] != (MAX_TOKENS, "length")]
    assert not lost, (len(lost), lost[:3])
    peak = max(sessions.samples)
    most = max(s for _, s in sessions.samples)
    print(f"peak: {peak[0]} in flight, {peak[1]} sessions; most sessions {most}")  # noqa: T201
    # the storm was one: many more streams open at once than the pool has sessions (had each
    # held one, the rest would have waited DB_POOL_TIMEOUT_S for one and been lost)
    assert peak[0] > 2 * max(8, pooled), peak
    # at that peak the sessions are the admissions in progress, not one per stream; and the
    # arrivals never open one each either (the pool, ``DB_POOL_MAX_SIZE``, bounds them)
    assert peak[1] < 20, peak
    assert most <= pooled + 2, peak

    from apps.slo.models import RequestRecord
    from apps.slo.services import flush_reports

    flush_reports()
    outcomes = RequestRecord.objects.filter(tenant=tenant).values_list("outcome", flat=True)
    assert sorted(set(outcomes)) == ["ok"] and len(outcomes) == STREAMS
