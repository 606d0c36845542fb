"""Usage per API key, tier and UTC day: materialised days from ``UsageDaily``, the days the
day-window mark has not reached yet computed from the raw records."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Iterable

from apps.slo import accounting
from apps.slo.models import RequestRecord, UsageDaily
from apps.slo.selectors import aggregated_through


def usage(since: dt.date, until: dt.date, *, tenant_ids: Iterable[int] | None = None
          ) -> list[dict]:
    """Rows ``{tenant_id, key_prefix, tier, day, requests, prompt_tokens, completion_tokens}``
    for ``since <= day < until``, newest day first."""
    ids = None if tenant_ids is None else list(tenant_ids)
    mark = aggregated_through("day")
    open_from = max(since, mark.date()) if mark else since
    rows: list[dict] = []
    stored = UsageDaily.objects.filter(day__gte=since, day__lt=min(until, open_from))
    if ids is not None:
        stored = stored.filter(tenant_id__in=ids)
    for u in stored:
        rows.append({"tenant_id": u.tenant_id, "key_prefix": u.key_prefix, "tier": u.tier,
                     "day": u.day, "requests": u.requests, "prompt_tokens": u.prompt_tokens,
                     "completion_tokens": u.completion_tokens})
    if open_from < until:
        rows.extend({k: v for k, v in row.items() if k != "api_key_id"}
                    for row in _from_records(open_from, until, ids))
    return sorted(rows, key=lambda r: (-r["day"].toordinal(), r["tier"], r["key_prefix"]))


def _from_records(since: dt.date, until: dt.date, ids: list[int] | None) -> list[dict]:
    start = dt.datetime.combine(since, dt.time(), tzinfo=dt.UTC)
    end = dt.datetime.combine(until, dt.time(), tzinfo=dt.UTC)
    return totals(start, end, ids)


def totals(start: dt.datetime, end: dt.datetime, ids: list[int] | None = None) -> list[dict]:
    """Usage rows summed from the raw records finished in ``[start, end)``."""
    qs = RequestRecord.objects.filter(finished_at__gte=start, finished_at__lt=end).exclude(
        outcome__in=accounting.CLIENT_REJECTIONS).select_related("api_key")
    if ids is not None:
        qs = qs.filter(tenant_id__in=ids)
    sums: dict[tuple, list[int]] = defaultdict(lambda: [0, 0, 0])
    key_ids: dict[str, int | None] = {}
    for r in qs.iterator(chunk_size=2000):
        if r.api_key:
            key_ids[r.api_key.prefix] = r.api_key_id
        key = (r.tenant_id, r.api_key.prefix if r.api_key else "", r.tier_asked,
               r.finished_at.astimezone(dt.UTC).date())
        sums[key][0] += 1
        sums[key][1] += r.prompt_tokens
        sums[key][2] += r.completion_tokens
    return [{"tenant_id": t, "key_prefix": k, "tier": tier, "day": day, "requests": n,
             "prompt_tokens": p, "completion_tokens": c, "api_key_id": key_ids.get(k)}
            for (t, k, tier, day), (n, p, c) in sums.items()]
