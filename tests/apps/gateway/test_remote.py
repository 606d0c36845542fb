"""Remote engine: wire format round trips; client and workers over Redis (scripted engines).

The real-model version with two ``run_engine`` processes and a SIGKILL is in
``test_live_workers.py``.
"""

from __future__ import annotations

import asyncio
import os
import uuid

import pytest

from apps.gateway.remote import protocol, registry
from inference.errors import EngineUnavailable, PromptTooLong
from inference.request import (
    ContractTargets,
    Delta,
    EngineRequest,
    Profile,
    SamplingParams,
    Tier,
    TierChange,
)
from tests.apps.gateway.fakes import FakeEngine


def test_request_and_delta_round_trip():
    req = EngineRequest("r", SamplingParams(max_tokens=3, stop=("x",), n=2, seed=5),
                        messages=[{"role": "user", "content": "hi"}], tier=Tier.COLD,
                        tenant_id="4", targets=ContractTargets(cold_deadline_s=60),
                        profile=Profile(0.0, 3, 10), deadline=123.0, session_id="s",
                        in_contract=False)
    back = protocol.request_from_wire(protocol.request_to_wire(req))
    assert back == req
    delta = Delta("r", 1, "ab", (5, 6), (1.0, 2.0), Tier.WARM, logprobs=(-1.0, -2.0),
                  top_logprobs=({5: -1.0, 9: -3.0}, {6: -2.0}), finish_reason="stop",
                  tier_change=TierChange(Tier.HOT, Tier.WARM, "pressure", 1.5),
                  prompt_tokens=4, completion_tokens=2, cached_tokens=1)
    wire = protocol.delta_to_wire(delta)
    assert all(isinstance(k, str) for k in wire)
    assert protocol.delta_from_wire(wire) == delta


def test_errors_keep_their_type():
    err = protocol.error_from_wire(protocol.error_to_wire(PromptTooLong("messages", 9, 2, 8)))
    assert isinstance(err, PromptTooLong) and err.param == "messages" and err.max_model_len == 8


def test_sticky_routing_moves_only_a_dead_workers_sessions():
    workers = {w: registry.WorkerInfo(w, f"c.{w}", 0, {}) for w in ("a", "b", "c")}
    sessions = [f"s{i}" for i in range(60)]
    before = {s: registry.pick(workers, s, {}).worker_id for s in sessions}
    assert set(before.values()) == {"a", "b", "c"}
    del workers["b"]
    after = {s: registry.pick(workers, s, {}).worker_id for s in sessions}
    assert all(after[s] == before[s] for s in sessions if before[s] != "b")
    assert registry.pick(workers, None, {"a": 3}).worker_id == "c"


AsyncFake = FakeEngine  # the worker serves any EngineClient


@pytest.fixture
def engine_redis(require_redis, settings):
    """The engine's Redis, under a channel (and so registry keys) of this test's own."""
    settings.LASER_ENGINE_REDIS_URL = os.environ["REDIS_URL"]
    settings.LASER_ENGINE_CHANNEL = f"laser-engine-test-{uuid.uuid4().hex[:8]}"
    settings.LASER_ENGINE_HEARTBEAT_S = 0.1
    settings.LASER_ENGINE_WORKER_TTL_S = 0.4
    return settings.LASER_ENGINE_REDIS_URL


async def _start_worker(name: str, fake: AsyncFake):
    from apps.gateway.remote.worker import EngineWorker

    worker = EngineWorker(fake, worker_id=name)
    task = asyncio.create_task(worker.run())
    return worker, task


async def _wait_for_workers(client, n: int) -> None:
    state = await client._state()
    for _ in range(100):
        if len(await client._workers(state, fresh=True)) >= n:
            return
        await asyncio.sleep(0.05)
    raise AssertionError("workers did not register")


async def _drain(stream) -> None:
    async for _ in stream:
        pass


def _req(rid: str, session: str | None = None) -> EngineRequest:
    return EngineRequest(rid, SamplingParams(max_tokens=5), prompt="x", tenant_id="1",
                         session_id=session)


@pytest.mark.redis
@pytest.mark.asyncio
async def test_remote_client_streams_and_a_dead_worker_interrupts(engine_redis):
    from apps.gateway.engine_client import complete
    from apps.gateway.remote.client import RemoteEngineClient

    slow_a = AsyncFake(words=["a"] * 40, delay=0.05)
    fast_b = AsyncFake(words=["b", "b"])
    worker_a, task_a = await _start_worker("wa", slow_a)
    worker_b, task_b = await _start_worker("wb", fast_b)
    client = RemoteEngineClient()
    await _wait_for_workers(client, 2)
    assert client.ready

    # A session sticks to one worker across turns.
    session = "tenant:chat-1"
    owner = registry.pick(await client._workers(await client._state()), session, {}).worker_id
    result = await complete(_req("t1", session), client)
    result2 = await complete(_req("t2", session), client)
    assert result.text == result2.text == ("a" * 40 if owner == "wa" else "bb")
    # Tokenising happens on a worker (the web process holds no tokenizer); stats read sync.
    assert await client.encode(_req("t3", session)) == [0, 1, 2, 3, 4]
    assert client.stats_now().max_model_len == 2048 and client.stats_now().ready

    # Kill worker A mid-stream: cancelling run() stops its requests and its heartbeat, as a
    # crash would; its registry key then expires.
    sessions = [s for s in (f"s{i}" for i in range(50))
                if registry.pick(await client._workers(await client._state()), s,
                                 {}).worker_id == "wa"]
    stream = await client.generate(_req("long", sessions[0]))
    first = await stream.__anext__()
    assert first.text == "a"
    task_a.cancel()
    with pytest.raises(EngineUnavailable, match="died mid-request"):
        await asyncio.wait_for(_drain(stream), 10)  # the bound only guards against a hang
    await asyncio.gather(task_a, return_exceptions=True)
    assert task_a.cancelled() and worker_a.tasks == {}
    # New requests, even of A's sessions, go to the survivor.
    await asyncio.sleep(0.5)
    survivor = await complete(_req("after", sessions[0]), client)
    assert survivor.text == "bb"
    stats = await client.stats()
    assert stats.ready
    worker_b.stopping.set()
    await asyncio.wait_for(task_b, 5)
    assert not await client.alive(await client._state(), registry.WorkerInfo("wb", "", 0, {}))


@pytest.mark.redis
@pytest.mark.asyncio
async def test_remote_abort_reaches_the_worker(engine_redis):
    from apps.gateway.remote.client import RemoteEngineClient

    fake = AsyncFake(words=["a"] * 100, delay=0.02)
    worker, task = await _start_worker("wx", fake)
    client = RemoteEngineClient()
    await _wait_for_workers(client, 1)
    stream = await client.generate(_req("ab"))
    await stream.__anext__()
    await stream.aclose()
    for _ in range(100):
        if not worker.tasks:
            break
        await asyncio.sleep(0.02)
    assert worker.tasks == {}
    worker.stopping.set()
    await asyncio.wait_for(task, 5)
