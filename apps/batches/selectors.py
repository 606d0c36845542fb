"""Batch reads: live request counts, list pages, and the views the SLO app shows.

``request_counts`` are computed from the lines on every read while a batch runs, so they are
live and can never drift from the results: ``completed`` = lines that succeeded, ``failed`` =
lines refused, failed, expired or cancelled, ``total`` = every request line. Finalization stores
the final counts on the batch row, and a finished batch reads those (cleanup deletes its lines).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass

from django.db.models import Count
from django.utils import timezone

from apps.batches.models import Batch, BatchLine, LineStatus, could_be_id
from apps.core.errors import NotFoundError
from apps.tenants.models import Tenant


def _fold(rows: Iterable[tuple[str, int]]) -> dict[str, int]:
    counts = {"total": 0, "completed": 0, "failed": 0}
    for status, n in rows:
        counts["total"] += n
        if status == LineStatus.SUCCEEDED:
            counts["completed"] += n
        elif status != LineStatus.PENDING:
            counts["failed"] += n
    return counts


def live_request_counts(batch: Batch) -> dict[str, int]:
    """Counted from the lines now (finalization stores this on the batch)."""
    rows = (BatchLine.objects.filter(batch_id=batch.pk).values_list("status")
            .annotate(n=Count("id")).order_by())
    return _fold(rows)


def request_counts(batch: Batch) -> dict[str, int]:
    """The counts stored at finalization, or live ones while the batch is unfinished."""
    if batch.request_counts is not None:
        return dict(batch.request_counts)
    return live_request_counts(batch)


def request_counts_many(batches: list[Batch]) -> dict[int, dict[str, int]]:
    """``request_counts`` for many batches, by pk, in at most one query (list pages)."""
    counted = {b.pk: dict(b.request_counts) for b in batches if b.request_counts is not None}
    grouped: dict[int, list[tuple[str, int]]] = {
        b.pk: [] for b in batches if b.pk not in counted}
    rows = (BatchLine.objects.filter(batch_id__in=list(grouped))
            .values_list("batch_id", "status").annotate(n=Count("id")).order_by())
    for batch_id, status, n in rows:  # no query when every batch was counted
        grouped[batch_id].append((status, n))
    return counted | {pk: _fold(rows) for pk, rows in grouped.items()}


def batches_list(*, tenant: Tenant, after: str | None = None,
                 limit: int = 20) -> tuple[list[Batch], bool]:
    """The tenant's batches, newest first, after the cursor ``after``; and whether more follow."""
    rows = Batch.objects.filter(tenant=tenant).order_by("-id")
    if after:
        anchor = Batch.objects.filter(tenant=tenant, uid=after if could_be_id(after) else "")
        anchor = anchor.values_list("id", flat=True)
        anchor_id = anchor.first()
        if anchor_id is None:
            raise NotFoundError(f"No such Batch object: {after}", param="after")
        rows = rows.filter(id__lt=anchor_id)
    page = list(rows[: limit + 1])
    return page[:limit], len(page) > limit


@dataclass(frozen=True, slots=True)
class BatchProgress:
    """One batch as the dashboard and ``batch_status`` show it."""

    id: str
    status: str
    endpoint: str
    total: int
    completed: int
    failed: int
    created_at: dt.datetime
    deadline_at: dt.datetime
    finished_at: dt.datetime | None
    on_time: bool | None

    @property
    def done(self) -> int:
        return self.completed + self.failed

    @property
    def fraction(self) -> float:
        """Share of lines that reached a final state (1.0 for an empty finished batch)."""
        if self.total == 0:
            return 1.0 if self.finished_at else 0.0
        return self.done / self.total

    @property
    def seconds_left(self) -> float:
        return (self.deadline_at - timezone.now()).total_seconds()


def progress_of(batch: Batch, counts: dict[str, int] | None = None) -> BatchProgress:
    counts = counts or request_counts(batch)
    return BatchProgress(batch.uid, batch.status, batch.endpoint, counts["total"],
                         counts["completed"], counts["failed"], batch.created_at,
                         batch.deadline_at, batch.finished_at, batch.on_time)


def batches_for_dashboard(*, tenant: Tenant, limit: int = 20) -> list[BatchProgress]:
    """The tenant's latest batches with live progress, newest first (SLO dashboard)."""
    batches = list(Batch.objects.filter(tenant=tenant).order_by("-id")[:limit])
    counts = request_counts_many(batches)
    return [progress_of(b, counts[b.pk]) for b in batches]
