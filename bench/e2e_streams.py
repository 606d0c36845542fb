"""End to end through the real server with the openai SDK: aggregate tokens/s of 16 concurrent
streams of up to 128 tokens, and of 1 stream (issue 6; target >= 335 tok/s across 16).

    .venv/bin/python bench/e2e_streams.py [--streams 16] [--tokens 128] [--rounds 2] [--remote]

What ``make run`` serves, in a fresh ``LASER_VAR_DIR`` (SQLite, embedded engine, bundled
SmolLM2 unless ``LASER_MODEL`` is set): ``manage.py migrate``, ``bootstrap_demo``, then
``manage.py serve --port 0``. One warm-up request, then ``--rounds`` rounds of 1 stream and of
``--streams`` concurrent streams (``stream_options.include_usage``; greedy; prompts that make
long answers, ``max_tokens`` ends them). Tokens are the content chunks each client actually
received (checked against the usage chunk). Aggregate tok/s = tokens of a round / its wall time
(first request sent -> last chunk received). Writes ``bench/out/e2e_streams.json``.

``--remote``: the production layout instead, the web process in ``LASER_ENGINE_MODE=remote``
and one ``manage.py run_engine`` worker process beside it, over Redis (``REDIS_URL``, default
``redis://127.0.0.1:6379/0``); the worker's torch threads are ``--worker-threads`` (every core).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from gateway_overhead import PROMPTS, percentile, write_report  # noqa: E402

OUT = ROOT / "bench" / "out" / "e2e_streams.json"
TARGET_TPS = 335.0  # issue 6's target; bench/peers.py runs llama.cpp beside Laser


def manage(env: dict, *args: str) -> str:
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, check=True,
                          capture_output=True, text=True).stdout


def spawn(cmd: list[str], env: dict, log: Path, ready: str) -> tuple[subprocess.Popen, str]:
    """Run ``cmd`` with its output in ``log`` (a pipe nobody reads would fill up and stall it);
    returns the process and the match of the ``ready`` pattern once its log shows it."""
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    while proc.poll() is None:
        if match := re.search(ready, log.read_text(errors="replace")):
            return proc, match.group(0)
        time.sleep(0.2)
    raise RuntimeError(f"{cmd[0]} exited with {proc.returncode}:\n{log.read_text()}")


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM, then SIGKILL if it has not exited within a minute."""
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def start(env: dict, log: Path, args: list[str], ready: str) -> tuple[subprocess.Popen, str]:
    """``manage.py *args`` through ``spawn``."""
    return spawn([sys.executable, "manage.py", *args], env, log, ready)


@contextmanager
def laser_server(extra_env: dict | None = None, remote: bool = False,
                 worker_threads: int | None = None,
                 setup: Callable[[dict], None] | None = None,
                 port: int = 0) -> Iterator[tuple[str, str]]:
    """What ``make run`` serves, in a throwaway ``LASER_VAR_DIR`` (SQLite, embedded engine unless
    ``remote``): migrate, ``bootstrap_demo``, ``serve --port 0``; yields (url, demo API key) and
    stops it (and the ``remote`` worker) on exit. ``extra_env`` overrides settings; ``setup(env)``
    runs after ``bootstrap_demo``, before the server starts (e.g. ``manage(env, ...)``)."""
    with tempfile.TemporaryDirectory() as var_dir:
        env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
        env.update(LASER_VAR_DIR=var_dir, PYTHONUNBUFFERED="1", **(extra_env or {}))
        procs = []
        if remote:
            env.update(LASER_ENGINE_MODE="remote",
                       REDIS_URL=os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"))
        manage(env, "migrate", "--noinput")
        manage(env, "bootstrap_demo")
        key = (Path(var_dir) / "demo_api_key").read_text().strip()
        if setup is not None:
            setup(env)
        try:
            if remote:
                threads = worker_threads or len(os.sched_getaffinity(0))
                procs.append(start({**env, "LASER_THREADS": str(threads)},
                                   Path(var_dir) / "worker.log", ["run_engine"], "ready on")[0])
            proc, url = start(env, Path(var_dir) / "server.log",
                              ["serve", "--port", str(port), "--log-level", "warning"],
                              r"(?<=serving on )http://\S+")
            procs.append(proc)
            yield url, key
        finally:
            for proc in reversed(procs):
                stop(proc)


async def one_stream(client, prompt: str, tokens: int) -> dict:
    t0, first, chunks, usage = time.perf_counter(), None, 0, None
    stream = await client.chat.completions.create(
        model="smollm2-135m-instruct", messages=[{"role": "user", "content": prompt}],
        max_tokens=tokens, temperature=0, stream=True, stream_options={"include_usage": True})
    async for chunk in stream:
        if chunk.choices:
            chunks += 1
            first = first if first is not None else time.perf_counter()
        elif chunk.usage is not None:
            usage = chunk.usage.completion_tokens
    end = time.perf_counter()
    return {"start": t0, "end": end, "tokens": chunks, "usage_tokens": usage,
            "ttft_s": None if first is None else first - t0}


async def run_round(client, streams: int, tokens: int, offset: int) -> dict:
    prompts = [PROMPTS[(offset + i) % len(PROMPTS)] for i in range(streams)]
    results = await asyncio.gather(*(one_stream(client, p, tokens) for p in prompts))
    wall = max(r["end"] for r in results) - min(r["start"] for r in results)
    total = sum(r["tokens"] for r in results)
    return {"streams": streams, "tokens": total, "wall_s": wall, "tok_s": total / wall,
            "usage_matches": all(r["tokens"] == r["usage_tokens"] for r in results),
            "ttfts": [r["ttft_s"] for r in results if r["ttft_s"] is not None]}


async def bench(url: str, key: str, args: argparse.Namespace) -> dict:
    import openai

    client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=900)
    await one_stream(client, PROMPTS[0], 8)  # warm-up
    rows: dict[int, list[dict]] = {1: [], args.streams: []}
    for r in range(args.rounds):
        for streams in (1, args.streams):
            rows[streams].append(row := await run_round(client, streams, args.tokens, r))
            print(f"  round {r + 1}/{args.rounds}, {streams} streams: {row['tokens']} tokens in "
                  f"{row['wall_s']:.1f} s", file=sys.stderr, flush=True)
    await client.close()
    return {n: summarise(rounds) for n, rounds in rows.items()}


def summarise(rounds: list[dict]) -> dict:
    tokens, wall = sum(r["tokens"] for r in rounds), sum(r["wall_s"] for r in rounds)
    ttfts = [t for r in rounds for t in r["ttfts"]]
    return {"rounds": len(rounds), "tokens": tokens, "wall_s": wall, "tok_s": tokens / wall,
            "tok_s_per_round": [r["tok_s"] for r in rounds],
            "tokens_per_stream": tokens / sum(r["streams"] for r in rounds),
            "usage_matches": all(r["usage_matches"] for r in rounds),
            "ttft_p50_s": percentile(ttfts, 50), "ttft_p99_s": percentile(ttfts, 99)}


def print_table(results: dict, streams: int) -> None:
    print(f"{'streams':>7}{'tokens':>8}{'tok/stream':>11}{'wall s':>9}{'tok/s':>9}"
          f"{'TTFT p50 ms':>13}{'TTFT p99 ms':>13}")
    for n, r in results.items():
        print(f"{n:>7}{r['tokens']:>8}{r['tokens_per_stream']:>11.1f}{r['wall_s']:>9.2f}"
              f"{r['tok_s']:>9.1f}{r['ttft_p50_s'] * 1000:>13.0f}{r['ttft_p99_s'] * 1000:>13.0f}")
    many = results[streams]["tok_s"]
    print(f"{streams} streams / 1 stream: {many / results[1]['tok_s']:.2f}x;  "
          f"vs target {TARGET_TPS:.0f} tok/s: {many / TARGET_TPS:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=128, help="max_tokens per stream")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--remote", action="store_true",
                        help="web process + one run_engine worker over Redis")
    parser.add_argument("--worker-threads", type=int, default=None,
                        help="torch threads of the --remote worker (default: every core)")
    args = parser.parse_args()
    with laser_server(remote=args.remote, worker_threads=args.worker_threads) as (url, key):
        results = asyncio.run(bench(url, key, args))
    print_table(results, args.streams)
    write_report(OUT, args, results)


if __name__ == "__main__":
    main()
