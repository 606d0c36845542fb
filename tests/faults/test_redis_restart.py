"""Redis restarts (issue 18), against a Redis of the test's own (``servers.py``).

Under the rate limiter and during a stream (the live gateway in this process): a stream admitted
before the crash runs to its end, requests while Redis is down get a logged 503
``rate_limiter_unavailable`` (not a 500), requests after the restart are admitted again, and the
stream's settlement on the restarted Redis books its record, gives its slots back and leaves no
counter without a TTL. (The settlement used to be cut short: the SDK hangs up right after
``[DONE]``, Django cancels the view, and the cancel landed in redis-py's reconnect back-off.)
"""

from __future__ import annotations

import logging
import threading

import openai
import pytest

from tests.faults.servers import RedisServer

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]
MODEL = "smollm2-135m-instruct"
HI = [{"role": "user", "content": "hello world"}]


@pytest.fixture
def own_redis(tmp_path):
    server = RedisServer(tmp_path / "redis", appendonly=False).start()
    yield server
    server.kill()


@pytest.fixture
def gated_engine(tiny_model_path):
    """The process's engine over the tiny model; its step loop waits while ``gate`` is clear."""
    from apps.gateway.engine_client import set_engine_client
    from tests.apps.gateway.live import start_engine

    engine = start_engine(str(tiny_model_path))
    gate = threading.Event()
    gate.set()
    real_step = engine.engine.step

    def step():
        gate.wait(60)
        return real_step()

    engine.engine.step = step
    old = set_engine_client(engine)
    yield gate
    gate.set()
    set_engine_client(old)
    engine.stop()


def test_redis_crash_under_the_limiter_and_a_stream(laser_server, gated_engine, contracted,
                                                     own_redis, settings, caplog):
    from apps.gateway import ratelimit
    from apps.gateway.slots import slots
    from tests.apps.gateway.live import wait_until
    from tests.faults.test_engine_restart import _records

    # the rate limiter and the concurrency slots both in the Redis that restarts
    settings.LASER_RATELIMIT_REDIS_URL = own_redis.url
    ratelimit.get_limiter.cache_clear()
    assert slots.url == own_redis.url
    client = openai.OpenAI(base_url=f"{laser_server.url}/v1", max_retries=0, timeout=60,
                           api_key=contracted(requests_per_min=1000, tokens_per_min=10**6)[2])
    stream = client.chat.completions.create(model=MODEL, messages=HI, max_tokens=300,
                                            temperature=0, stream=True)
    chunks = [next(stream) for _ in range(3)]
    gated_engine.clear()  # the stream stays in flight while Redis is away
    own_redis.kill()
    caplog.set_level(logging.WARNING, "apps.gateway.ratelimit")
    for streamed in (False, True):
        with pytest.raises(openai.InternalServerError) as refused:
            client.chat.completions.create(model=MODEL, messages=HI, max_tokens=4,
                                           stream=streamed)
        assert refused.value.status_code == 503
        assert refused.value.code == "rate_limiter_unavailable"
        assert "rate limiter is unavailable" in refused.value.message
    assert "refusing with 503" in caplog.text

    own_redis.start()  # empty: its counters are gone, and the stream settles against it
    gated_engine.set()
    chunks += list(stream)
    assert chunks[-1].choices[0].finish_reason == "length"
    after = client.chat.completions.create(model=MODEL, messages=HI, max_tokens=4)
    # admitted and answered (sampled: the tiny model may end before its 4 tokens)
    assert after.choices[0].finish_reason in ("length", "stop")
    assert 0 < after.usage.completion_tokens <= 4
    assert _records() == [("ok", ""), ("rejected_503", "rate_limiter_unavailable"),
                          ("rejected_503", "rate_limiter_unavailable"), ("ok", "")]
    redis = own_redis.client()
    keys = redis.keys("laser:rl:*")
    assert keys and all(redis.ttl(key) > 0 for key in keys), {k: redis.ttl(k) for k in keys}
    # every lease given back: the stream's (taken before the crash) and the last request's
    assert wait_until(lambda: not slots._requests and not redis.keys("laser:slots:*"),
                      timeout=10), (slots._requests, redis.keys("laser:slots:*"))
