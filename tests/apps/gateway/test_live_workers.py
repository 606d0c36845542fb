"""Remote mode end to end: a live server whose engine client reaches two real
``manage.py run_engine`` worker processes (the tiny GGUF model) over Redis. One is SIGKILLed
mid-stream: its client gets an error frame, the request is booked as an interruption, and new
requests go to the survivor. Scripted-worker cases are in ``test_remote.py``."""

from __future__ import annotations

import os
import uuid

import openai
import pytest

from tests.apps.gateway.live import EngineWorkers, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.redis, pytest.mark.django_db(transaction=True),
              pytest.mark.timeout(180)]
MODEL = "smollm2-135m-instruct"
HI = [{"role": "user", "content": "hello world"}]
TIMING = {"LASER_ENGINE_HEARTBEAT_S": "0.2", "LASER_ENGINE_WORKER_TTL_S": "1.0"}


@pytest.fixture
def workers(settings, tiny_model_path, tmp_path):
    """Workers ``wa`` and ``wb``; the process's engine client is a ``RemoteEngineClient``."""
    from apps.gateway.engine_client import set_engine_client
    from apps.gateway.remote import registry
    from apps.gateway.remote.client import RemoteEngineClient

    channel = f"laser-engine-test-{uuid.uuid4().hex[:8]}"
    settings.LASER_ENGINE_REDIS_URL = os.environ["REDIS_URL"]
    settings.LASER_ENGINE_CHANNEL = channel
    settings.LASER_ENGINE_HEARTBEAT_S = float(TIMING["LASER_ENGINE_HEARTBEAT_S"])
    settings.LASER_ENGINE_WORKER_TTL_S = float(TIMING["LASER_ENGINE_WORKER_TTL_S"])
    procs = EngineWorkers(tiny_model_path, channel, tmp_path,
                          LASER_ENGINE_REDIS_URL=os.environ["REDIS_URL"], **TIMING)
    client = RemoteEngineClient()
    old = set_engine_client(client)
    try:
        procs.start("wa", "wb")
        import redis

        sync = redis.Redis.from_url(os.environ["REDIS_URL"])
        live = lambda: set(registry.live_workers_sync(sync))  # noqa: E731
        assert wait_until(lambda: live() == {"wa", "wb"}, timeout=30, interval=0.05)
        yield procs, client, live
    finally:
        set_engine_client(old)
        procs.close()


def test_a_worker_killed_mid_stream_interrupts_its_client_and_the_survivor_serves(
        laser_server, contracted, workers):
    from apps.slo.models import RequestRecord
    from apps.slo.services import flush_reports

    procs, client, live = workers
    sdk = openai.OpenAI(base_url=f"{laser_server.url}/v1", api_key=contracted()[2],
                        max_retries=0, timeout=60)
    stream = sdk.chat.completions.create(model=MODEL, messages=HI, max_tokens=3000,
                                         temperature=0, stream=True)
    first = next(iter(stream))
    victim = client._owner[first.id].worker_id
    procs.kill(victim)
    received = 1
    with pytest.raises(openai.APIError, match="died mid-request"):
        for _ in stream:
            received += 1
    assert received < 3000

    survivor = ({"wa", "wb"} - {victim}).pop()
    assert live() == {survivor}
    answers = [sdk.chat.completions.create(model=MODEL, messages=HI, max_tokens=4,
                                           temperature=0) for _ in range(3)]
    assert [a.usage.completion_tokens for a in answers] == [4, 4, 4]
    assert procs.procs[survivor].poll() is None

    flush_reports()
    outcomes = [(r.outcome, r.streamed) for r in RequestRecord.objects.order_by("arrival")]
    assert outcomes == [("interrupted", True)] + [("ok", False)] * 3
