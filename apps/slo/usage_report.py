"""A tenant's usage against its limits, read from the request records (the SLO books): per UTC
day and tier, per API key and per user, the requests served, tokens, 429s and excess admitted;
and per tier today's tokens against the daily budget and the busiest minute against the
contract's rpm/tpm and the plan's burst ceiling.

Counts follow the limiter's (``apps/gateway/ratelimit.py``): a served request is any record
but a client rejection (429 or 400); its tokens are prompt + completion; minutes and days are
UTC fixed windows. Raw records are kept ``LASER_SLO_RETENTION_DAYS``, so ``days`` is capped
there (older days live on, per key and tier only, in ``UsageDaily``)."""

from __future__ import annotations

import datetime as dt
import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db.models import Count, F, Q, Sum
from django.db.models.functions import TruncDate, TruncMinute
from django.utils import timezone

from apps.core.tiers import TIERS
from apps.slo import accounting
from apps.slo.models import RequestRecord
from apps.slo.selectors import contracts_for_tenant
from apps.tenants.models import Tenant
from apps.tenants.plans import tenant_limits

COLUMNS = ("requests", "tokens", "prompt_tokens", "completion_tokens", "rejected_429", "excess")


@dataclass(frozen=True, slots=True)
class TierLimits:
    """One tier's limits and how close today came to them (``None`` = unlimited)."""

    tier: str
    requests_per_min: int
    tokens_per_min: int
    ceiling_requests_per_min: int
    ceiling_tokens_per_min: int
    daily_token_budget: int | None
    tokens_today: int
    budget_left: int | None
    peak_requests_per_min: int
    peak_tokens_per_min: int
    rejected_429_today: int
    excess_today: int


@dataclass(frozen=True, slots=True)
class UsageReport:
    tenant: str
    days: list[dt.date]
    by_day: dict[str, dict[str, list[int]]]  # tier -> column -> one value per day
    by_key: list[dict[str, Any]]
    by_user: list[dict[str, Any]]
    limits: list[TierLimits]
    plan: str
    burst_factor: float
    totals: dict[str, int] = field(default_factory=dict)


def max_days() -> int:
    return max(1, int(float(getattr(settings, "LASER_SLO_RETENTION_DAYS", 7.0))))


def _sums() -> dict[str, Any]:
    served = ~Q(outcome__in=accounting.CLIENT_REJECTIONS)
    return {
        "requests": Count("id", filter=served),
        "prompt_tokens": Sum("prompt_tokens", filter=served, default=0),
        "completion_tokens": Sum("completion_tokens", filter=served, default=0),
        "rejected_429": Count("id", filter=Q(outcome="rejected_429")),
        "excess": Count("id", filter=served & Q(in_contract=False)),
    }


def _row(values: dict[str, Any]) -> dict[str, int]:
    out = {c: int(values.get(c) or 0) for c in COLUMNS if c != "tokens"}
    out["tokens"] = out["prompt_tokens"] + out["completion_tokens"]
    return out


def usage_rows(tenant: Tenant, since: dt.datetime, until: dt.datetime) -> list[dict[str, Any]]:
    """``{day, tier, key_prefix, key_name, user, requests, tokens, ...}`` per UTC day, tier,
    key and user (the CSV's rows)."""
    qs = (RequestRecord.objects.filter(tenant=tenant, finished_at__gte=since,
                                       finished_at__lt=until)
          .annotate(day=TruncDate("finished_at", tzinfo=dt.UTC))
          .values("day", "tier_asked", "api_key__prefix", "api_key__name", "user__username")
          .annotate(**_sums()).order_by("day", "tier_asked", "api_key__prefix",
                                        "user__username"))
    return [{"day": r["day"], "tier": r["tier_asked"], "key_prefix": r["api_key__prefix"] or "",
             "key_name": r["api_key__name"] or "", "user": r["user__username"] or "", **_row(r)}
            for r in qs]


def _peaks(tenant: Tenant, start: dt.datetime, end: dt.datetime) -> dict[str, tuple[int, int]]:
    """Per tier, the busiest minute of ``[start, end)``: (requests, tokens) admitted."""
    qs = (RequestRecord.objects.filter(tenant=tenant, arrival__gte=start, arrival__lt=end)
          .exclude(outcome__in=accounting.CLIENT_REJECTIONS)
          .annotate(minute=TruncMinute("arrival", tzinfo=dt.UTC))
          .values("tier_asked", "minute")
          .annotate(n=Count("id"), tokens=Sum(F("prompt_tokens") + F("completion_tokens"))))
    peaks: dict[str, tuple[int, int]] = {}
    for r in qs:
        n, t = peaks.get(r["tier_asked"], (0, 0))
        peaks[r["tier_asked"]] = (max(n, r["n"]), max(t, int(r["tokens"] or 0)))
    return peaks


def _ceiling(rate: int, burst: float) -> int:
    """The burst ceiling as the limiter computes it."""
    return max(rate, math.floor(rate * burst))


def usage_report(*, tenant: Tenant, days: int = 7, now: dt.datetime | None = None
                 ) -> UsageReport:
    """The last ``days`` UTC days (today included) of ``tenant``'s usage and today's limits."""
    now = now or timezone.now()
    days = min(max(1, days), max_days())
    today = now.astimezone(dt.UTC).date()
    dates = [today - dt.timedelta(days=days - 1 - i) for i in range(days)]
    since = dt.datetime.combine(dates[0], dt.time(), tzinfo=dt.UTC)
    until = dt.datetime.combine(today + dt.timedelta(days=1), dt.time(), tzinfo=dt.UTC)
    rows = usage_rows(tenant, since, until)
    index = {d: i for i, d in enumerate(dates)}
    by_day = {t: {c: [0] * len(dates) for c in COLUMNS} for t in TIERS}
    keys: dict[str, dict[str, Any]] = {}
    users: dict[str, dict[str, Any]] = {}
    totals = dict.fromkeys(COLUMNS, 0)
    today_by_tier: dict[str, dict[str, int]] = defaultdict(lambda: dict.fromkeys(COLUMNS, 0))
    for r in rows:
        for c in COLUMNS:
            by_day[r["tier"]][c][index[r["day"]]] += r[c]
            totals[c] += r[c]
            if r["day"] == today:
                today_by_tier[r["tier"]][c] += r[c]
        if r["key_prefix"]:
            _add(keys, r["key_prefix"], {"prefix": r["key_prefix"], "name": r["key_name"]}, r)
        if r["user"]:
            _add(users, r["user"], {"user": r["user"]}, r)
    start_today = dt.datetime.combine(today, dt.time(), tzinfo=dt.UTC)
    peaks = _peaks(tenant, start_today, until)
    plan = tenant_limits(tenant)
    limits = []
    for snap in contracts_for_tenant(tenant=tenant):
        used = today_by_tier[snap.tier]
        budget = snap.daily_token_budget
        peak = peaks.get(snap.tier, (0, 0))
        limits.append(TierLimits(
            tier=snap.tier, requests_per_min=snap.requests_per_min,
            tokens_per_min=snap.tokens_per_min,
            ceiling_requests_per_min=_ceiling(snap.requests_per_min, plan.burst_factor),
            ceiling_tokens_per_min=_ceiling(snap.tokens_per_min, plan.burst_factor),
            daily_token_budget=budget, tokens_today=used["tokens"],
            budget_left=None if budget is None else max(0, budget - used["tokens"]),
            peak_requests_per_min=peak[0], peak_tokens_per_min=peak[1],
            rejected_429_today=used["rejected_429"], excess_today=used["excess"]))
    return UsageReport(tenant=tenant.slug, days=dates, by_day=by_day,
                       by_key=sorted(keys.values(), key=lambda k: -k["tokens"]),
                       by_user=sorted(users.values(), key=lambda u: -u["tokens"]),
                       limits=limits, plan=plan.plan, burst_factor=plan.burst_factor,
                       totals=totals)


def _add(into: dict[str, dict[str, Any]], name: str, label: dict[str, Any],
         row: dict[str, Any]) -> None:
    entry = into.setdefault(name, {**label, **dict.fromkeys(COLUMNS, 0)})
    for c in COLUMNS:
        entry[c] += row[c]
