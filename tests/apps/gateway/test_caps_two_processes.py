"""Concurrency caps across web processes (issue 41): two uvicorn processes on one Redis and one
database (``gated_web.py``: a scripted engine whose streams stay open until the test says so).
A tenant's cap holds over both: the streams admitted by the two together never pass it, the
excess gets 429 with ``Retry-After``, and the slots come back when the streams end."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

# slow: two web processes start (Django, the engine's imports) before the few requests
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(300),
              pytest.mark.postgres, pytest.mark.redis, pytest.mark.slow]
MODEL = "smollm2-135m-instruct"
CAP = 3


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _database_url() -> str:
    from django.db import connection

    db = connection.settings_dict
    return (f"postgres://{db['USER']}:{db['PASSWORD']}@{db['HOST'] or '127.0.0.1'}:"
            f"{db['PORT'] or 5432}/{db['NAME']}")  # the test database, which this test fills


@pytest.fixture
def two_web(tmp_path: Path):
    """(gate file, [url of process A, url of process B]); both share this test's database."""
    gate = tmp_path / "gate"
    env = {**os.environ, "DATABASE_URL": _database_url(), "LASER_TEST_GATE": str(gate),
           "REDIS_URL": os.environ["REDIS_URL"],
           "LASER_RATELIMIT_REDIS_URL": os.environ["REDIS_URL"],
           "DJANGO_SETTINGS_MODULE": "laser_platform.settings"}
    ports = [_free_port(), _free_port()]
    procs = [subprocess.Popen([sys.executable, "-m", "uvicorn", "--host", "127.0.0.1",
                               "--port", str(port), "--lifespan", "off", "--log-level",
                               "warning", "tests.apps.gateway.gated_web:application"],
                              env=env) for port in ports]
    urls = [f"http://127.0.0.1:{port}" for port in ports]
    try:
        deadline = time.monotonic() + 120
        for url in urls:
            while not _answers(url):
                assert time.monotonic() < deadline, f"{url} did not start"
                assert all(p.poll() is None for p in procs), "a web process died"
                time.sleep(0.2)
        yield gate, urls
    finally:
        gate.touch()
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _answers(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def test_a_tenants_cap_holds_across_two_web_processes(two_web, contracted, plan_for,
                                                      api_key_factory):
    gate, urls = two_web
    tenant, _, key_a = contracted()
    key_b = api_key_factory(tenant=tenant)[1]
    plan_for(tenant, max_inflight_per_key=10, max_inflight_per_tenant=CAP)
    body = {"model": MODEL, "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    admitted, refused = [], []
    with contextlib.ExitStack() as held:
        for n in range(2 * CAP):  # A, B, A, B ...: each stream is open before the next asks
            url, key = (urls[0], key_a) if n % 2 == 0 else (urls[1], key_b)
            client = held.enter_context(httpx.Client(timeout=30))
            response = held.enter_context(client.stream(
                "POST", f"{url}/v1/chat/completions", json=body,
                headers={"Authorization": f"Bearer {key}"}))
            if response.status_code == 200:
                admitted.append((url, response))
            else:
                response.read()
                refused.append(response)
        assert len(admitted) == CAP, [r.status_code for r in refused]
        assert {url for url, _ in admitted} == set(urls)  # both processes admitted some
        for response in refused:
            assert response.status_code == 429, response.text
            assert response.json()["error"]["code"] == "rate_limit_exceeded"
            assert "tenant" in response.json()["error"]["message"]
            assert float(response.headers["Retry-After"]) > 0
        gate.touch()  # the held streams run to their end and give their slots back
        for _, response in admitted:
            assert b"data: [DONE]" in response.read()
    for url, key in zip(urls, (key_a, key_b)):  # each process admits again
        again = httpx.post(f"{url}/v1/chat/completions", timeout=30,
                           json={**body, "stream": False},
                           headers={"Authorization": f"Bearer {key}"})
        assert again.status_code == 200, again.text
