"""Retention: raw request records older than ``LASER_SLO_RETENTION_DAYS`` are pruned, after
their windows (and usage) have been materialised, so aggregates outlive the records."""

from __future__ import annotations

import datetime as dt

from django.conf import settings
from django.utils import timezone

from apps.slo import fulfilment, windows
from apps.slo.models import BatchRecord, RequestRecord
from apps.slo.selectors import aggregated_through


def cutoff(now: dt.datetime) -> dt.datetime:
    days = float(getattr(settings, "LASER_SLO_RETENTION_DAYS", 7.0))
    # Whole days only: a day window is never left with half its records.
    return windows.floor(now - dt.timedelta(days=days), "day")


def prune(*, now: dt.datetime | None = None) -> dict[str, int]:
    """Materialise what is due, then delete records (and finished jobs) before the cutoff."""
    now = now or timezone.now()
    fulfilment.materialise(now=now)
    day_mark = aggregated_through("day")
    if day_mark is None:
        return {"records": 0, "batches": 0}
    limit = min(cutoff(now), day_mark)  # never delete what the day windows have not absorbed
    records, _ = RequestRecord.objects.filter(finished_at__lt=limit).delete()
    batches, _ = BatchRecord.objects.filter(deadline__lt=limit,
                                            finished_at__isnull=False).delete()
    return {"records": records, "batches": batches}
