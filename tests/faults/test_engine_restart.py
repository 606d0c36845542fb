"""The engine's step loop dies mid-stream (issue 18): a fault injected into the real engine's
step (the test wraps ``LLMEngine.step``; no API reaches it) under a stream through the live
gateway. The stream gets an error frame and is booked as an interruption, ``/ready`` is 503
naming the failure until the loop restarts (after ``restart_backoff_s``), no KV block stays in
use, and a fresh request then completes."""

from __future__ import annotations

import threading

import httpx
import openai
import pytest

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]
MODEL = "smollm2-135m-instruct"
HI = [{"role": "user", "content": "hello world"}]
BACKOFF_S = 3.0  # long enough to look at /ready while the loop is down, on a loaded machine


@pytest.fixture
def faulty_engine(tiny_model_path, settings):
    """The process's engine (a fresh one over the tiny model) with a step that raises once
    ``armed`` is set, and registered with the lifecycle as ``manage.py serve`` does."""
    from apps.core.lifecycle import lifecycle
    from apps.gateway import engine_component
    from apps.gateway.engine_client import set_engine_client
    from tests.apps.gateway.live import start_engine

    engine = start_engine(str(tiny_model_path))
    engine.restart_backoff_s = (BACKOFF_S, BACKOFF_S)
    armed = threading.Event()
    real_step = engine.engine.step

    def step():
        deltas = real_step()  # the step ran (tokens sampled, blocks taken), then the loop dies
        if armed.is_set():
            armed.clear()
            raise RuntimeError("injected fault")
        return deltas

    engine.engine.step = step
    lifecycle.reset()
    lifecycle.register("engine", start=lambda: None, stop=lambda: None,
                       ready=engine_component._ready, reason=engine_component._reason)
    lifecycle.start_all()
    old = set_engine_client(engine)
    yield engine, armed
    set_engine_client(old)
    lifecycle.reset()
    engine.stop()


def _records():
    from apps.slo.models import RequestRecord
    from apps.slo.reporting import flush_reports

    flush_reports()
    return [(r.outcome, r.error_code) for r in RequestRecord.objects.order_by("arrival")]


def test_a_dead_step_loop_is_restarted_and_its_streams_interrupted(laser_server, faulty_engine,
                                                                     contracted):
    from tests.apps.gateway.live import wait_until

    engine, armed = faulty_engine
    client = openai.OpenAI(base_url=f"{laser_server.url}/v1", api_key=contracted()[2],
                           max_retries=0, timeout=60)
    assert httpx.get(f"{laser_server.url}/ready").status_code == 200
    stream = client.chat.completions.create(model=MODEL, messages=HI, max_tokens=2000,
                                            temperature=0, stream=True)
    received = 0
    with pytest.raises(openai.APIError) as caught:
        for chunk in stream:
            received += 1
            if received == 3:
                armed.set()
    assert received >= 3 and "the engine failed" in caught.value.message
    assert caught.value.code == "engine_unavailable"

    ready = httpx.get(f"{laser_server.url}/ready")  # the loop waits BACKOFF_S to restart
    assert ready.status_code == 503 and ready.headers["Retry-After"]
    message = ready.json()["error"]["message"]
    assert "engine (the step loop failed (RuntimeError('injected fault')); restarting)" in message
    with pytest.raises(openai.InternalServerError) as refused:
        client.chat.completions.create(model=MODEL, messages=HI, max_tokens=4)
    assert refused.value.status_code == 503 and refused.value.code == "engine_unavailable"
    assert engine.stats_now().used_blocks == 0

    assert wait_until(lambda: httpx.get(f"{laser_server.url}/ready").status_code == 200, 30)
    assert engine.restarts == 1
    fresh = client.chat.completions.create(model=MODEL, messages=HI, max_tokens=8,
                                           temperature=0)
    assert fresh.choices[0].finish_reason == "length" and fresh.usage.completion_tokens == 8
    assert _records() == [("interrupted", "engine_unavailable"),
                          ("rejected_503", "engine_unavailable"), ("ok", "")]
