"""Added latency of the gateway over calling the engine directly (issue 6).

    .venv/bin/python bench/gateway_overhead.py [--streams 1,50] [--tokens 16] [--rounds 2]
        [--client raw|httpx]

One process, one engine (the bundled SmolLM2 unless ``--model``), the same greedy requests two
ways, in rounds of alternating order after a one-token warm-up round through both:

- direct: ``AsyncEngine.generate()`` awaited on this process's event loop;
- gateway: ``POST /v1/chat/completions`` with ``stream: true`` over HTTP to uvicorn serving
  Laser on a thread of this process (the embedded layout: SQLite, in-process limits, SLO
  reports written), API key, admission, SSE framing and all. The client runs in a child
  process (``gateway_overhead.py client``), so its parsing does not share this process's GIL;
  it still shares the machine's cores. ``--client raw`` (default) is a bare asyncio HTTP/1.1
  connection per stream that splits the chunked SSE body and parses each ``data:`` line, the
  least a client can do, so that what is added is the gateway's; ``--client httpx`` is the
  stack the openai SDK streams on (``aiter_lines``), whose own CPU on a 2-core machine adds
  to the delivery delay on top (docs/benchmarks-history.md).

Per request, TTFT as the caller sees it (start of the call -> first token); per token, the
delivery delay: when the caller got the token minus the engine's timestamp for it. On the gateway
side the engine timestamps come from a thin wrapper around the engine client that records each
delta's ``token_times`` (a chunk k is delta k). Added = gateway - direct at the same percentile.
``--paced-ms N`` swaps the model for a stand-in that gives every stream a token each N ms, to
isolate the HTTP path. Writes ``bench/out/gateway_overhead.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

OUT = ROOT / "bench" / "out" / "gateway_overhead.json"
# Prompts that make SmolLM2 answer at length (max_tokens ends them; EOS rarely does).
PROMPTS = [
    "Count from 1 to 200, separated by commas.",
    "Write a long story about a lighthouse keeper and a storm.",
    "Explain in detail how a steam engine works, step by step.",
    "List 100 animals, one per line.",
    "Describe the history of Rome from its founding to the fall of the Western Empire.",
    "Write a detailed recipe for bread, with every step explained.",
    "Explain how the internet works, from cables to web pages, in detail.",
    "Write a poem of at least forty lines about the sea.",
]


def percentile(values: list[float], q: float) -> float:
    """The ``q``-th percentile (nearest rank) of ``values``; NaN when empty."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def write_report(path: Path, args: argparse.Namespace, results: dict) -> None:
    """``results`` with the arguments, the date and the CPU count, as JSON at ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    path.write_text(json.dumps({"args": vars(args), "date": stamp, "cpus": os.cpu_count(),
                                "results": results}, indent=2, default=str))
    print(f"wrote {path.relative_to(ROOT)}")


class PacedEngine:
    """``--paced-ms``: no model; every stream gets one token per tick, all in the same tick, as
    a batched decode step delivers them. Isolates what the HTTP path adds."""

    ready = True

    def __init__(self, tick_s: float) -> None:
        self.tick_s = tick_s

    async def stats(self) -> Any:
        return self.stats_now()

    def stats_now(self) -> Any:
        from inference.engine.stats import EngineStats

        return EngineStats()

    def token_text(self, token_id: int) -> str:
        return ""

    async def encode(self, request: Any) -> list[int]:
        return [0] * 8

    async def abort(self, request_id: str) -> None:
        pass

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass

    async def generate(self, request: Any, prompt_ids: list[int] | None = None) -> Any:
        return self._run(request)

    async def _run(self, request: Any):
        from inference.request import Delta

        n = request.sampling.max_tokens
        for i in range(n):
            await asyncio.sleep(self.tick_s - time.time() % self.tick_s)
            yield Delta(request.request_id, 0, " w", (100 + i,), (time.time(),), request.tier,
                        finish_reason="length" if i == n - 1 else None, prompt_tokens=8,
                        completion_tokens=i + 1)


def setup_embedded_django(var_dir: str, model: str | None, max_num_seqs: int,
                          paced_s: float | None = None) -> dict:
    """Django on a fresh SQLite under ``var_dir`` (the embedded layout), a demo tenant with
    default contracts and a key, and a started engine (or a ``PacedEngine``) in a dict."""
    for name in ("DATABASE_URL", "REDIS_URL", "LASER_ENGINE_MODE"):
        os.environ.pop(name, None)
    os.environ.update(LASER_VAR_DIR=var_dir, DJANGO_SETTINGS_MODULE="laser_platform.settings")
    import django

    django.setup()
    from dataclasses import replace

    from django.core.management import call_command

    from apps.gateway.engine_client import build_async_engine, engine_config
    from apps.slo.selectors import contract_for
    from apps.slo.services import contracts_ensure_defaults
    from apps.tenants.services import api_key_create, tenant_create

    call_command("migrate", verbosity=0)
    tenant = tenant_create(name="Bench", slug="bench")
    contracts_ensure_defaults(tenant=tenant)
    key, plaintext = api_key_create(tenant=tenant, default_tier="hot")
    if paced_s is not None:
        engine: Any = PacedEngine(paced_s)
    else:
        config = replace(engine_config(), max_num_seqs=max_num_seqs,
                         **({"model": model} if model else {}))
        engine = build_async_engine(config)
        engine.start(wait=True)
    return {"tenant": tenant, "key": key, "plaintext": plaintext, "engine": engine,
            "contract": contract_for(tenant=tenant, tier="hot")}


class Recorder:
    """The engine client the gateway uses: the real one, plus each delta's engine timestamp."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self.times: dict[str, list[float]] = defaultdict(list)

    @property
    def ready(self) -> bool:
        return self.engine.ready

    def start(self) -> None:
        self.engine.start()

    def stop(self) -> None:
        self.engine.stop()

    async def encode(self, request: Any) -> list[int]:
        return await self.engine.encode(request)

    async def stats(self) -> Any:
        return await self.engine.stats()

    def stats_now(self) -> Any:
        return self.engine.stats_now()

    def token_text(self, token_id: int) -> str:
        return self.engine.token_text(token_id)

    async def abort(self, request_id: str) -> None:
        await self.engine.abort(request_id)

    async def generate(self, request: Any, prompt_ids: list[int] | None = None) -> Any:
        return self._tap(request.request_id, await self.engine.generate(request, prompt_ids))

    async def _tap(self, request_id: str, stream: Any):
        try:
            async for delta in stream:
                self.times[request_id].append(delta.token_times[-1])
                yield delta
        finally:
            await stream.aclose()


def body(prompt: str, tokens: int) -> dict:
    return {"model": "smollm2-135m-instruct", "messages": [{"role": "user", "content": prompt}],
            "max_tokens": tokens, "temperature": 0, "stream": True}


async def direct_one(ctx: dict, prompt: str, tokens: int) -> tuple[float | None, list[float]]:
    from apps.gateway.params import parse_chat_request

    parsed = parse_chat_request(body(prompt, tokens), tenant=ctx["tenant"],
                                contract=ctx["contract"])
    t0, ttft, delays = time.time(), None, []
    stream = await ctx["engine"].generate(parsed.engine_request)
    async for delta in stream:
        now = time.time()
        ttft = now - t0 if ttft is None and delta.token_ids else ttft
        delays.append(now - delta.token_times[-1])
    return ttft, delays


async def client_stream(http: Any, prompt: str, tokens: int) -> dict:
    """One streamed request: its id, when it was sent and when each chunk arrived."""
    t0, arrivals, request_id = time.time(), [], ""
    async with http.stream("POST", "/v1/chat/completions", json=body(prompt, tokens)) as response:
        async for line in response.aiter_lines():
            if line.startswith("data: {"):
                now, chunk = time.time(), json.loads(line[6:])
                if chunk["choices"]:
                    request_id = chunk["id"]
                    arrivals.append(now)
    return {"id": request_id, "t0": t0, "arrivals": arrivals}


async def raw_stream(url: str, key: str, prompt: str, tokens: int) -> dict:
    """``client_stream`` over a bare connection: one HTTP/1.1 request, the chunked body split
    into SSE events by hand."""
    host, port = urlsplit(url).hostname, urlsplit(url).port
    t0, arrivals, request_id = time.time(), [], ""
    reader, writer = await asyncio.open_connection(host, port)
    try:
        payload = json.dumps(body(prompt, tokens)).encode()
        writer.write(f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}:{port}\r\n"
                     f"Authorization: Bearer {key}\r\nContent-Type: application/json\r\n"
                     f"Content-Length: {len(payload)}\r\n\r\n".encode() + payload)
        status, *headers = (await reader.readuntil(b"\r\n\r\n")).decode().split("\r\n")
        if status.split()[1] != "200" or "transfer-encoding: chunked" not in map(str.lower,
                                                                                 headers):
            raise RuntimeError(f"unexpected response: {status} {headers}")
        pending = b""
        while size := int((await reader.readuntil(b"\r\n"))[:-2], 16):
            pending += (await reader.readexactly(size + 2))[:-2]
            *events, pending = pending.split(b"\n\n")
            for event in events:
                if event.startswith(b"data: {"):
                    now, chunk = time.time(), json.loads(event[6:])
                    if chunk["choices"]:
                        request_id = chunk["id"]
                        arrivals.append(now)
    finally:
        writer.close()
    return {"id": request_id, "t0": t0, "arrivals": arrivals}


async def client_round(job: dict) -> list[dict]:
    if job["client"] == "raw":
        return await asyncio.gather(*(raw_stream(job["url"], job["key"], p, job["tokens"])
                                      for p in job["prompts"]))
    import httpx

    limits = httpx.Limits(max_connections=200, max_keepalive_connections=200)
    async with httpx.AsyncClient(base_url=job["url"], limits=limits, timeout=900, headers={
            "Authorization": f"Bearer {job['key']}"}) as http:
        return await asyncio.gather(*(client_stream(http, p, job["tokens"])
                                      for p in job["prompts"]))


def client_main() -> None:
    """``gateway_overhead.py client``: run one round of streams from the JSON job on stdin and
    print what arrived when (the gateway's client lives in its own process, as it would)."""
    print(json.dumps(asyncio.run(client_round(json.load(sys.stdin)))))


async def gateway_round(ctx: dict, prompts: list[str], tokens: int) -> list:
    job = json.dumps({"url": ctx["url"], "key": ctx["plaintext"], "prompts": prompts,
                      "tokens": tokens, "client": ctx["client"]}).encode()
    proc = await asyncio.create_subprocess_exec(sys.executable, __file__, "client",
                                                stdin=asyncio.subprocess.PIPE,
                                                stdout=asyncio.subprocess.PIPE)
    out, _ = await proc.communicate(job)
    rows = []
    for r in json.loads(out):
        stamps = ctx["recorder"].times.pop(r["id"], [])
        ttft = r["arrivals"][0] - r["t0"] if r["arrivals"] else None
        rows.append((ttft, [a - s for a, s in zip(r["arrivals"], stamps, strict=True)]))
    return rows


async def run_round(ctx: dict, path: str, streams: int, tokens: int, offset: int) -> list:
    prompts = [PROMPTS[(offset + i) % len(PROMPTS)] for i in range(streams)]
    if path == "gateway":
        return await gateway_round(ctx, prompts, tokens)
    return await asyncio.gather(*(direct_one(ctx, p, tokens) for p in prompts))


async def measure(ctx: dict, streams: int, tokens: int, rounds: int) -> dict:
    samples: dict[str, dict[str, list[float]]] = {
        p: {"ttft": [], "delay": []} for p in ("direct", "gateway")}
    for path in ("direct", "gateway"):  # warm-up: both paths find the prompts cached alike
        await run_round(ctx, path, streams, 1, 0)
    for r in range(rounds):
        order = ("direct", "gateway") if r % 2 == 0 else ("gateway", "direct")
        for path in order:
            t0 = time.perf_counter()
            for ttft, delays in await run_round(ctx, path, streams, tokens, 0):
                samples[path]["ttft"] += [ttft] if ttft is not None else []
                samples[path]["delay"] += delays
            print(f"  {streams} streams, round {r + 1}/{rounds}, {path}: "
                  f"{time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
    return summarise(samples)


def summarise(samples: dict) -> dict:
    out: dict[str, Any] = {}
    for metric in ("ttft", "delay"):
        for q in (50, 99):
            d = percentile(samples["direct"][metric], q) * 1000
            g = percentile(samples["gateway"][metric], q) * 1000
            out[f"{metric}_p{q}"] = {"direct_ms": d, "gateway_ms": g, "added_ms": g - d,
                                     "ratio": g / d if d > 0 else None}
        out[f"{metric}_samples"] = len(samples["gateway"][metric])
    return out


def print_table(results: dict) -> None:
    print(f"{'streams':>7} {'metric':<16}{'direct ms':>11}{'gateway ms':>12}{'added ms':>10}"
          f"{'ratio':>8}{'n':>7}")
    for streams, rows in results.items():
        for metric in ("ttft", "delay"):
            for q in (50, 99):
                r = rows[f"{metric}_p{q}"]
                ratio = f"{r['ratio']:.2f}" if r["ratio"] is not None else "-"
                name = "TTFT" if metric == "ttft" else "token delivery"
                print(f"{streams:>7} {name + f' p{q}':<16}{r['direct_ms']:>11.2f}"
                      f"{r['gateway_ms']:>12.2f}{r['added_ms']:>10.2f}{ratio:>8}"
                      f"{rows[f'{metric}_samples']:>7}")


async def bench(args: argparse.Namespace, ctx: dict) -> dict:
    results = {}
    for streams in args.streams:
        rounds = args.rounds if streams > 1 else args.rounds * args.single_factor
        results[streams] = await measure(ctx, streams, args.tokens, rounds)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", default="1,50",
                        type=lambda s: [int(x) for x in s.split(",")])
    parser.add_argument("--tokens", type=int, default=16, help="max_tokens per request")
    parser.add_argument("--rounds", type=int, default=2, help="measured rounds per path")
    parser.add_argument("--single-factor", type=int, default=4,
                        help="rounds multiplier at 1 stream (more samples for its p99)")
    parser.add_argument("--model", default=None, help="GGUF path (default: bundled SmolLM2)")
    parser.add_argument("--paced-ms", type=float, default=None,
                        help="no model: one token per stream every N ms (the HTTP path alone)")
    parser.add_argument("--switch-interval", type=float, default=None,
                        help="sys.setswitchinterval for this process (seconds; Python's is 0.005)")
    parser.add_argument("--client", choices=("raw", "httpx"), default="raw",
                        help="the gateway's client: a bare connection or httpx (module doc)")
    args = parser.parse_args()
    if args.switch_interval is not None:
        sys.setswitchinterval(args.switch_interval)
    with tempfile.TemporaryDirectory() as var_dir:
        paced = args.paced_ms / 1000 if args.paced_ms else None
        ctx = setup_embedded_django(var_dir, args.model, max(args.streams) + 14, paced)
        ctx["client"] = args.client
        from apps.gateway.engine_client import set_engine_client
        from tests.apps.gateway.live import LiveServer

        ctx["recorder"] = Recorder(ctx["engine"])
        set_engine_client(ctx["recorder"])
        server = LiveServer()
        ctx["url"] = server.start()
        try:
            results = asyncio.run(bench(args, ctx))
        finally:
            server.stop()
            ctx["engine"].stop()
    print_table(results)
    write_report(OUT, args, results)


if __name__ == "__main__":
    client_main() if sys.argv[1:2] == ["client"] else main()
