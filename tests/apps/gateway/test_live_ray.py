"""The engine on a local Ray cluster (two nodes of one CPU), through the gateway and directly:
Laser's router spreads requests over the replicas, keeps a conversation with its KV cache, and a
replica killed mid-stream leaves every stream complete and token-identical (float32, greedy) to
an undisturbed run."""

from __future__ import annotations

import asyncio
import os
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

# A Ray cluster leaves threads, processes and database sessions behind in the interpreter that
# started it, which broke later async tests of the same run: the suite runs this module in a
# process of its own (tests/apps/gateway/test_fleet_process.py sets the variable below).
if not os.environ.get("LASER_RAY_TESTS_IN_PROCESS"):
    pytest.skip("run in its own process by test_fleet_process.py", allow_module_level=True)
ray = pytest.importorskip("ray")
pytest.importorskip("ray.serve")

from inference.request import EngineRequest, SamplingParams  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
STORE = 200 * 2**20


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    from ray import serve
    from ray.cluster_utils import Cluster

    from inference.fleet.client import RayEngineClient
    from inference.fleet.serve import deploy
    from tests.apps.gateway.live import MAX_MODEL_LEN, write_tiny_model

    model = write_tiny_model(tmp_path_factory.mktemp("fleet") / "tiny.gguf")
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "object_store_memory": STORE, "include_dashboard": False})
    cluster.add_node(num_cpus=1, object_store_memory=STORE)
    ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
    serve.start(http_options={"location": "NoServer"})
    config = {"model": str(model), "device": "cpu", "kv_memory_mb": 16.0,
              "max_model_len": MAX_MODEL_LEN, "max_num_batched_tokens": 256,
              "max_num_seqs": 16, "num_threads": 1}
    handle = deploy(config, num_replicas=2, num_cpus=1.0, stats_period_s=0.3)
    time.sleep(2.0)  # both replicas publish their stats once before the first request
    yield RayEngineClient(handle=handle)
    serve.shutdown()
    ray.shutdown()
    cluster.shutdown()


def request(rid, ids, max_tokens=24):
    return EngineRequest(rid, SamplingParams(temperature=0.0, max_tokens=max_tokens),
                         prompt_token_ids=ids, tenant_id="t")


async def collect(client, req):
    stream = await client.generate(req, req.prompt_token_ids)
    tokens, last = [], None
    async for delta in stream:
        tokens.extend(delta.token_ids)
        last = delta
    return stream, tokens, last


def run(coro):
    return asyncio.run(coro)


def test_requests_spread_over_the_replicas(fleet):
    async def go():
        reqs = [request(f"s{i}", [3 + i, 5, 7, 11] * 5) for i in range(8)]
        return await asyncio.gather(*(collect(fleet, r) for r in reqs))

    done = run(go())
    assert all(last.finish_reason == "length" for _, _, last in done)
    assert len({stream.replicas[0] for stream, _, _ in done}) == 2


def test_a_conversations_second_turn_hits_the_prefix_cache_on_its_replica(fleet):
    first = [(7 * i) % 90 + 3 for i in range(64)]
    s1, answer, _ = run(collect(fleet, request("turn1", first)))
    time.sleep(1.0)  # the replicas publish their cached blocks
    s2, _, last = run(collect(fleet, request("turn2", first + answer + [4, 5, 6])))
    assert s2.replicas == s1.replicas
    assert last.cached_tokens >= 64


def test_a_replica_killed_mid_stream_leaves_every_stream_complete_and_identical(fleet):
    prompts = [[(5 * i + k) % 90 + 3 for k in range(24)] for i in range(3)]

    async def undisturbed():
        return await asyncio.gather(*(collect(fleet, request(f"c{i}", p, 64))
                                      for i, p in enumerate(prompts)))

    calm = run(undisturbed())

    async def disturbed():
        streams = [await fleet.generate(request(f"d{i}", p, 64), p)
                   for i, p in enumerate(prompts)]
        out = [[] for _ in streams]
        for i, s in enumerate(streams):
            out[i].extend((await s.__anext__()).token_ids)
        victim = streams[0].replicas[0]
        ray.kill(ray.get_actor(victim, namespace="serve"))  # its actor name
        for i, s in enumerate(streams):
            async for delta in s:
                out[i].extend(delta.token_ids)
        return streams, out

    streams, tokens = run(disturbed())
    assert tokens == [t for _, t, _ in calm]
    assert fleet.migrations >= 1
    assert any(len(s.replicas) == 2 for s in streams)


@pytest.mark.django_db(transaction=True)
def test_the_openai_sdk_spreads_over_replicas_and_a_second_turn_hits_the_cache(
        fleet, laser_server, contracted):
    import openai

    from apps.gateway.engine_client import set_engine_client

    old = set_engine_client(fleet)
    try:
        client = openai.OpenAI(base_url=f"{laser_server.url}/v1", api_key=contracted()[2],
                               max_retries=0, timeout=120)
        model = "smollm2-135m-instruct"

        def ask(messages, n=8):
            return client.chat.completions.create(model=model, messages=messages,
                                                  max_tokens=n, temperature=0)

        before = dict(fleet.routed)
        with ThreadPoolExecutor(6) as pool:
            answers = list(pool.map(lambda i: ask([{"role": "user", "content": f"hi {i}"}]),
                                    range(6)))
        assert all(a.choices[0].finish_reason == "length" for a in answers)
        assert sum(n > before.get(r, 0) for r, n in fleet.routed.items()) == 2
        chat = [{"role": "user", "content": "tell me a story about a cat " * 6}]
        first = ask(chat, 16)
        time.sleep(1.0)  # the replicas publish their cached blocks
        chat += [{"role": "assistant", "content": first.choices[0].message.content},
                 {"role": "user", "content": "and then?"}]
        assert ask(chat).usage.prompt_tokens_details.cached_tokens > 0
    finally:
        set_engine_client(old)
