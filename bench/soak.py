"""Soak: mixed hot/warm/cold traffic through the gateway for a long while; nothing may grow.

    .venv/bin/python bench/soak.py [--minutes 30] [--sample-s 60] [--warmup-s 300] [--hot 2]
        [--batch-lines 8]

What ``make run`` serves (``manage.py serve``: one process with the engine, the gateway and the
Celery worker thread; bundled SmolLM2), on a fresh database created on ``DATABASE_URL``'s
PostgreSQL server (dropped at the end) and ``REDIS_URL`` (give it a Redis database of its own:
its keys are counted), in a fresh ``LASER_VAR_DIR``. Traffic, all with the openai SDK and the
demo key: ``--hot`` clients streaming chats (``service_tier="priority"``), one in ten hanging up
after three chunks; one warm client (non-streamed, ``service_tier="warm"``); a cold client that
uploads a ``--batch-lines`` JSONL file and runs it as a batch, one after the other.

Every ``--sample-s`` seconds: the server's RSS, the fraction of KV blocks in use and the
requests running (``/metrics``), Redis keys (all, and those without a TTL), open PostgreSQL
connections to the database, and the rows of every table per request served so far. After the
traffic stops and the last batch ends: one more sample of the idle server (KV and running back to
0). Each series, from the samples after ``--warmup-s`` on (windows with a TTL, such as the rate
limiter's Redis keys, fill up to a plateau first), gets a least-squares slope; it *grew* when the
slope is at least 3 standard errors above 0 and its growth over the run exceeds ``--tolerance``
(10 %) of its mean (and one unit); RSS when it grew more than ``--rss-mb`` (64 MB). Prints a
table and the verdicts; writes ``bench/out/soak.json`` and ``bench/out/soak.png``.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import math
import os
import re
import secrets
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from e2e_streams import laser_server  # noqa: E402
from gateway_overhead import PROMPTS  # noqa: E402

OUT = ROOT / "bench" / "out"
MODEL = "smollm2-135m-instruct"
SERIES = {  # key: (label, slope-tested)
    "rss_mb": ("RSS MB", True),
    "anon_mb": ("anon MB", True),
    "threads": ("threads", True),
    "kv_usage": ("KV in use", True),
    "running": ("running", False),
    "redis_keys": ("Redis keys", True),
    "redis_no_ttl": ("no TTL", True),
    "db_connections": ("DB conns", True),
    "rows_per_request": ("rows/req", True),
    "requests": ("requests", False),
}


class Counters:
    def __init__(self) -> None:
        self.requests = self.errors = self.hung_up = self.batches = self.batch_lines = 0
        self.failures: list[str] = []

    def fail(self, what: str, exc: BaseException) -> None:
        self.errors += 1
        if len(self.failures) < 20:
            self.failures.append(f"{what}: {type(exc).__name__}: {exc}"[:300])


async def hot_client(client: Any, n: int, stop: asyncio.Event, counts: Counters,
                     tokens: int) -> None:
    i = n
    while not stop.is_set():
        i += 1
        hang_up = i % 10 == 0
        try:
            stream = await client.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": PROMPTS[i % len(PROMPTS)]}],
                max_tokens=tokens, stream=True, service_tier="priority")
            chunks = 0
            async for _ in stream:
                chunks += 1
                if hang_up and chunks == 3:
                    await stream.close()
                    counts.hung_up += 1
                    break
            counts.requests += 1
        except Exception as exc:  # counted and reported, the soak goes on
            counts.fail("hot", exc)
            await asyncio.sleep(1)
        await asyncio.sleep(0.5)


async def warm_client(client: Any, stop: asyncio.Event, counts: Counters, tokens: int) -> None:
    i = 0
    while not stop.is_set():
        i += 1
        try:
            await client.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": PROMPTS[-i % len(PROMPTS)]}],
                max_tokens=tokens, service_tier="warm")
            counts.requests += 1
        except Exception as exc:
            counts.fail("warm", exc)
            await asyncio.sleep(1)
        await asyncio.sleep(1.0)


def _batch_file(lines: int, tokens: int, round_: int) -> bytes:
    rows = [{"custom_id": f"r{round_}-{j}", "method": "POST", "url": "/v1/chat/completions",
             "body": {"model": MODEL, "max_tokens": tokens, "messages": [
                 {"role": "user", "content": PROMPTS[(round_ + j) % len(PROMPTS)]}]}}
            for j in range(lines)]
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


async def cold_client(client: Any, stop: asyncio.Event, counts: Counters, lines: int,
                      tokens: int) -> None:
    round_ = 0
    while not stop.is_set():
        round_ += 1
        try:
            upload = await client.files.create(
                file=("soak.jsonl", io.BytesIO(_batch_file(lines, tokens, round_))),
                purpose="batch")
            batch = await client.batches.create(input_file_id=upload.id,
                                                endpoint="/v1/chat/completions",
                                                completion_window="24h")
            while batch.status not in ("completed", "failed", "expired", "cancelled"):
                await asyncio.sleep(2)
                batch = await client.batches.retrieve(batch.id)
            if batch.status != "completed":
                raise RuntimeError(f"batch {batch.id} ended {batch.status}")
            counts.batches += 1
            counts.batch_lines += batch.request_counts.completed
            counts.requests += batch.request_counts.completed + 2  # + the upload and create
        except Exception as exc:
            counts.fail("cold", exc)
            await asyncio.sleep(2)


@contextmanager
def fresh_database(url: str) -> Iterator[str]:
    """A new database on ``url``'s server for the run (rows and connections are its own)."""
    import psycopg

    name = f"laser_soak_{secrets.token_hex(4)}"
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield urlunsplit(urlsplit(url)._replace(path=f"/{name}"))
    finally:
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                          "WHERE datname = %s", (name,))
            admin.execute(f'DROP DATABASE IF EXISTS "{name}"')


# --- sampling -------------------------------------------------------------------------------


def server_process() -> int:
    """The pid of our child running ``manage.py serve`` (Linux ``/proc``)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            cmd = (stat.parent / "cmdline").read_bytes().split(b"\0")
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
        if ppid == os.getpid() and b"manage.py" in cmd and b"serve" in cmd:
            return int(stat.parent.name)
    raise RuntimeError("the server process was not found")


def _status(pid: int, field: str) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(rf"^{field}:\s+(\d+)", status, re.M).group(1))


def rss_mb(pid: int) -> float:
    return _status(pid, "VmRSS") / 1024


def memory(pid: int) -> dict[str, float]:
    """RSS, its anonymous part (the heap: not the weights' file pages) and the threads."""
    return {"rss_mb": rss_mb(pid), "anon_mb": _status(pid, "RssAnon") / 1024,
            "threads": _status(pid, "Threads")}


def _metrics(url: str, token: str) -> dict[str, float]:
    import httpx

    text = httpx.get(f"{url}/metrics", headers={"Authorization": f"Bearer {token}"},
                     timeout=30).text
    kv = re.search(r"^laser_kv_usage_ratio ([0-9.eE+-]+)$", text, re.M)
    running = re.findall(r"^laser_engine_running\{[^}]*\} ([0-9.eE+-]+)$", text, re.M)
    return {"kv_usage": float(kv.group(1)) if kv else math.nan,
            "running": sum(float(x) for x in running)}


def _redis(redis_url: str) -> dict[str, int]:
    import redis

    client = redis.Redis.from_url(redis_url)
    keys = no_ttl = 0
    for key in client.scan_iter(count=1000):
        keys += 1
        no_ttl += client.ttl(key) == -1
    return {"redis_keys": keys, "redis_no_ttl": no_ttl}


def _postgres(database_url: str) -> dict[str, int]:
    import psycopg

    with psycopg.connect(database_url, autocommit=True) as conn:
        connections = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid()").fetchone()[0]
        tables = [r[0] for r in conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public'")]
        rows = sum(conn.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0] for t in tables)
    return {"db_connections": connections, "rows": rows}


def sample(ctx: dict, counts: Counters, t0: float) -> dict[str, Any]:
    row: dict[str, Any] = {"t_s": round(time.monotonic() - t0, 1), "requests": counts.requests,
                           "errors": counts.errors, "batches": counts.batches}
    row.update(memory(ctx["pid"]))
    row.update(_metrics(ctx["url"], ctx["token"]))
    row.update(_redis(ctx["redis_url"]))
    row.update(_postgres(ctx["database_url"]))
    row["rows_per_request"] = (row["rows"] - ctx["rows0"]) / max(1, counts.requests)
    return row


async def sampler(ctx: dict, counts: Counters, stop: asyncio.Event, every: float,
                  rows: list[dict], t0: float) -> None:
    while not stop.is_set():
        try:
            await asyncio.wait_for(stop.wait(), every)
        except TimeoutError:
            pass
        row = await asyncio.to_thread(sample, ctx, counts, t0)
        rows.append(row)
        print_row(row, first=len(rows) == 1)


# --- verdicts -------------------------------------------------------------------------------


def slope_test(ts: list[float], ys: list[float], tolerance: float,
               absolute: float | None = None) -> dict[str, Any]:
    """Least-squares slope of ``ys`` over ``ts``, its standard error, and whether it grew: a
    slope 3 standard errors above 0 whose growth over the run passes ``absolute`` when given,
    else ``tolerance`` times the mean (and one unit of a count)."""
    points = [(t, y) for t, y in zip(ts, ys, strict=True) if not math.isnan(y)]
    n = len(points)
    if n < 3:
        return {"n": n, "grew": None}
    mt, my = sum(t for t, _ in points) / n, sum(y for _, y in points) / n
    sxx = sum((t - mt) ** 2 for t, _ in points)
    slope = sum((t - mt) * (y - my) for t, y in points) / sxx
    residual = sum((y - my - slope * (t - mt)) ** 2 for t, y in points)
    se = math.sqrt(residual / (n - 2) / sxx) if n > 2 else math.inf
    growth = slope * (points[-1][0] - points[0][0])
    significant = slope > 0 and (se == 0 or slope / se >= 3.0)
    bound = absolute if absolute is not None else max(1e-9, tolerance * abs(my), _unit(my))
    grew = significant and growth > bound
    return {"n": n, "slope_per_min": slope * 60, "se_per_min": se * 60, "growth": growth,
            "mean": my, "grew": bool(grew)}


def _unit(mean: float) -> float:
    """Growth below one unit of a count (keys, connections) is not growth."""
    return 1.0 if mean >= 1 else 0.0


def print_row(row: dict, first: bool) -> None:
    if first:
        print(f"{'t s':>7}" + "".join(f"{label:>11}" for label, _ in SERIES.values()))
    cells = "".join(f"{row[k]:>11.3f}" if isinstance(row[k], float) else f"{row[k]:>11}"
                    for k in SERIES)
    print(f"{row['t_s']:>7.0f}{cells}", flush=True)


def plot(rows: list[dict], idle: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = [k for k, (_, tested) in SERIES.items() if tested]
    fig, axes = plt.subplots(len(keys), 1, figsize=(8, 2.0 * len(keys)), sharex=True)
    minutes = [r["t_s"] / 60 for r in rows]
    for ax, key in zip(axes, keys, strict=True):
        ax.plot(minutes, [r[key] for r in rows], marker="o", ms=3)
        ax.plot([idle["t_s"] / 60], [idle[key]], marker="s", color="tab:green", ls="none",
                label="idle after")
        ax.set_ylabel(SERIES[key][0])
        ax.grid(alpha=0.3)
    axes[0].legend(loc="upper left", fontsize=8)
    axes[-1].set_xlabel("minutes")
    fig.suptitle("bench/soak.py: mixed hot/warm/cold through the gateway")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


async def soak(url: str, key: str, ctx: dict, args: argparse.Namespace) -> dict:
    import openai

    client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=300)
    counts, stop, rows = Counters(), asyncio.Event(), []
    t0 = time.monotonic()
    traffic = [asyncio.create_task(hot_client(client, n, stop, counts, args.tokens))
               for n in range(args.hot)]
    traffic.append(asyncio.create_task(warm_client(client, stop, counts, args.tokens)))
    traffic.append(asyncio.create_task(cold_client(client, stop, counts, args.batch_lines,
                                                   args.tokens)))
    watcher = asyncio.create_task(sampler(ctx, counts, stop, args.sample_s, rows, t0))
    await asyncio.sleep(args.minutes * 60)
    stop.set()
    await watcher
    await asyncio.wait_for(asyncio.gather(*traffic), 600)  # the last batch runs to its end
    await asyncio.sleep(3)
    idle = await asyncio.to_thread(sample, ctx, counts, t0)
    print("idle after the traffic stopped:")
    print_row(idle, first=False)
    await client.close()
    return {"rows": rows, "idle": idle, "counts": vars(counts)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--sample-s", type=float, default=60.0)
    parser.add_argument("--hot", type=int, default=2, help="concurrent hot chat clients")
    parser.add_argument("--tokens", type=int, default=32, help="max_tokens per request")
    parser.add_argument("--batch-lines", type=int, default=8)
    parser.add_argument("--warmup-s", type=float, default=300.0,
                        help="samples before this are shown and plotted, not slope-tested")
    parser.add_argument("--tolerance", type=float, default=0.10)
    parser.add_argument("--rss-mb", type=float, default=64.0,
                        help="RSS growth over the run that counts (the weights dwarf 10 %%)")
    parser.add_argument("--out", type=Path, default=OUT / "soak.json")
    args = parser.parse_args()
    database_url, redis_url = os.environ.get("DATABASE_URL", ""), os.environ.get("REDIS_URL", "")
    if not database_url.startswith("postgres") or not redis_url.startswith("redis"):
        sys.exit("set DATABASE_URL=postgres://... and REDIS_URL=redis://... (the soak measures "
                 "both)")
    token = secrets.token_urlsafe(16)
    with fresh_database(database_url) as soak_db:
        env = {"DATABASE_URL": soak_db, "REDIS_URL": redis_url, "LASER_METRICS_TOKEN": token}
        with laser_server(extra_env=env) as (url, key):
            ctx = {"url": url, "token": token, "redis_url": redis_url, "database_url": soak_db,
                   "pid": server_process()}
            ctx["rows0"] = _postgres(soak_db)["rows"]
            result = asyncio.run(soak(url, key, ctx, args))
    rows = [r for r in result["rows"][1:] if r["t_s"] >= args.warmup_s]
    ts = [r["t_s"] for r in rows]
    verdicts = {k: slope_test(ts, [float(r[k]) for r in rows], args.tolerance,
                              args.rss_mb if k == "rss_mb" else None)
                for k, (_, tested) in SERIES.items() if tested}
    idle = result["idle"]
    verdicts["idle_kv_zero"] = {"grew": idle["kv_usage"] > 0 or idle["running"] > 0}
    print(f"\n{'series':<18}{'slope/min':>12}{'± se':>10}{'mean':>11}  verdict")
    for k, v in verdicts.items():
        if "slope_per_min" in v:
            print(f"{k:<18}{v['slope_per_min']:>12.4f}{v['se_per_min']:>10.4f}{v['mean']:>11.3f}"
                  f"  {'GREW' if v['grew'] else 'flat'}")
    print(f"idle after: KV {idle['kv_usage']:.3f}, running {idle['running']:.0f} -> "
          f"{'NOT released' if verdicts['idle_kv_zero']['grew'] else 'released'}")
    counts = result["counts"]
    print(f"requests {counts['requests']} (hot hang-ups {counts['hung_up']}, batches "
          f"{counts['batches']} of {args.batch_lines} lines), client errors {counts['errors']}")
    for failure in counts["failures"]:
        print("  ", failure)
    grew = [k for k, v in verdicts.items() if v.get("grew")]
    print("GREW: " + ", ".join(grew) if grew else "nothing grew")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    report = {"args": {k: str(v) for k, v in vars(args).items()}, **result,
              "verdicts": verdicts, "grew": grew}
    args.out.write_text(json.dumps(report, indent=1))
    plot(result["rows"], idle, args.out.with_suffix(".png"))
    print(f"wrote {args.out} and {args.out.with_suffix('.png')}")


if __name__ == "__main__":
    main()
