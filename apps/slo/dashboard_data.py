"""The dashboard's JSON: per-tier cards, minute series for the charts, cold jobs and recent
violations of one tenant over the last hour. Polled by ``dashboard.js`` every 2 s."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable
from typing import Any

from django.utils import timezone

from apps.core.tiers import TIERS, Tier
from apps.slo import fulfilment, windows
from apps.slo.fulfilment import WindowRow
from apps.slo.models import BatchRecord, BreachAlert
from apps.slo.selectors import ContractSnapshot, contracts_for_tenant
from apps.tenants.models import Tenant

MINUTES = 60
TERM_LABELS = {
    "ttft_p99": "P99 TTFT", "ttft_within": "requests within TTFT", "tbt_p99": "P99 TBT",
    "interruption_rate": "interruptions", "demotions": "demotions",
    "warm_floor": "delivered tokens/s", "warm_mean_ttft": "mean TTFT",
    "cold_jobs": "jobs on time", "cold_lines": "lines on time",
}
# The term each minute's attainment point of the chart shows, per tier.
MINUTE_TERM = {Tier.HOT: "ttft_within", Tier.WARM: "warm_floor", Tier.COLD: "cold_lines"}


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000.0, 1)


def _card(snap: ContractSnapshot, rows: list[WindowRow], since: dt.datetime,
          now: dt.datetime) -> dict[str, Any]:
    tier, t = snap.tier, snap.targets
    hour = fulfilment.compute_range(snap.tenant_id, tier, since, now, now=now)
    stats, terms = hour["stats"], hour["terms"]
    summary = fulfilment.attainment(rows, tier)
    if tier == Tier.HOT:
        value, target = terms["ttft_within"]["actual"], 0.99
    elif tier == Tier.COLD:
        value, target = terms["cold_jobs"]["actual"], t.cold_percentile / 100.0
    else:
        value, target = summary["attainment"], 0.99
    missed = [TERM_LABELS.get(name, name) for name, v in terms.items() if v["kept"] is False]
    return {
        "tier": tier, "version": snap.version,
        "attainment": value, "attainment_target": target,
        "status": _status(value, target, missed, stats["requests"]),
        "missed": missed,
        "windows_kept": summary["windows_kept"], "windows_judged": summary["windows_judged"],
        "requests": stats["requests"],
        "ttft_p99_ms": _ms(stats["ttft_p99_s"]), "ttft_mean_ms": _ms(stats["ttft_mean_s"]),
        "tbt_p99_ms": _ms(stats["tbt_p99_s"]),
        "ttft_target_ms": _ms(t.ttft_p99_s if tier == Tier.HOT else t.warm_mean_ttft_s),
        "tbt_target_ms": _ms(t.tbt_p99_s),
        "interruptions": stats.get("interrupted", stats["outcomes"].get("interrupted", 0)),
        "interruption_rate": terms.get("interruption_rate", {}).get("actual"),
        "demotions": stats["demoted"], "excess": stats["excess"],
        "rejected_429": stats["outcomes"].get("rejected_429", 0),
        "tokens_per_s": round(stats["tokens_per_s"], 2),
        "delivered_tps": stats.get("delivered_tps"), "floor_tps": stats.get("warm_floor_tps"),
        "jobs_due": stats.get("jobs_due"), "jobs_on_time": stats.get("jobs_on_time"),
        "deadline_s": t.cold_deadline_s,
    }


def _status(value: float | None, target: float, missed: list[str], requests: int) -> str:
    """``idle``: no request in the hour; ``pending``: requests, but nothing judged yet (a cold
    job whose deadline has not come, a warm window still open); else ``met`` or ``missed``."""
    if value is None:
        return "pending" if requests else "idle"
    return "missed" if missed or value < target else "met"


def _minute_attainment(tier: str, row: WindowRow | None) -> float | None:
    if row is None:
        return None
    term = MINUTE_TERM[Tier(tier)]
    verdict = row["terms"].get(term) or {}
    actual = verdict.get("actual")
    if tier == Tier.WARM and actual is not None:
        return min(1.0, actual / verdict["target"]) * 100.0
    return None if actual is None else actual * 100.0


def _series(rows: list[WindowRow], starts: list[dt.datetime]) -> dict[str, Any]:
    by_key = {(r["tier"], r["start"]): r for r in rows}
    out: dict[str, Any] = {"labels": [s.strftime("%H:%M") for s in starts]}
    for tier in TIERS:
        cells = [by_key.get((tier, s)) for s in starts]
        out[tier] = {
            "ttft_p99_ms": [_ms(c["stats"]["ttft_p99_s"]) if c else None for c in cells],
            "attainment": [_minute_attainment(tier, c) for c in cells],
            "tokens_per_s": [round(c["stats"]["tokens_per_s"], 2) if c else 0 for c in cells],
            "demotions": [c["stats"]["demoted"] if c else 0 for c in cells],
        }
    return out


def _violations(tenant: Tenant, rows: list[WindowRow]) -> list[dict]:
    found = [{"at": r["start"], "window": r["window"], "tier": r["tier"], "term": name,
              "label": TERM_LABELS.get(name, name), "target": v["target"], "actual": v["actual"]}
             for r in rows for name, v in r["terms"].items() if v["kept"] is False]
    for a in BreachAlert.objects.filter(tenant=tenant).order_by("-window_start")[:10]:
        found.append({"at": a.window_start, "window": a.window, "tier": a.tier, "term": a.term,
                      "label": TERM_LABELS.get(a.term, a.term), "target": a.target,
                      "actual": a.actual})
    found.sort(key=lambda v: v["at"], reverse=True)
    return [{**v, "at": v["at"].isoformat()} for v in found[:20]]


def _field(item: Any, name: str, default: Any = None) -> Any:
    return item.get(name, default) if isinstance(item, dict) else getattr(item, name, default)


def job_source(source: Callable[[Tenant], Iterable[Any]]) -> None:
    """Take the live view of a tenant's latest batches (the batches app, which sits above this
    one, hands it in when it loads). Without one the dashboard shows the jobs the batches app
    reported to the SLO books (``BatchRecord``)."""
    global _job_source
    _job_source = source


def _recorded_jobs(tenant: Tenant) -> list[BatchRecord]:
    return list(BatchRecord.objects.filter(tenant=tenant).order_by("-deadline")[:20])


_job_source: Callable[[Tenant], Iterable[Any]] = _recorded_jobs


def _batches(tenant: Tenant) -> list[dict]:
    source = list(_job_source(tenant)) or _recorded_jobs(tenant)
    jobs = []
    for b in source:
        deadline = _field(b, "deadline") or _field(b, "deadline_at")
        finished = _field(b, "finished_at")
        jobs.append({
            "id": str(_field(b, "batch_id") or _field(b, "id")),
            "status": str(_field(b, "status", "")),
            "total": _field(b, "total", 0), "completed": _field(b, "completed", 0),
            "failed": _field(b, "failed", 0),
            "deadline": deadline.isoformat() if deadline else None,
            "finished_at": finished.isoformat() if finished else None,
            "on_time": _field(b, "on_time"),
        })
    return jobs


def payload(tenant: Tenant, *, now: dt.datetime | None = None) -> dict[str, Any]:
    now = now or timezone.now()
    first = windows.floor(now, "minute") - dt.timedelta(minutes=MINUTES - 1)
    starts = [first + dt.timedelta(minutes=i) for i in range(MINUTES)]
    rows = fulfilment.series("minute", first, now, tenant_ids=[tenant.pk])
    contracts = contracts_for_tenant(tenant=tenant)
    cards = [_card(s, [r for r in rows if r["tier"] == s.tier], first, now) for s in contracts]
    hot = next((s for s in contracts if s.tier == Tier.HOT), None)
    return {
        "tenant": {"slug": tenant.slug, "name": tenant.name},
        "generated_at": now.isoformat(),
        "cards": cards,
        "series": _series(rows, starts),
        "targets": {"hot_ttft_ms": _ms(hot.targets.ttft_p99_s) if hot else None},
        "batches": _batches(tenant),
        "violations": _violations(tenant, rows),
    }
