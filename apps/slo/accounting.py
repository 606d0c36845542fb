"""The SLO accounting: from one window's request records (and cold jobs) to measured values
and, for each contract term, whether it was kept. Pure functions over plain attributes, so the
rules read in one place (docs/slo.md writes them down) and tests feed hand-built records.

A term is ``{"target": x, "actual": y, "kept": bool | None}``; ``kept`` is None when the window
had no demand for that term (an empty window neither keeps nor breaks a contract).
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable, Sequence
from typing import Any

from apps.core.tiers import Tier
from apps.slo.stats import percentile

STALL_FACTOR = 10.0  # a stall longer than 10× the TBT target interrupts a stream
CLIENT_REJECTIONS = frozenset({"rejected_429", "rejected_400"})


def _term(target: float | None, actual: float | None, kept: bool | None) -> dict[str, Any]:
    finite = actual if actual is None or math.isfinite(actual) else None
    return {"target": target, "actual": finite, "kept": kept}


def _seconds(a: dt.datetime | None, b: dt.datetime | None) -> float | None:
    return None if a is None or b is None else (b - a).total_seconds()


def base_stats(records: Sequence[Any], seconds: float) -> dict[str, Any]:
    """Counts, tokens and latency summaries every tier shows."""
    outcomes: dict[str, int] = {}
    for r in records:
        outcomes[r.outcome] = outcomes.get(r.outcome, 0) + 1
    ttfts = [r.ttft_s for r in records if r.ttft_s is not None]
    tbts = [r.tbt_p99_s for r in records if r.tbt_p99_s is not None]
    completion = sum(r.completion_tokens for r in records)
    return {
        "requests": len(records),
        "outcomes": outcomes,
        "demoted": sum(1 for r in records if r.demoted),
        "excess": sum(1 for r in records if not r.in_contract),
        "prompt_tokens": sum(r.prompt_tokens for r in records),
        "completion_tokens": completion,
        "tokens_per_s": completion / seconds if seconds > 0 else 0.0,
        "ttft_p50_s": percentile(ttfts, 50),
        "ttft_p99_s": percentile(ttfts, 99),
        "ttft_mean_s": sum(ttfts) / len(ttfts) if ttfts else None,
        "tbt_p99_s": percentile(tbts, 99),
        "tbt_max_s": max((r.tbt_max_s for r in records if r.tbt_max_s is not None), default=None),
    }


def _is_interrupted(r: Any, tbt_target: float) -> bool:
    stalled = r.tbt_max_s is not None and r.tbt_max_s > STALL_FACTOR * tbt_target
    return r.outcome == "interrupted" or stalled


def hot_terms(records: Sequence[Any], terms: Any) -> tuple[dict, dict]:
    """Hot: P99 TTFT and TBT, share within the TTFT target, interruptions, demotions.

    Without ``demotable``, a demoted request counts against hot: its TTFT is taken as infinite
    (a miss). With it, demoted requests leave the latency terms and are bounded by their own.
    """
    demotable = bool(terms.demotable)
    latency = [r for r in records if not (demotable and r.demoted)]
    ttfts = [math.inf if r.demoted else r.ttft_s for r in latency
             if r.ttft_s is not None or r.demoted]
    tbts = [r.tbt_p99_s for r in latency if r.tbt_p99_s is not None]
    started = [r for r in records if r.streamed and (r.first_token_at is not None
                                                     or r.outcome == "interrupted")]
    interrupted = sum(1 for r in started if _is_interrupted(r, terms.tbt_p99_s))
    within = sum(1 for t in ttfts if t <= terms.ttft_p99_s)
    p99_ttft, p99_tbt = percentile(ttfts, 99), percentile(tbts, 99)
    served = [r for r in records if r.outcome not in CLIENT_REJECTIONS]
    demoted = sum(1 for r in served if r.demoted)
    stats = {"ttft_n": len(ttfts), "ttft_within_n": within, "started_streams": len(started),
             "interrupted": interrupted}
    result = {
        "ttft_p99": _term(terms.ttft_p99_s, p99_ttft,
                          None if p99_ttft is None else p99_ttft <= terms.ttft_p99_s),
        "ttft_within": _term(0.99, within / len(ttfts) if ttfts else None,
                             None if not ttfts else within / len(ttfts) >= 0.99),
        "tbt_p99": _term(terms.tbt_p99_s, p99_tbt,
                         None if p99_tbt is None else p99_tbt <= terms.tbt_p99_s),
        "interruption_rate": _term(
            terms.interruption_budget, interrupted / len(started) if started else None,
            None if not started else interrupted / len(started) <= terms.interruption_budget),
    }
    if demotable:
        rate = demoted / len(served) if served else None
        result["demotions"] = _term(terms.demotion_budget, rate,
                                    None if rate is None else rate <= terms.demotion_budget)
    return stats, result


def warm_terms(records: Sequence[Any], terms: Any) -> tuple[dict, dict]:
    """Warm: delivered tokens/s is a floor, ``(1 − band) × rate``; mean TTFT ≤ target.

    Delivered tokens/s = completion tokens / generation seconds (first token → finish), summed
    over the window's requests that streamed at least two tokens: a token-weighted mean of the
    per-request rates. Only windows with such demand are judged; more is never a violation.
    """
    tokens = seconds = 0.0
    for r in records:
        span = _seconds(r.first_token_at, r.finished_at)
        if r.completion_tokens >= 2 and span and span > 0:
            tokens += r.completion_tokens - 1  # the first token's wait is TTFT, not rate
            seconds += span
    rate = tokens / seconds if seconds > 0 else None
    floor = (1.0 - terms.warm_band) * terms.warm_rate_tps
    ttfts = [r.ttft_s for r in records if r.ttft_s is not None]
    mean = sum(ttfts) / len(ttfts) if ttfts else None
    stats = {"delivered_tps": rate, "warm_floor_tps": floor}
    return stats, {
        "warm_floor": _term(floor, rate, None if rate is None else rate >= floor),
        "warm_mean_ttft": _term(terms.warm_mean_ttft_s, mean,
                                None if mean is None else mean <= terms.warm_mean_ttft_s),
    }


def line_on_time(r: Any) -> bool:
    return r.outcome == "ok" and (r.deadline is None or r.finished_at <= r.deadline)


def cold_terms(records: Sequence[Any], batches: Iterable[Any], terms: Any,
               now: dt.datetime) -> tuple[dict, dict]:
    """Cold: jobs (batches) finished by their deadline / jobs due, and lines likewise.

    A job is due in the window holding its deadline, and counts once its deadline has passed or
    it has finished; it is on time when every line finished by the deadline.
    """
    due = [b for b in batches if b.finished_at is not None or b.deadline <= now]
    on_time = sum(1 for b in due if b.on_time)
    lines = [r for r in records if r.outcome not in CLIENT_REJECTIONS]
    lines_ok = sum(1 for r in lines if line_on_time(r))
    share = terms.cold_percentile / 100.0
    jobs_actual = on_time / len(due) if due else None
    lines_actual = lines_ok / len(lines) if lines else None
    stats = {"jobs_due": len(due), "jobs_on_time": on_time, "lines": len(lines),
             "lines_on_time": lines_ok}
    return stats, {
        "cold_jobs": _term(share, jobs_actual, None if not due else jobs_actual >= share),
        "cold_lines": _term(share, lines_actual, None if not lines else lines_actual >= share),
    }


def evaluate(tier: str, records: Sequence[Any], terms: Any | None, *, seconds: float,
             batches: Iterable[Any] = (), now: dt.datetime | None = None) -> tuple[dict, dict]:
    """(stats, terms) of one tenant × tier window; ``terms`` None = no contract to judge by."""
    stats = base_stats(records, seconds)
    if terms is None:
        return stats, {}
    if tier == Tier.HOT:
        extra, result = hot_terms(records, terms)
    elif tier == Tier.WARM:
        extra, result = warm_terms(records, terms)
    else:
        now = now or dt.datetime.now(dt.UTC)
        extra, result = cold_terms(records, list(batches), terms, now)
    stats.update(extra)
    return stats, result


HEADLINE_TERM: dict[str, str] = {
    Tier.HOT: "ttft_p99", Tier.WARM: "warm_floor", Tier.COLD: "cold_jobs",
}
