"""Housekeeping that needs no message to arrive: expiry at the deadline, re-enqueueing the work
of stalled batches, resume after a restart, deletion of expired files and results.

``sweep`` runs periodically (Celery beat in production, a thread in embedded mode). Besides
finalizing, it re-enqueues the work of an open batch that no task touched for
``LASER_BATCH_STALL_S`` (``redispatch``): a chunk message can be gone for good (an enqueue that
failed after commit, a chunk Celery acked at its hard time limit), and nothing else would send
those lines again before the deadline. ``resume`` runs when the embedded worker starts: the
in-memory broker lost every queued task with the previous process, so whatever a batch still
needs is re-enqueued from the database at once.
"""

from __future__ import annotations

import datetime as dt
import logging

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from apps.batches import enqueue
from apps.batches.files import MIN_EXPIRY_S, files_delete_expired
from apps.batches.finalize import batch_finalize
from apps.batches.models import TERMINAL_STATUSES, Batch, BatchLine, BatchStatus
from apps.batches.services import batch_enqueue_chunks

logger = logging.getLogger(__name__)


def _open_batches():
    return Batch.objects.exclude(status__in=TERMINAL_STATUSES)


def sweep(*, now: dt.datetime | None = None) -> int:
    """Finalize every open batch past its deadline or left cancelling/finalizing (e.g. by a
    worker lost between two writes), then ``redispatch`` stalled ones. Returns how many
    reached a terminal status."""
    now = now or timezone.now()
    finished = _finalize_due(now)
    redispatch(now=now)
    return finished


def _finalize_due(now: dt.datetime) -> int:
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


def _stalled(cutoff: dt.datetime) -> Q:
    return Q(progress_at__lt=cutoff) | Q(progress_at__isnull=True)


def redispatch(*, now: dt.datetime | None = None) -> int:
    """Re-enqueue the work of validating or running batches, before their deadline, that no
    task enqueued or ran for ``LASER_BATCH_STALL_S``: validation, or chunks for the pending
    lines (finalization when none is left). At most ``LASER_BATCH_SWEEP_REDISPATCH`` batches per
    call, oldest first, found on the ``(status, progress_at)`` index. Returns the batches
    re-enqueued.

    The bound exceeds the Redis visibility timeout, so a killed worker's chunk is redelivered by
    the broker first; a live chunk refreshes ``progress_at`` while it runs. A queue backed up
    past the bound gets one duplicate per batch per bound; duplicates are harmless (results are
    written once per line, a chunk skips lines already done).
    """
    now = now or timezone.now()
    cutoff = now - dt.timedelta(seconds=settings.LASER_BATCH_STALL_S)
    candidates = list(
        Batch.objects.filter(_stalled(cutoff),
                             status__in=[BatchStatus.VALIDATING, BatchStatus.IN_PROGRESS],
                             deadline_at__gt=now)
        .order_by("progress_at").values_list("pk", flat=True)
        [: settings.LASER_BATCH_SWEEP_REDISPATCH])
    count = 0
    for batch_id in candidates:
        # Claimed by a conditional update: two sweeps never both re-enqueue one batch.
        if not Batch.objects.filter(_stalled(cutoff), pk=batch_id).update(progress_at=now):
            continue
        batch = Batch.objects.filter(pk=batch_id).first()
        if batch is None or batch.status not in (BatchStatus.VALIDATING,
                                                 BatchStatus.IN_PROGRESS):
            continue
        try:
            if batch.status == BatchStatus.VALIDATING:
                enqueue.after_commit(enqueue.validate, batch.pk)
            else:
                batch_enqueue_chunks(batch=batch)
        except Exception:
            logger.exception("sweep could not re-enqueue batch %s", batch_id)
            continue
        count += 1
        logger.warning("batch %s stalled (%s); re-enqueued its work", batch.uid, batch.status)
    return count


def resume() -> int:
    """Re-enqueue the work of every open batch (embedded start). Returns the batches touched.

    Duplicates are harmless: validation and chunks skip what is already done.
    """
    _finalize_due(timezone.now())
    count = 0
    for batch in _open_batches().order_by("id"):
        count += 1
        if batch.status == BatchStatus.VALIDATING:
            enqueue.after_commit(enqueue.validate, batch.pk)
        elif batch.status == BatchStatus.IN_PROGRESS:
            batch_enqueue_chunks(batch=batch)
        else:
            enqueue.after_commit(enqueue.finalize, batch.pk)
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
