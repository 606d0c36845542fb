"""`/health` latency while huge prompts arrive (issue 16, "nothing heavy on the event loop").

    .venv/bin/python bench/health_under_prompts.py [--rounds 2]

One process serves Laser (uvicorn on a thread, the embedded layout on a fresh SQLite, the
bundled SmolLM2) for a tenant whose contract has no rate limits or budget, so every prompt gets
as far as the gateway lets it. A child process (its own GIL) polls `GET /health` every 20 ms
and, meanwhile, sends in turn: REST chat prompts just under the 1 MiB body limit, one
WebSocket chat prompt of 4 MB, and REST prompts of 100 KB (long enough to be refused only once
tokenised: over the context). Per phase it reports the /health latencies (p50, p99, max) and
each prompt's answer and time. Writes ``bench/out/health_under_prompts.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

OUT = ROOT / "bench" / "out" / "health_under_prompts.json"
MODEL = "smollm2-135m-instruct"
POLL_S = 0.02


def _content(size: int) -> str:
    words = "the quick brown fox jumps over the lazy dog 0123456789 "
    return (words * (size // len(words) + 1))[:size]


async def _poll(url: str, stop: asyncio.Event, samples: list[tuple[float, float]]) -> None:
    import httpx

    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        while not stop.is_set():
            t0 = time.perf_counter()
            await client.get("/health")
            samples.append((time.perf_counter(), time.perf_counter() - t0))
            await asyncio.sleep(POLL_S)


async def _rest(url: str, key: str, size: int) -> dict:
    import httpx

    body = json.dumps({"model": MODEL, "max_tokens": 8, "messages": [
        {"role": "user", "content": _content(size)}]}).encode()
    async with httpx.AsyncClient(base_url=url, timeout=120) as client:
        t0 = time.perf_counter()
        r = await client.post("/v1/chat/completions", content=body, headers={
            "Authorization": f"Bearer {key}", "Content-Type": "application/json"})
        code = r.json().get("error", {}).get("code") if r.status_code != 200 else None
        return {"bytes": len(body), "status": r.status_code, "code": code,
                "seconds": round(time.perf_counter() - t0, 3)}


async def _ws(url: str, key: str, size: int) -> dict:
    from websockets.asyncio.client import connect

    ws_url = "ws" + url[len("http"):] + "/ws/chat/"
    message = json.dumps({"type": "chat", "session_id": "s", "params": {"max_tokens": 8},
                          "content": _content(size)})
    async with connect(ws_url, subprotocols=["laser.v1", f"key.{key}"], origin=url,
                       max_size=None) as ws:
        await ws.recv()  # ready
        t0 = time.perf_counter()
        await ws.send(message)
        while True:
            reply = json.loads(await ws.recv())
            if reply["type"] in ("done", "error"):
                code = reply.get("error", {}).get("code") if reply["type"] == "error" else None
                return {"bytes": len(message), "status": reply["type"], "code": code,
                        "seconds": round(time.perf_counter() - t0, 3)}


def _stats(samples: list[float]) -> dict:
    ordered = sorted(samples)
    if not ordered:
        return {}

    def at(q: float) -> float:
        return round(1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2)

    return {"n": len(ordered), "p50_ms": at(0.5), "p99_ms": at(0.99),
            "max_ms": round(1000 * ordered[-1], 2)}


async def client_run(url: str, key: str, rounds: int) -> dict:
    phases = [("idle", None, 0)]
    for _ in range(rounds):
        phases += [("rest_1mb", _rest, 1024 * 1024 - 400), ("ws_4mb", _ws, 4 * 10**6),
                   ("rest_100kb", _rest, 100_000)]
    results: dict[str, dict] = {}
    for name, send, size in phases:
        samples: list[tuple[float, float]] = []
        stop = asyncio.Event()
        poller = asyncio.create_task(_poll(url, stop, samples))
        await asyncio.sleep(0.5)
        if send is None:
            await asyncio.sleep(2.5)
            answer = None
        else:
            answer = await send(url, key, size)
        await asyncio.sleep(0.3)
        stop.set()
        await poller
        entry = results.setdefault(name, {"health": [], "answers": []})
        entry["health"] += [latency for _, latency in samples]
        if answer is not None:
            entry["answers"].append(answer)
    return {name: {"health": _stats(e["health"]), "answers": e["answers"]}
            for name, e in results.items()}


def client_main() -> None:
    url, key, rounds = sys.argv[2], sys.argv[3], int(sys.argv[4])
    print(json.dumps(asyncio.run(client_run(url, key, rounds))))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as var_dir:
        from gateway_overhead import setup_embedded_django

        ctx = setup_embedded_django(var_dir, None, 8)
        from apps.gateway.engine_client import set_engine_client
        from apps.slo.services import contract_create
        from apps.tenants.services import api_key_create, tenant_create
        from tests.apps.gateway.live import LiveServer

        set_engine_client(ctx["engine"])
        tenant = tenant_create(name="Open", slug="open")
        contract_create(tenant=tenant, tier="hot", requests_per_min=10**6,
                        tokens_per_min=10**9, daily_token_budget=None)
        _, key = api_key_create(tenant=tenant, default_tier="hot")
        server = LiveServer()
        url = server.start()
        try:
            out = subprocess.run([sys.executable, __file__, "client", url, key,
                                  str(args.rounds)], capture_output=True, text=True, check=True)
        finally:
            server.stop()
            ctx["engine"].stop()
    results = json.loads(out.stdout.strip().splitlines()[-1])
    for name, entry in results.items():
        print(f"{name:11} /health {entry['health']}  answers {entry['answers']}")
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                               "args": vars(args), "results": results}, indent=2))


if __name__ == "__main__":
    client_main() if sys.argv[1:2] == ["client"] else main()
