"""A run's accounting reduced to the report's numbers (one flat dict per policy)."""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from typing import Any

from inference.request import Tier
from sim.accounting import Record, nearest_rank
from sim.config import Contracts
from sim.loop import RunResult

# attainment a load must keep (goodput)
TARGETS: dict[str, float] = {Tier.HOT: 0.99, Tier.WARM: 0.90, Tier.COLD: 0.99}
TIMING = ("wall_s", "scheduler_s")  # measured, not simulated: differ from run to run


def _share(num: int, den: int) -> float:
    return num / den if den else 1.0


def _pcts(values: list[float]) -> tuple[float, float]:
    v = sorted(values)
    return nearest_rank(v, 50), nearest_rank(v, 99)


def hot_terms(recs: list[Record]) -> dict:
    judged = [r for r in recs if not r.demoted]
    started = [r for r in recs if math.isfinite(r.ttft)]
    served = [r for r in recs if not r.refused]
    p50, p99 = _pcts([r.ttft for r in served])
    return {
        "requests": len(recs), "refused": sum(r.refused for r in recs),
        "attainment": _share(sum(r.within for r in judged), len(judged)),
        "ttft_p50_s": p50, "ttft_p99_s": p99,
        "tbt_p99_s": nearest_rank(sorted(r.tbt_p99 for r in served if r.tokens > 1), 99),
        "interruption_rate": _share(sum(r.interrupted for r in started), len(started))
        if started else 0.0,
        "demoted": sum(r.demoted for r in recs),
        "served_as_warm": sum(r.served_as_warm for r in recs),
        # how long hot requests waited for an outcome (first token, demotion or refusal),
        # and the worst such wait as a multiple of the request's TTFT target
        "wait_p99_s": nearest_rank(sorted(r.outcome_wait for r in recs), 99),
        "wait_max_ratio": max((r.outcome_wait / r.ttft_target for r in recs), default=0.0),
    }


def warm_terms(recs: list[Record], c: Contracts, window_s: float) -> dict:
    tokens: defaultdict[int, int] = defaultdict(int)
    secs: defaultdict[int, float] = defaultdict(float)
    ttfts: defaultdict[int, list[float]] = defaultdict(list)
    for r in recs:
        done = math.isfinite(r.finish)
        w = int((r.finish if done else r.arrival) // window_s)
        ttfts[w].append(r.ttft)
        if done and r.tokens > 1:
            tokens[w] += r.tokens - 1
            secs[w] += r.decode_s
    floor = (1 - c.warm_band) * c.warm_rate_tps
    rates, kept, slow, late, by_window = [], 0, 0, 0, []
    for w, tt in ttfts.items():
        rate = tokens[w] / secs[w] if secs[w] > 0 else None
        if rate is not None:
            rates.append(rate)
        mean = sum(tt) / len(tt)
        slow += rate is not None and rate < floor
        late += not mean <= c.warm_mean_ttft_s
        kept += (rate is None or rate >= floor) and mean <= c.warm_mean_ttft_s
        by_window.append((w, rate, mean))
    served = [r.ttft for r in recs if not r.refused]
    p50, p99 = _pcts(served)
    mean_rate = statistics.fmean(rates) if rates else math.nan
    return {
        "requests": len(recs), "refused": sum(r.refused for r in recs),
        "attainment": _share(kept, len(ttfts)), "windows": len(ttfts),
        "ttft_mean_s": statistics.fmean(served) if served else math.nan,
        "ttft_p50_s": p50, "ttft_p99_s": p99, "rate_mean_tps": mean_rate,
        "rate_cv": statistics.pstdev(rates) / mean_rate if len(rates) > 1 else 0.0,
        # windows under the rate floor, past the mean-TTFT target; and each window's
        # (index, delivered tokens/s or None, mean TTFT s)
        "windows_slow": slow, "windows_late": late, "by_window": sorted(by_window),
    }


def cold_terms(recs: list[Record]) -> dict:
    jobs: dict[str, bool] = {}
    on_time = 0
    for r in recs:
        ok = not r.refused and r.deadline is not None and r.finish <= r.deadline
        on_time += ok
        key = r.job or f"line@{r.arrival}"
        jobs[key] = jobs.get(key, True) and ok
    return {
        "requests": len(recs), "refused": sum(r.refused for r in recs),
        "attainment": _share(sum(jobs.values()), len(jobs)), "jobs": len(jobs),
        "line_attainment": _share(on_time, len(recs)),
        "ttft_p50_s": _pcts([r.ttft for r in recs if not r.refused])[0],
    }


def _by_tenant(recs: list[Record]) -> dict[str, dict]:
    """Hot terms per tenant, when hot traffic comes from more than one."""
    groups: dict[str, list[Record]] = defaultdict(list)
    for r in recs:
        groups[r.tenant].append(r)
    return {t: hot_terms(g) for t, g in sorted(groups.items())} if len(groups) > 1 else {}


def summarize(run: RunResult) -> dict:
    acc, cfg = run.accounting, run.config
    by_tier: dict[Tier, list[Record]] = {t: [] for t in Tier}
    for r in acc.records:
        by_tier[r.tier].append(r)
    total_slots = run.num_blocks * cfg.block_size
    frag = acc.frag_slot_s / (acc.elapsed_s * total_slots) if acc.elapsed_s else 0.0
    kept = acc.frag_kept_slot_s / (acc.elapsed_s * total_slots) if acc.elapsed_s else 0.0
    out: dict[str, Any] = {
        "policy": cfg.policy, "gpu": cfg.gpu, "model": cfg.model,
        Tier.HOT: hot_terms(by_tier[Tier.HOT]),
        "hot_by_tenant": _by_tenant(by_tier[Tier.HOT]),
        Tier.WARM: warm_terms(by_tier[Tier.WARM], cfg.contracts, cfg.window_s),
        Tier.COLD: cold_terms(by_tier[Tier.COLD]),
        "too_long": {str(t): n for t, n in acc.too_long.items()},
        "refusals": dict(acc.refusals),
        "preemptions": run.scheduler.num_preemptions, "demotions": acc.demotions,
        "promotions": acc.promotions, "kv_fragmentation": frag,
        "kv_fragmentation_kept_out": kept,
        "steps": run.steps, "sim_s": run.sim_end_s, "wall_s": run.wall_s,
        "scheduler_s": run.scheduler_s, "schedule_calls": run.schedule_calls,
    }
    if run.config.layer_pause:
        out["layer_pauses"] = run.pauses
    if run.batcher is not None:
        b = run.batcher
        out["layer_batching"] = {"split_steps": b.split_steps, "hot_steps": b.hot_steps,
                                 "hot_over_cap": b.hot_over_cap}
    out["meets_targets"] = all(out[t]["attainment"] >= q for t, q in TARGETS.items())
    return out
