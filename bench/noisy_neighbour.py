"""Noisy neighbour on the real engine (issue 23): two tenants on the same hot contract through the
gateway, A sending 5x its contracted request rate, B at its rate; B alone for comparison.

    .venv/bin/python bench/noisy_neighbour.py [--rpm 30] [--factor 5] [--duration 60]
        [--tokens 64] [--burst 6]

One Laser server, what ``make run`` serves (``e2e_streams.laser_server``: a throwaway SQLite var
dir, the embedded engine, the bundled SmolLM2), set up before it starts through ``manage.py shell
-c`` with the services: the default plan's ``burst_factor`` raised to ``--burst`` (so A's 5x is
admitted as excess rather than refused with 429), and three tenants, each with one hot key and the
plan's default hot contract but for ``requests_per_min``: ``a`` and ``b`` at ``--rpm``, ``a-full``
at ``(factor + 1) x rpm``.

Rows, one after another on the same server: **rule on** (``a`` at factor x rpm, ``b`` at rpm: the
gateway marks A's requests beyond its rpm in each minute as excess, which the scheduler serves
after every tenant's in-contract work); **rule off**, the ablation: the same traffic with A sent
by ``a-full``, whose contract covers its whole rate, so nothing is marked excess and A competes
with B as in-contract work; **B alone**.

Traffic is open loop and evenly spaced (a fixed window never sees more than a tenant's rate from
B): streamed chats through the official openai SDK, greedy, ``max_tokens`` = ``--tokens``, the
key's default tier. Per tenant: requests sent, answered, demoted (``service_tier: "default"``),
refused by HTTP status, TTFT p50/p99 of the answered, per-request TBT p99 (P99 over requests of
each request's P99 gap, docs/slo.md), and hot attainment: the share of sent requests answered hot
(not demoted: a demotion on a contract not marked demotable counts against hot) with TTFT and
per-request TBT P99 within the contract's targets. Writes ``bench/out/noisy_neighbour.json``,
prints a markdown table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from e2e_streams import laser_server, manage  # noqa: E402
from gateway_overhead import PROMPTS, percentile, write_report  # noqa: E402
from peers import ms, one_request  # noqa: E402

OUT = ROOT / "bench" / "out" / "noisy_neighbour.json"

SETUP = """
import json
from apps.slo.models import SLOContract
from apps.slo.services import contract_update
from apps.tenants.services import api_key_create, plan_ensure_default, tenant_create
plan = plan_ensure_default()
plan.burst_factor = {burst}
plan.save(update_fields=["burst_factor"])
out = {{}}
for slug, rpm in {tenants!r}.items():
    tenant = tenant_create(name=slug, slug=slug, plan=plan)
    hot = SLOContract.objects.get(tenant=tenant, tier="hot")
    hot = contract_update(contract=hot, requests_per_min=rpm, beyond_plan=True)
    _, key = api_key_create(tenant=tenant, name="noisy", default_tier="hot")
    out[slug] = {{"key": key, "rpm": rpm, "ttft_p99_s": hot.ttft_p99_s,
                  "tbt_p99_s": hot.tbt_p99_s, "burst_factor": plan.burst_factor}}
print("NOISY" + json.dumps(out))
"""

RUNS = {  # row -> {tenant label: (key slug, rate multiple of --rpm)}
    "rule on": {"A": ("a", "factor"), "B": ("b", 1)},
    "rule off": {"A": ("a-full", "factor"), "B": ("b", 1)},
    "B alone": {"B": ("b", 1)},
}


def summarise(results: list[dict], ttft_target: float, tbt_target: float) -> dict:
    """One tenant's row: counts, latency percentiles and hot attainment (module doc)."""
    ok = [r for r in results if r["error"] is None]
    hot = [r for r in ok if r["served_tier"] != "default"]
    request_tbt = {id(r): percentile(r["gaps"], 99) if r["gaps"] else 0.0 for r in ok}
    kept = [r for r in hot if r["ttft_s"] is not None and r["ttft_s"] <= ttft_target
            and request_tbt[id(r)] <= tbt_target]
    ttfts = [r["ttft_s"] for r in ok if r["ttft_s"] is not None]
    return {
        "requests": len(results), "answered": len(ok), "demoted": len(ok) - len(hot),
        "refused": dict(Counter(r["error"] for r in results if r["error"])),
        "error_samples": {r["error"]: r["detail"][:300] for r in results if r["error"]},
        "served_tiers": dict(Counter(str(r["served_tier"]) for r in ok)),
        "ttft_p50_s": percentile(ttfts, 50), "ttft_p99_s": percentile(ttfts, 99),
        "tbt_request_p99_s": percentile([v for r in ok if r["gaps"]
                                         for v in [request_tbt[id(r)]]], 99),
        "hot_attainment": len(kept) / len(results) if results else math.nan,
    }


async def tenant_traffic(client, rate_per_min: float, duration: float, offset: float,
                         tokens: int) -> list[dict]:
    """Open loop: one request every 60 / rate seconds from ``offset`` until ``duration``."""
    period, start, tasks = 60.0 / rate_per_min, time.perf_counter(), []
    for i in range(int((duration - offset) / period) + 1):
        await asyncio.sleep(max(0.0, start + offset + i * period - time.perf_counter()))
        prompt = PROMPTS[i % len(PROMPTS)]
        tasks.append(asyncio.create_task(one_request(client, prompt, tokens, None)))
    return list(await asyncio.gather(*tasks))


async def run_row(url: str, keys: dict, plan: dict[str, tuple[str, float]],
                  args: argparse.Namespace) -> dict:
    import openai

    clients = {t: openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=keys[slug]["key"],
                                     max_retries=0, timeout=900) for t, (slug, _) in plan.items()}
    try:
        done = await asyncio.gather(*(
            tenant_traffic(clients[t], args.rpm * mult, args.duration, 0.5 * i, args.tokens)
            for i, (t, (_, mult)) in enumerate(plan.items())))
    finally:
        for client in clients.values():
            await client.close()
    b = keys["b"]
    return {t: {"key": plan[t][0], "rate_per_min": args.rpm * plan[t][1],
                **summarise(rs, b["ttft_p99_s"], b["tbt_p99_s"])}
            for t, rs in zip(plan, done)}


def table(rows: dict[str, dict]) -> str:
    alone = rows.get("B alone", {}).get("B", {}).get("ttft_p99_s", math.nan)
    lines = ["| run | tenant (req/min) | sent | answered | demoted | refused | TTFT p50 / p99 ms "
             "| per-request TBT p99 ms | hot attainment | B TTFT p99 vs B alone |",
             "|" + " --- |" * 10]
    for label, tenants in rows.items():
        for t, r in tenants.items():
            refused = ", ".join(f"{n}× {k}" for k, n in sorted(r["refused"].items())) or "0"
            vs = (f"{r['ttft_p99_s'] / alone - 1:+.0%}" if t == "B" and alone
                  and not math.isnan(alone) and not math.isnan(r["ttft_p99_s"]) else "—")
            lines.append(
                f"| {label} | {t} ({r['rate_per_min']:g}) | {r['requests']} | {r['answered']} | "
                f"{r['demoted']} | {refused} | {ms(r['ttft_p50_s'])} / {ms(r['ttft_p99_s'])} | "
                f"{ms(r['tbt_request_p99_s'])} | {r['hot_attainment']:.1%} | {vs} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    ap.add_argument("--rpm", type=float, default=30, help="the hot contract's requests/min")
    ap.add_argument("--factor", type=float, default=5, help="A's rate / its contract's")
    ap.add_argument("--duration", type=float, default=60, help="seconds of traffic per row")
    ap.add_argument("--tokens", type=int, default=64, help="max_tokens of each chat")
    ap.add_argument("--burst", type=float, default=6, help="the plan's burst_factor")
    ap.add_argument("--port", type=int, default=0, help="the server's port (0: any free one)")
    ap.add_argument("--out", default=str(OUT), help="where the JSON goes")
    ap.add_argument("--from-json", default=None, help="print the table of an earlier run's JSON")
    args = ap.parse_args()
    if args.from_json:
        print(table(json.loads(Path(args.from_json).read_text())["results"]["rows"]))
        return
    rpm = int(args.rpm)
    tenants = {"a": rpm, "b": rpm, "a-full": math.ceil((args.factor + 1) * args.rpm)}
    keys: dict = {}

    def setup(env: dict) -> None:
        out = manage(env, "shell", "-c", SETUP.format(burst=args.burst, tenants=tenants))
        keys.update(json.loads(out.split("NOISY", 1)[1]))

    plans = {label: {t: (slug, args.factor if m == "factor" else m)
                     for t, (slug, m) in plan.items()} for label, plan in RUNS.items()}
    rows: dict[str, dict] = {}
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    with laser_server(setup=setup, port=args.port) as (url, demo_key):
        asyncio.run(run_row(url, {"b": {**keys["b"], "key": demo_key}}, {"B": ("b", 1)},
                            argparse.Namespace(**{**vars(args), "duration": 2, "rpm": 60})))
        for label, plan in plans.items():
            print(f"{label}: {args.duration:g} s", file=sys.stderr, flush=True)
            rows[label] = asyncio.run(run_row(url, keys, plan, args))
            time.sleep(5)  # let the last streams' work drain before the next row
    b = keys["b"]
    print(f"{started}; hot contract: {rpm} req/min, P99 TTFT {b['ttft_p99_s']} s, P99 TBT "
          f"{b['tbt_p99_s']} s; plan burst_factor {b['burst_factor']}; A at {args.factor:g}x. "
          f"Rule off (ablation) = A's traffic sent from a tenant whose contract is "
          f"{tenants['a-full']} req/min, so none of it is marked excess.")
    print(table(rows))
    write_report(ROOT / args.out, args, {"started": started, "contracts": {
        s: {k: v for k, v in d.items() if k != "key"} for s, d in keys.items()}, "rows": rows})


if __name__ == "__main__":
    main()
