"""Housekeeping that needs no message to arrive: expiry at the deadline, resume after a
restart, deletion of expired files and results.

``sweep`` runs periodically (Celery beat in production, a thread in embedded mode). ``resume``
runs when the embedded worker starts: the in-memory broker lost every queued task with the
previous process, so whatever a batch still needs is re-enqueued from the database.
"""

from __future__ import annotations

import datetime as dt
import logging

from django.utils import timezone

from apps.batches import dispatch
from apps.batches.files import MIN_EXPIRY_S, files_delete_expired
from apps.batches.finalize import batch_finalize
from apps.batches.models import TERMINAL_STATUSES, Batch, BatchLine, BatchStatus
from apps.batches.services import batch_enqueue_chunks

logger = logging.getLogger(__name__)


def _open_batches():
    return Batch.objects.exclude(status__in=TERMINAL_STATUSES)


def sweep(*, now: dt.datetime | None = None) -> int:
    """Finalize every open batch past its deadline or left cancelling/finalizing (e.g. by a
    worker lost between two writes). Returns how many reached a terminal status."""
    now = now or timezone.now()
    due = _open_batches().filter(deadline_at__lte=now) | _open_batches().filter(
        status__in=[BatchStatus.CANCELLING, BatchStatus.FINALIZING])
    finished = 0
    for batch_id in due.values_list("pk", flat=True).distinct():
        try:
            batch = batch_finalize(batch_id=batch_id)
        except Exception:
            logger.exception("sweep could not finalize batch %s", batch_id)
            continue
        finished += bool(batch is not None and batch.is_terminal)
    return finished


def resume() -> int:
    """Re-enqueue the work of every open batch (embedded start). Returns the batches touched.

    Duplicates are harmless: validation and chunks skip what is already done.
    """
    sweep()
    count = 0
    for batch in _open_batches().order_by("id"):
        count += 1
        if batch.status == BatchStatus.VALIDATING:
            dispatch.after_commit(dispatch.validate, batch.pk)
        elif batch.status == BatchStatus.IN_PROGRESS:
            batch_enqueue_chunks(batch=batch)
        else:
            dispatch.after_commit(dispatch.finalize, batch.pk)
    if count:
        logger.info("resumed %d unfinished batches", count)
    return count


def cleanup(*, now: dt.datetime | None = None) -> tuple[int, int]:
    """Delete expired files, and the line results of finished batches whose output expiry
    (``output_expires_after``) has passed. The batch rows stay (history, SLO accounting).
    Returns (files deleted, lines deleted)."""
    now = now or timezone.now()
    files = files_delete_expired(now=now)
    candidates = Batch.objects.filter(
        finished_at__lte=now - dt.timedelta(seconds=MIN_EXPIRY_S),
        pk__in=BatchLine.objects.values("batch_id"))
    lines = 0
    for batch in candidates:
        if batch.finished_at + dt.timedelta(seconds=batch.output_expires_after_s) <= now:
            lines += batch.lines.all().delete()[0]
    return files, lines
