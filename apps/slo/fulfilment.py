"""Fulfilment per tenant × tier × window: computed from request records, materialised once a
window has closed, read back as plain dicts (API, CSV, dashboard, metrics).

Closed windows (``end <= AggregationMark.through``) are read from ``WindowAggregate``; windows
after the mark (the open one, and any not yet materialised) are computed on demand from the raw
records, which are kept at least two days, so a reader always sees the same numbers.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Iterable
from typing import Any, TypedDict

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from apps.core.tiers import TIERS, Tier
from apps.slo import accounting, windows
from apps.slo.models import (
    AggregationMark,
    BatchRecord,
    ContractVersion,
    RequestRecord,
    SLOContract,
    UsageDaily,
    WindowAggregate,
)
from apps.slo.selectors import aggregated_through
from apps.slo.usage import totals

Key = tuple[int, str, dt.datetime]  # tenant id, tier, window start


class WindowRow(TypedDict):
    """One tenant × tier × window: what was measured (``stats``) and each contract term's
    verdict (``terms``: name -> ``{"target", "actual", "kept"}``), as the API shows it."""

    tenant_id: int
    tier: str
    window: str
    start: dt.datetime
    end: dt.datetime
    final: bool
    contract_version: int | None  # the number of the version the window was judged by
    stats: dict[str, Any]
    terms: dict[str, dict[str, Any]]


def grace() -> dt.timedelta:
    """How long after a window's end its records may still be arriving (writer lag)."""
    return dt.timedelta(seconds=getattr(settings, "LASER_SLO_MATERIALISE_GRACE_S", 30.0))


def _filter(qs, tenant_ids: Iterable[int] | None):
    return qs if tenant_ids is None else qs.filter(tenant_id__in=list(tenant_ids))


def _group(window: str, since: dt.datetime, until: dt.datetime,
           tenant_ids: Iterable[int] | None, tiers: Iterable[str]):
    """Records and due batches of ``[since, until)``, grouped by (tenant, tier, window start)."""
    tiers = list(tiers)
    records: dict[Key, list] = defaultdict(list)
    qs = _filter(RequestRecord.objects, tenant_ids).filter(
        finished_at__gte=since, finished_at__lt=until, tier_asked__in=tiers)
    for r in qs.order_by("finished_at").iterator(chunk_size=2000):
        records[(r.tenant_id, r.tier_asked, windows.floor(r.finished_at, window))].append(r)
    batches: dict[Key, list] = defaultdict(list)
    if Tier.COLD in tiers:
        bqs = _filter(BatchRecord.objects, tenant_ids).filter(deadline__gte=since,
                                                             deadline__lt=until)
        for b in bqs.iterator():
            batches[(b.tenant_id, Tier.COLD, windows.floor(b.deadline, window))].append(b)
    return records, batches


class _Terms:
    """Finds the contract version a window is judged by (cached per run)."""

    def __init__(self) -> None:
        self._versions: dict[int, ContractVersion] = {}
        self._current: dict[tuple[int, str], Any] = {}

    def for_window(self, tenant_id: int, tier: str, records: list) -> Any:
        # The version in force at the window's last request; else the contract in force now.
        version_id = next((r.contract_version_id for r in reversed(records)
                           if r.contract_version_id), None)
        if version_id is not None:
            if version_id not in self._versions:
                self._versions[version_id] = ContractVersion.objects.get(pk=version_id)
            return self._versions[version_id]
        key = (tenant_id, tier)
        if key not in self._current:
            contract = SLOContract.objects.select_related("current_version").filter(
                tenant_id=tenant_id, tier=tier).first()
            self._current[key] = contract and (contract.current_version or contract)
        return self._current[key]


def _row(key: Key, window: str, stats: dict, terms: dict, version: Any,
         final: bool) -> WindowRow:
    tenant_id, tier, start = key
    return WindowRow(
        tenant_id=tenant_id, tier=tier, window=window, start=start,
        end=start + windows.LENGTH[window], final=final,
        contract_version=getattr(version, "number", None), stats=stats, terms=terms,
    )


def compute(window: str, since: dt.datetime, until: dt.datetime, *,
            tenant_ids: Iterable[int] | None = None, tiers: Iterable[str] = TIERS,
            now: dt.datetime | None = None) -> dict[Key, WindowRow]:
    """Fulfilment of every non-empty window in ``[since, until)``, from the raw records."""
    return {key: row for key, (row, _) in _judged(window, since, until, tenant_ids=tenant_ids,
                                                  tiers=tiers, now=now).items()}


def _judged(window: str, since: dt.datetime, until: dt.datetime, *,
            tenant_ids: Iterable[int] | None = None, tiers: Iterable[str] = TIERS,
            now: dt.datetime | None = None) -> dict[Key, tuple[WindowRow, int | None]]:
    """``compute``, each row with the id of the contract version it was judged by (None when
    judged by the live contract, no version frozen yet)."""
    now = now or timezone.now()
    records, batches = _group(window, since, until, tenant_ids, tiers)
    finder = _Terms()
    rows: dict[Key, tuple[WindowRow, int | None]] = {}
    seconds = windows.LENGTH[window].total_seconds()
    for key in sorted(set(records) | set(batches)):
        group = records.get(key, [])
        terms = finder.for_window(key[0], key[1], group)
        stats, result = accounting.evaluate(key[1], group, terms, seconds=seconds,
                                            batches=batches.get(key, ()), now=now)
        version_id = terms.pk if isinstance(terms, ContractVersion) else None
        rows[key] = (_row(key, window, stats, result, terms, final=False), version_id)
    return rows


def compute_range(tenant_id: int, tier: str, since: dt.datetime, until: dt.datetime, *,
                  now: dt.datetime | None = None) -> dict:
    """One tenant × tier over an arbitrary range treated as a single window (dashboard cards)."""
    qs = RequestRecord.objects.filter(tenant_id=tenant_id, tier_asked=tier,
                                      finished_at__gte=since, finished_at__lt=until)
    records = list(qs.order_by("finished_at"))
    batches = (list(BatchRecord.objects.filter(tenant_id=tenant_id, deadline__gte=since,
                                               deadline__lt=until)) if tier == Tier.COLD else [])
    terms = _Terms().for_window(tenant_id, tier, records)
    stats, result = accounting.evaluate(tier, records, terms,
                                        seconds=(until - since).total_seconds(),
                                        batches=batches, now=now or timezone.now())
    return {"stats": stats, "terms": result, "contract_version": getattr(terms, "number", None)}


def _first_data(window: str) -> dt.datetime | None:
    first = RequestRecord.objects.order_by("finished_at").values_list("finished_at", flat=True)
    first_batch = BatchRecord.objects.order_by("deadline").values_list("deadline", flat=True)
    found = [m for m in (first.first(), first_batch.first()) if m is not None]
    return windows.floor(min(found), window) if found else None


def _store_usage(since: dt.datetime, until: dt.datetime) -> None:
    for row in totals(since, until):
        UsageDaily.objects.update_or_create(
            tenant_id=row["tenant_id"], key_prefix=row["key_prefix"], tier=row["tier"],
            day=row["day"],
            defaults={"api_key_id": row["api_key_id"], "requests": row["requests"],
                      "prompt_tokens": row["prompt_tokens"],
                      "completion_tokens": row["completion_tokens"]})


def materialise(*, now: dt.datetime | None = None) -> list[WindowRow]:
    """Store every window that closed (plus the grace) since the last run; returns the rows.

    Idempotent: re-running recomputes nothing that is already final. Day windows also store
    usage per key, tier and day. Breach alerts are raised by the caller (``tasks``).
    """
    now = now or timezone.now()
    stored: list[WindowRow] = []
    for window in windows.WINDOWS:
        limit = windows.floor(now - grace(), window)
        mark = aggregated_through(window) or _first_data(window) or limit
        if mark >= limit:
            AggregationMark.objects.update_or_create(window=window, defaults={"through": mark})
            continue
        rows = _judged(window, mark, limit, now=now)
        with transaction.atomic():
            for key, (row, version_id) in rows.items():
                WindowAggregate.objects.update_or_create(
                    tenant_id=key[0], tier=key[1], window=window, start=key[2],
                    defaults={"stats": row["stats"], "terms": row["terms"],
                              "contract_version_id": version_id})
                row["final"] = True
                stored.append(row)
            if window == "day":
                _store_usage(mark, limit)
            AggregationMark.objects.update_or_create(window=window, defaults={"through": limit})
    return stored


def series(window: str, since: dt.datetime, until: dt.datetime, *,
           tenant_ids: Iterable[int] | None = None, tiers: Iterable[str] = TIERS,
           now: dt.datetime | None = None) -> list[WindowRow]:
    """Every non-empty window overlapping ``[since, until)``, oldest first: final ones from the
    materialised table, later ones computed from the records."""
    tiers, since = list(tiers), windows.floor(since, window)
    mark = aggregated_through(window)
    rows: dict[Key, WindowRow] = {}
    if mark is not None and since < mark:
        qs = _filter(WindowAggregate.objects, tenant_ids).filter(
            window=window, tier__in=tiers, start__gte=since, start__lt=min(until, mark))
        for agg in qs.select_related("contract_version"):
            key = (agg.tenant_id, agg.tier, agg.start)
            rows[key] = _row(key, window, agg.stats, agg.terms, agg.contract_version, final=True)
    open_since = max(since, mark) if mark is not None else since
    if open_since < until:
        rows.update(compute(window, open_since, until, tenant_ids=tenant_ids, tiers=tiers,
                            now=now))
    return [rows[key] for key in sorted(rows)]


def attainment(rows: Iterable[WindowRow], tier: str) -> dict[str, Any]:
    """Across windows: the share whose headline term was kept (hot: P99 TTFT ≤ target), and for
    hot also the share of requests within the TTFT target."""
    term = accounting.HEADLINE_TERM[tier]
    judged = kept = within = measured = 0
    for row in rows:
        verdict = row["terms"].get(term, {}).get("kept")
        if verdict is not None:
            judged += 1
            kept += bool(verdict)
        within += row["stats"].get("ttft_within_n", 0)
        measured += row["stats"].get("ttft_n", 0)
    return {
        "term": term, "windows_judged": judged, "windows_kept": kept,
        "attainment": kept / judged if judged else None,
        "requests_within": within / measured if tier == Tier.HOT and measured else None,
    }
