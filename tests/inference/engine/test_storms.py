"""Storms (issue 18), as the reference servers test them, through the ``AsyncEngine`` on the
tiny random model of the engine tests (``helpers.tiny_loaded``) with a 4096-token context.

Not through the gateway: every in-flight gateway request holds a database connection (Django
runs each request's ORM calls on a thread of its own), and 200 of them exceed the shared CI
PostgreSQL's 100 connections; the gateway's own disconnect path is covered by its live tests.

- 200 requests, each asking for the whole context (``max_model_len`` − prompt tokens) with
  ``EngineConfig.ignore_eos`` (the test-only switch), whose consumers close their streams 0.5 s
  after the first token: every one is aborted, no KV block stays in use, and a fresh request
  then completes.
- 100 concurrent greedy requests in ``matmul_dtype="float32"`` (``LASER_MATMUL_DTYPE``), 10 of
  them closed mid-stream: the other 90 produce exactly the tokens the same 100 produce without
  the aborts.
"""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from inference.engine import EngineConfig, LLMEngine
from inference.engine.async_engine import AsyncEngine
from inference.request import EngineRequest, SamplingParams
from tests.inference.engine.helpers import make_engine, prompt_ids, request, run, tiny_loaded

pytestmark = pytest.mark.timeout(180)
STORM_LEN = 2048  # each storm request asks for all of it: far more than 0.5 s of decoding


def _engine(**config) -> AsyncEngine:
    cfg = EngineConfig(device="cpu", kv_memory_mb=64.0, max_num_batched_tokens=1024,
                       num_threads=1, **config)
    engine = AsyncEngine(cfg, LLMEngine(cfg, loaded=tiny_loaded(max_position=4096)))
    engine.start(wait=True)
    return engine


def _request(i: int, max_tokens: int) -> EngineRequest:
    # ignore_eos left False: the engine's switch is what runs them to max_tokens
    return EngineRequest(f"r{i}", SamplingParams(max_tokens=max_tokens, temperature=0.0),
                         prompt_token_ids=prompt_ids(16, offset=i),
                         tenant_id="t")


def test_the_ignore_eos_switch_runs_a_request_past_its_eos():
    def always_eos(engine: LLMEngine) -> LLMEngine:
        sample = engine.sampler.sample
        engine.sampler.sample = lambda logits, rows: dataclasses.replace(
            sample(logits, rows), token_ids=[0] * len(rows))  # 0: the tiny model's EOS
        return engine

    plain, ignoring = always_eos(make_engine()), always_eos(make_engine(ignore_eos=True))
    for engine in (plain, ignoring):
        engine.add_request(request("a", prompt_ids(6), max_tokens=5, ignore_eos=False))
    ids, _, finish = run(plain)["a"][0]
    assert finish == "stop" and ids == (0,)
    ids, _, finish = run(ignoring)["a"][0]
    assert finish == "length" and ids == (0,) * 5


def test_200_whole_context_requests_dropped_after_half_a_second():
    engine = _engine(max_model_len=STORM_LEN, max_num_seqs=64, ignore_eos=True)

    async def dropped(i: int) -> tuple[int, bool]:
        """(tokens received, ran to its end), closed 0.5 s after its first token."""
        stream = await engine.generate(_request(i, STORM_LEN - 16))
        received = 0

        async def read() -> None:
            nonlocal received
            async for delta in stream:
                received += len(delta.token_ids)

        while not received:  # a first delta may carry only a tier change (a demotion)
            received += len((await stream.__anext__()).token_ids)
        try:
            await asyncio.wait_for(read(), 0.5)
        except asyncio.TimeoutError:
            return received, False
        finally:
            await stream.aclose()
        return received, True

    async def storm():
        return await asyncio.gather(*(dropped(i) for i in range(200)))

    async def fresh():
        stream = await engine.generate(_request(999, 8))
        return [d async for d in stream]

    try:
        results = asyncio.run(storm())
        assert not any(finished for _, finished in results)
        assert all(0 < received < STORM_LEN - 16 for received, _ in results), sorted(results)
        assert engine.engine.num_requests == 0
        stats = engine.stats_now()
        assert stats.used_blocks == 0 and not any(stats.running.values()), stats
        deltas = asyncio.run(fresh())
        assert deltas[-1].finish_reason == "length"
        assert sum(len(d.token_ids) for d in deltas) == 8
    finally:
        engine.stop()


def test_90_greedy_requests_unchanged_by_10_aborted_beside_them():
    engine = _engine(matmul_dtype="float32", max_num_seqs=128,
                     max_model_len=1024, ignore_eos=True)
    aborted = set(range(0, 100, 10))

    async def one(i: int, abort: bool) -> tuple[int, ...] | None:
        stream = await engine.generate(_request(i, 48))
        tokens: tuple[int, ...] = ()
        async for delta in stream:
            tokens += delta.token_ids
            if abort and len(tokens) >= 5:
                await stream.aclose()  # mid-stream: its batch neighbours go on without it
                return None
        return tokens

    async def concurrently(aborts: set[int]):
        return await asyncio.gather(*(one(i, i in aborts) for i in range(100)))

    try:
        alone = asyncio.run(concurrently(set()))
        beside = asyncio.run(concurrently(aborted))
        assert all(len(tokens) == 48 for tokens in alone)
        assert all(beside[i] is None for i in aborted)
        kept = [i for i in range(100) if i not in aborted]
        assert [beside[i] for i in kept] == [alone[i] for i in kept]
        assert engine.engine.num_requests == 0 and engine.stats_now().used_blocks == 0
    finally:
        engine.stop()
