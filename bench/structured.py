"""Structured outputs: what a JSON schema costs, side by side in one run.

    .venv/bin/python bench/structured.py [--streams 16] [--requests 2] [--tokens 96]
        [--mask-streams 1,16,64] [--no-peer] [--peer PATH]

1. Compile: llguidance's tokenizer built from the bundled SmolLM2's vocabulary (once), then
   ``--schemas`` distinct schemas compiled cold and again from the cache.
2. The mask's share of a step, in-process (``LLMEngine.step`` with every row constrained) at
   each of ``--mask-streams``: the step time, the time the engine thread waits for and unpacks
   the bitmask (on the critical path), the time the head spends applying it, and the fill on
   the worker thread (overlapped with the layers).
3. Throughput over HTTP, the servers one after the other: Laser (``make run``'s server) with
   ``--streams`` streams of free text, then the same streams with ``response_format``
   json_schema; llama.cpp's ``llama-server`` on the same GGUF with the same schema (its own
   JSON-schema-to-grammar) the same way. Each server runs free, schema, schema, free (drift
   hits both alike; the ratios use the means) after one constrained warm-up request (the
   schema's compile is part 1's). Each stream sends ``--requests`` requests back to back,
   greedy, at most ``--tokens`` tokens; tok/s = completion tokens / wall time of the load.

Prints tables; writes ``bench/out/structured.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from e2e_streams import laser_server  # noqa: E402
from gateway_overhead import write_report  # noqa: E402
from peers import (  # noqa: E402
    CORES,
    MODEL,
    free_port,
    peer_binary,
    peer_command,
    peer_server,
    warm_up,
)

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "out" / "structured.json"
SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 24},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "city": {"type": "string", "maxLength": 24},
        "colour": {"enum": ["red", "green", "blue", "yellow"]},
        "hobbies": {"type": "array", "items": {"type": "string", "maxLength": 16},
                    "maxItems": 3},
        "bio": {"type": "string", "maxLength": 120},
    },
    "required": ["name", "age", "city", "colour", "hobbies", "bio"],
    "additionalProperties": False,
}
FORMAT = {"type": "json_schema", "json_schema": {"name": "person", "strict": True,
                                                 "schema": SCHEMA}}
PROMPTS = ["Describe a person who lives in Paris.", "Describe a retired sailor.",
           "Describe a young painter.", "Describe a chess champion."]


# ---- 1. compile --------------------------------------------------------------------------


def compile_times(engine, count: int) -> dict:
    from inference.engine.grammar import GrammarCompiler
    from inference.request import Constraint

    loaded = engine.loaded
    compiler = GrammarCompiler(loaded.tokenizer, loaded.config.vocab_size,
                               engine.grammar.compiler.eos_ids)
    t0 = time.perf_counter()
    compiler.tokenizer  # noqa: B018 (built on first use)
    tokenizer_s = time.perf_counter() - t0
    schemas = [Constraint("json_schema", json.dumps(
        {**SCHEMA, "properties": {**SCHEMA["properties"],
                                  "age": {"type": "integer", "minimum": i, "maximum": 120}}}),
        strict=True) for i in range(count)]
    cold, cached = [], []
    for constraint in schemas:
        t0 = time.perf_counter()
        compiler.compile(constraint)
        cold.append(time.perf_counter() - t0)
    for constraint in schemas:
        t0 = time.perf_counter()
        compiler.matcher(constraint)  # what a request gets: a copy of the cached grammar
        cached.append(time.perf_counter() - t0)
    return {"tokenizer_s": tokenizer_s, "cold_ms": _ms_stats(cold),
            "cached_ms": _ms_stats(cached), "schemas": count}


def _ms_stats(values: list[float]) -> dict:
    values = sorted(values)
    return {"median": 1e3 * values[len(values) // 2], "max": 1e3 * values[-1]}


# ---- 2. the mask's share -----------------------------------------------------------------


def mask_share(engine, streams: int, steps: int) -> dict:
    """Every row constrained; the engine thread's mask time against its step time."""
    import kernels.backends as backends
    from inference.engine import grammar
    from inference.request import Constraint, EngineRequest, SamplingParams

    spent = {"wait": 0.0, "apply": 0.0, "fill": 0.0}
    begin, forbid, fill = grammar.GrammarMasks.begin, backends._forbid, grammar.GrammarMasks._fill

    def timed_begin(self, seq_ids):
        pending = begin(self, seq_ids)
        if pending is None:
            return None

        def wait():
            t0 = time.perf_counter()
            out = pending()
            spent["wait"] += time.perf_counter() - t0
            return out
        return wait

    def timed_forbid(logits, allowed):
        t0 = time.perf_counter()
        out = forbid(logits, allowed)
        if allowed is not None:
            spent["apply"] += time.perf_counter() - t0
        return out

    def timed_fill(self, rows, n):
        t0 = time.perf_counter()
        out = fill(self, rows, n)
        spent["fill"] += time.perf_counter() - t0
        return out

    grammar.GrammarMasks.begin, backends._forbid = timed_begin, timed_forbid
    grammar.GrammarMasks._fill = timed_fill
    constraint = Constraint("json_schema", json.dumps(SCHEMA), strict=True)
    try:
        for i in range(streams):
            r = EngineRequest(f"m{streams}-{i}", SamplingParams(max_tokens=400, temperature=1.0,
                                                                seed=i),
                              messages=[{"role": "user", "content": PROMPTS[i % 4]}],
                              constraint=constraint, tier="warm")
            engine.add_request(r, engine.encode(r))
        while engine.num_requests and not _all_decoding(engine):
            engine.step()  # prefill first: the share is of decode steps
        spent.update(wait=0.0, apply=0.0, fill=0.0)
        t0, done = time.perf_counter(), 0
        for _ in range(steps):
            engine.step()
            done += 1
        step_s = (time.perf_counter() - t0) / done
    finally:
        grammar.GrammarMasks.begin, backends._forbid = begin, forbid
        grammar.GrammarMasks._fill = fill
        engine.abort_all()
    return {"streams": streams, "step_ms": 1e3 * step_s,
            "mask_ms": 1e3 * (spent["wait"] + spent["apply"]) / done,
            "share": (spent["wait"] + spent["apply"]) / done / step_s,
            "fill_ms_overlapped": 1e3 * spent["fill"] / done}


def _all_decoding(engine) -> bool:
    return all(c.seq.num_output_tokens > 0 for state in engine._requests.values()
               for c in state.choices)


# ---- 3. throughput over HTTP -------------------------------------------------------------


async def _one(client, prompt: str, tokens: int, schema: bool) -> tuple[int, bool]:
    extra = {"response_format": FORMAT} if schema else {}
    stream = await client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": prompt}], max_tokens=tokens,
        temperature=0, stream=True, stream_options={"include_usage": True}, **extra)
    text, usage = "", None
    async for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            text += chunk.choices[0].delta.content
        if chunk.usage is not None:
            usage = chunk.usage
    valid = True
    if schema:
        try:
            import jsonschema

            jsonschema.validate(json.loads(text), SCHEMA)
        except Exception:
            valid = False
    return (usage.completion_tokens if usage else 0), valid


async def _load(url: str, key: str, streams: int, requests: int, tokens: int,
                schema: bool) -> dict:
    import openai

    client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=600)

    async def stream(i: int) -> list[tuple[int, bool]]:
        return [await _one(client, PROMPTS[(i + j) % len(PROMPTS)], tokens, schema)
                for j in range(requests)]

    t0 = time.perf_counter()
    async with client:
        results = [r for rs in await asyncio.gather(*(stream(i) for i in range(streams)))
                   for r in rs]
    wall = time.perf_counter() - t0
    tokens_out = sum(n for n, _ in results)
    return {"streams": streams, "requests": len(results), "tokens": tokens_out,
            "wall_s": wall, "tok_s": tokens_out / wall,
            "valid": sum(v for _, v in results) if schema else None}


ORDER = (False, True, True, False)  # free, schema, schema, free: drift hits both alike


def _server_rows(name: str, url: str, key: str, args: argparse.Namespace,
                 **extra: str) -> list[dict]:
    warm_up(url, key)
    asyncio.run(_load(url, key, 1, 1, 8, True))  # the schema compiled (cold: see above)
    rows = []
    for schema in ORDER:
        row = asyncio.run(_load(url, key, args.streams, args.requests, args.tokens, schema))
        rows.append({"server": name, "schema": schema, **extra, **row})
        print(_row(rows[-1]), flush=True)
    return rows


def throughput(args: argparse.Namespace) -> list[dict]:
    with laser_server({"LASER_THREADS": str(CORES)}) as (url, key):
        rows = _server_rows("laser", url, key, args)
    if args.no_peer:
        return rows
    cmd = peer_command(peer_binary(args.peer), args.streams, args.tokens, free_port(), CORES)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    with peer_server(cmd, OUT.parent / "structured-peer.log") as url:
        rows += _server_rows("llama.cpp", url, "peer", args, command=" ".join(cmd))
    return rows


def _mean_tok_s(rows: list[dict], server: str, schema: bool) -> float | None:
    values = [r["tok_s"] for r in rows if r["server"] == server and r["schema"] is schema]
    return sum(values) / len(values) if values else None


def _row(r: dict) -> str:
    valid = "" if r["valid"] is None else f"{r['valid']}/{r['requests']}"
    return (f"{r['server']:10} {'json_schema' if r['schema'] else 'free':12} "
            f"{r['streams']:>7} {r['tokens']:>7} {r['wall_s']:>7.1f} {r['tok_s']:>7.1f} "
            f"{valid:>6}")


def main() -> None:
    ap = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    ap.add_argument("--streams", type=int, default=16)
    ap.add_argument("--requests", type=int, default=2, help="requests per stream")
    ap.add_argument("--tokens", type=int, default=96, help="max_tokens of each request")
    ap.add_argument("--schemas", type=int, default=20, help="schemas compiled cold")
    ap.add_argument("--mask-streams", default="1,16,64")
    ap.add_argument("--mask-steps", type=int, default=20)
    ap.add_argument("--no-peer", action="store_true")
    ap.add_argument("--peer", default=None, help="llama-server binary")
    args = ap.parse_args()
    from inference.engine import EngineConfig, LLMEngine

    engine = LLMEngine(EngineConfig(max_num_seqs=64))
    results: dict = {"load_average_start": os.getloadavg()[0]}
    results["compile"] = compile_times(engine, args.schemas)
    c = results["compile"]
    print(f"tokenizer from the vocabulary: {c['tokenizer_s']:.2f} s; compile cold "
          f"{c['cold_ms']['median']:.2f} ms (max {c['cold_ms']['max']:.2f}), cached "
          f"{c['cached_ms']['median']:.3f} ms (max {c['cached_ms']['max']:.3f})")
    results["mask"] = [mask_share(engine, int(n), args.mask_steps)
                       for n in args.mask_streams.split(",")]
    print("streams  step ms  mask ms  share  fill ms (overlapped)")
    for m in results["mask"]:
        print(f"{m['streams']:>7} {m['step_ms']:>8.1f} {m['mask_ms']:>8.2f} "
              f"{100 * m['share']:>5.1f}% {m['fill_ms_overlapped']:>8.2f}")
    del engine
    print("server     output       streams  tokens  wall s   tok/s  valid")
    results["throughput"] = rows = throughput(args)
    laser, free = _mean_tok_s(rows, "laser", True), _mean_tok_s(rows, "laser", False)
    peer = _mean_tok_s(rows, "llama.cpp", True)
    assert laser is not None and free is not None
    ratios = {"laser_schema_over_free": laser / free}
    if peer is not None:
        ratios["laser_schema_over_llama_schema"] = laser / peer
    results["ratios"] = ratios
    results["load_average_end"] = os.getloadavg()[0]
    print(" ".join(f"{k} {v:.2f}x" for k, v in ratios.items()))
    print(f"load average {results['load_average_start']:.1f} -> "
          f"{results['load_average_end']:.1f} (a shared host: other processes ran)")
    write_report(OUT, args, results)


if __name__ == "__main__":
    main()
