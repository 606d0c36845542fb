"""Celery tasks of the cold tier. Thin: they take ids, re-fetch, and call services.

Every task here is idempotent (state checks and conditional writes), so all of them are
``acks_late`` with ``reject_on_worker_lost``: a worker that dies mid-task leaves the message
unacked and the broker hands it to another worker (Redis: after the visibility timeout, which
``laser_platform/settings/batches.py`` keeps above the chunk's hard time limit).
"""

from __future__ import annotations

import logging
import math
import time

from celery import shared_task
from django.conf import settings

from apps.batches import sweep as sweeping
from apps.batches.execution import DB_DOWN, chunk_run
from apps.batches.finalize import batch_finalize
from apps.batches.services import batch_touch, batch_validate
from inference.errors import EngineUnavailable

logger = logging.getLogger(__name__)

_SAFE = {"acks_late": True, "reject_on_worker_lost": True, "ignore_result": True}
# A turn handed back for a rate window comes back at most this late: Redis holds a message with
# a countdown unacked in the worker, so it must stay well under the visibility timeout.
MAX_COUNTDOWN_S = 300


@shared_task(name="batches.validate", **_SAFE)
def validate_batch(batch_id: int) -> None:
    batch_validate(batch_id=batch_id)


@shared_task(
    name="batches.chunk", bind=True, max_retries=None,
    soft_time_limit=None, time_limit=settings.LASER_BATCH_CHUNK_HARD_LIMIT_S, **_SAFE,
)
def run_chunk(self, batch_id: int, first: int, last: int) -> None:
    """Run one turn of lines ``first..last``; enqueue the next turn at the back of the queue
    (after its rate window, if the tenant must wait); finalize when none is left.

    The next turn is the batch's only message: when the broker refuses it (Redis restarting),
    this task runs the next turns itself, trying the hand-over after each, for up to the soft
    limit; past that the sweep re-enqueues the batch. The engine or the database away: the chunk
    runs again later (a failed task would be acked and its lines left to the sweep); the lines
    it wrote are skipped then."""
    started = time.monotonic()
    try:
        while True:
            result = chunk_run(batch_id=batch_id, first=first, last=last)
            if result.next_first is None:
                batch_finalize(batch_id=batch_id)
                return
            batch_touch(batch_id=batch_id)
            countdown = min(math.ceil(result.resume_in), MAX_COUNTDOWN_S)
            if _hand_over(batch_id, result.next_first, last, countdown):
                return
            if time.monotonic() - started > settings.LASER_BATCH_CHUNK_SOFT_LIMIT_S:
                logger.error("batch %s: its next turn could not be enqueued; the sweep will "
                             "re-enqueue it", batch_id)
                return
            time.sleep(max(countdown, 1))  # the broker is away: nothing else can run either
            first = result.next_first
    except EngineUnavailable as exc:
        logger.warning("engine unavailable for batch %s; retrying chunk", batch_id)
        raise self.retry(exc=exc, countdown=5) from exc
    except DB_DOWN as exc:
        logger.warning("database unavailable for batch %s (%s); retrying chunk", batch_id, exc)
        raise self.retry(exc=exc, countdown=2) from exc


def _hand_over(batch_id: int, first: int, last: int, countdown: int) -> bool:
    """Enqueue the batch's next turn now (a task runs outside any transaction)."""
    from apps.batches import enqueue

    if countdown > 0:
        return enqueue.sent(enqueue.chunk_later, batch_id, first, last, countdown)
    return enqueue.sent(enqueue.chunk, batch_id, first, last)


@shared_task(name="batches.finalize", **_SAFE)
def finalize_batch(batch_id: int) -> None:
    batch_finalize(batch_id=batch_id)


@shared_task(name="batches.sweep", **_SAFE)
def sweep() -> None:
    """Periodic: expire batches past their deadline, finish stuck ones, re-enqueue the work
    of stalled ones."""
    sweeping.sweep()


@shared_task(name="batches.cleanup", **_SAFE)
def cleanup() -> None:
    """Periodic: delete files and line results past their expiry."""
    sweeping.cleanup()
