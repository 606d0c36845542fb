"""The official ``openai`` SDK, sync and async, against a live server (uvicorn on a free port)
and the real engine: the tiny GGUF model for the protocol cases, the bundled SmolLM2 in the slow
one. Framing details against a scripted engine are in ``test_rest_framing.py``."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator

import openai
import pytest

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]
MODEL = "smollm2-135m-instruct"
HI = [{"role": "user", "content": "hello world"}]


@pytest.fixture
def key(contracted) -> str:
    return contracted()[2]  # hot, warm and cold contracts; the key defaults to hot


def _client(server, key: str, cls=openai.OpenAI, timeout: float = 60):
    return cls(base_url=f"{server.url}/v1", api_key=key, max_retries=0, timeout=timeout)


def _records():
    from apps.slo.models import RequestRecord
    from apps.slo.services import flush_reports

    flush_reports()
    return list(RequestRecord.objects.order_by("arrival"))


def test_sync_stream_equals_whole_response_with_tier_and_usage(laser_server, tiny_engine, key):
    client = _client(laser_server, key)
    args = {"model": MODEL, "messages": HI, "max_tokens": 24, "temperature": 0,
            "service_tier": "priority"}
    raw = client.chat.completions.with_raw_response.create(**args)
    whole = raw.parse()
    assert raw.headers["X-Laser-Tier"] == "hot" and whole.service_tier == "priority"
    assert whole.choices[0].finish_reason == "length" and whole.usage.completion_tokens == 24
    assert whole.id == raw.headers["X-Request-Id"]

    raw = client.chat.completions.with_raw_response.create(
        **args, stream=True, stream_options={"include_usage": True})
    chunks = list(raw.parse())
    assert raw.headers["X-Laser-Tier"] == "hot"
    assert raw.headers["Content-Type"].startswith("text/event-stream")
    *deltas, last = chunks
    assert "".join(c.choices[0].delta.content for c in deltas) == \
        whole.choices[0].message.content
    assert deltas[0].choices[0].delta.role == "assistant"
    assert deltas[-1].choices[0].finish_reason == "length"
    assert last.choices == [] and last.usage.completion_tokens == 24
    assert last.usage.prompt_tokens == whole.usage.prompt_tokens
    assert {c.service_tier for c in chunks} == {"priority"}
    assert [(r.outcome, r.streamed) for r in _records()] == [("ok", False), ("ok", True)]


def test_n_choices_streamed_and_whole(laser_server, tiny_engine, key):
    client = _client(laser_server, key)
    whole = client.chat.completions.create(model=MODEL, messages=HI, n=3, max_tokens=8,
                                           temperature=1.0, seed=7)
    assert sorted(c.index for c in whole.choices) == [0, 1, 2]
    # Sampling may pick a stop token early; greedy (below) never does with this model.
    assert all(c.finish_reason in ("stop", "length") for c in whole.choices)
    assert 3 <= whole.usage.completion_tokens <= 24

    stream = client.chat.completions.create(model=MODEL, messages=HI, n=2, max_tokens=6,
                                            temperature=0, stream=True)
    texts, finishes = {0: "", 1: ""}, {}
    for chunk in stream:
        for choice in chunk.choices:
            texts[choice.index] += choice.delta.content or ""
            if choice.finish_reason:
                finishes[choice.index] = choice.finish_reason
    assert finishes == {0: "length", 1: "length"}
    assert texts[0] == texts[1] != ""  # greedy: both choices decode the same tokens


TIERS = [  # service_tier asked -> (echoed by the SDK, X-Laser-Tier)
    ("priority", "priority", "hot"), ("flex", "flex", "cold"), ("warm", "default", "warm"),
    ("cold", "flex", "cold"), ("auto", "priority", "hot"), (None, "priority", "hot"),
]


@pytest.mark.asyncio
async def test_async_sdk_service_tier_echoed_in_response_chunks_and_header(laser_server,
                                                                           tiny_engine, key):
    client = _client(laser_server, key, openai.AsyncOpenAI)

    async def ask(tier: str | None, stream: bool):
        extra = {"service_tier": tier} if tier is not None else {}
        raw = await client.chat.completions.with_raw_response.create(
            model=MODEL, messages=HI, max_tokens=4, stream=stream, **extra)
        parsed = raw.parse()  # the legacy raw response parses synchronously
        tiers = {c.service_tier async for c in parsed} if stream else {parsed.service_tier}
        return tiers, raw.headers["X-Laser-Tier"]

    # One request first: it writes the key's last_used_at, which SQLite's shared-cache test
    # database would otherwise lock against the concurrent readers below (a file database in
    # WAL mode, as served, lets readers through).
    assert await ask(None, False) == ({"priority"}, "hot")
    got = await asyncio.gather(*(ask(t, s) for t, _, _ in TIERS for s in (False, True)))
    want = [({echo}, header) for _, echo, header in TIERS for _ in (False, True)]
    assert got == want
    await client.close()


def test_text_completions_and_sdk_errors(laser_server, tiny_engine, contracted):
    _, _, hot_only = contracted(tiers=("hot",))
    client = _client(laser_server, hot_only)
    whole = client.completions.create(model=MODEL, prompt="hello", max_tokens=5, temperature=0)
    streamed = "".join(c.choices[0].text for c in client.completions.create(
        model=MODEL, prompt="hello", max_tokens=5, temperature=0, stream=True))
    assert whole.object == "text_completion" and whole.choices[0].text == streamed

    with pytest.raises(openai.BadRequestError) as no_contract:
        client.chat.completions.create(model=MODEL, messages=HI, service_tier="flex")
    with pytest.raises(openai.BadRequestError) as tools:
        client.chat.completions.create(model=MODEL, messages=HI, tools=[
            {"type": "retrieval"}])
    with pytest.raises(openai.NotFoundError) as model:
        client.chat.completions.create(model="gpt-4o", messages=HI)
    with pytest.raises(openai.AuthenticationError):
        _client(laser_server, "sk-wrong").chat.completions.create(model=MODEL, messages=HI)
    assert (no_contract.value.param, tools.value.param, model.value.code) == \
        ("service_tier", "tools[0].type", "model_not_found")


@pytest.mark.slow
def test_smollm2_streams_an_answer_through_the_sdk(laser_server, smollm2_engine, key):
    client = _client(laser_server, key)
    stream = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "What is the capital of France?"}],
        max_tokens=24, temperature=0, stream=True, stream_options={"include_usage": True},
        service_tier="warm")
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content for c in chunks if c.choices)
    assert "Paris" in text
    finish, used = chunks[-2].choices[0].finish_reason, chunks[-1].usage.completion_tokens
    assert used == 24 if finish == "length" else (finish == "stop" and 0 < used < 24)
    assert {c.service_tier for c in chunks} == {"default"}
    [record] = _records()
    assert (record.outcome, record.tier_served, record.streamed) == ("ok", "warm", True)


Result = tuple[int | str, str | None, str | None, str | None]


def _round(server, key: str, size: int) -> list[Result]:
    """``size`` simultaneous chats from one key (half streamed): (status, X-Laser-Tier, the
    service_tier of the last chunk or of the response, that of the first chunk or of the
    response) each. A stream's headers go out with its first chunk; sustained hot pressure
    may demote (or restore) it later, which its later chunks show."""

    async def one(client, i: int) -> Result:
        args = {"model": MODEL, "max_tokens": 8, "temperature": 0,
                "messages": [{"role": "user", "content": f"Say a word about the number {i}."}]}
        try:
            if i % 2:
                raw = await client.chat.completions.with_raw_response.create(
                    **args, stream=True)
                tiers = [c.service_tier async for c in raw.parse()]
                return raw.status_code, raw.headers.get("X-Laser-Tier"), tiers[-1], tiers[0]
            raw = await client.chat.completions.with_raw_response.create(**args)
            tier = raw.parse().service_tier
            return raw.status_code, raw.headers.get("X-Laser-Tier"), tier, tier
        except openai.APIStatusError as exc:
            return exc.status_code, None, None, None
        except openai.APIError as exc:  # an error frame in a stream
            return type(exc).__name__, None, None, None

    async def burst() -> list:
        # a slowed host serves the burst slowly; slow is not what this asks
        client = _client(server, key, openai.AsyncOpenAI, timeout=300)
        try:
            return await asyncio.gather(*(one(client, i) for i in range(size)))
        finally:
            await client.close()

    return asyncio.run(burst())


@pytest.fixture
def cpu_neighbours() -> Iterator[None]:
    """A busy loop in another process on every core this process may use but one: a shared
    host's noisy neighbour, which the engine must feel (and not mistake for overload)."""
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
            for _ in range(max(1, len(os.sched_getaffinity(0)) - 1))]
    try:
        yield
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_burst_of_hot_chats_is_served_or_demoted_never_refused(laser_server, smollm2_engine,
                                                                  key, cpu_neighbours):
    """Issue 23: 16, then 32 simultaneous chats from one hot key: every one answered (no 503,
    no 429); a request the engine could not start within its hot target is demoted to warm
    and says so (``service_tier: "default"``; the SLO record shows warm). Issue 41: with a
    busy loop on every core but one beside the server (CI on a shared host refused several)."""
    for size in (16, 32):
        results = _round(laser_server, key, size)
        records = _records()[-size:]
        demoted = sum(r.tier_served == "warm" for r in records)
        marked = sum(tier == "default" for _, _, tier, _ in results)
        summary = f"{size} chats: {demoted} demoted to warm, {marked} marked 'default'"
        assert [status for status, *_ in results] == [200] * size, (summary, results)
        assert {r.outcome for r in records} == {"ok"}, summary
        assert {r.tier_asked for r in records} == {"hot"}, summary
        # every demotion the engine made reached the client, and no other request says so
        assert marked == demoted, (summary, results)
        assert {tier for _, _, tier, _ in results} <= {"priority", "default"}, summary
        # the headers go out after a demotion before the first token (a whole response's at
        # its end, a hot stream's with its first chunk): X-Laser-Tier says what that said
        headers = [(header, first) for _, header, _, first in results]
        assert all((header == "warm") == (first == "default") for header, first in headers), \
            headers
        contention = smollm2_engine.stats_now().cpu_contention
        print(f"{summary}; CPU contention {contention:.1f}x")  # noqa: T201 (shown with -s)
    # the neighbours were felt: the engine's threads waited for cores
    assert smollm2_engine.stats_now().cpu_contention > 1.1
