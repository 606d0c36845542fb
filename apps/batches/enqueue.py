"""Enqueueing batch tasks. Services call these instead of importing the task module, and always
after commit (``after_commit``), so a worker never races the transaction that made the work.
Tasks are sent by their registered names (``tasks.py``), so producers never import the workers'
code (which imports the services: a cycle).

A failed enqueue (broker down) is logged, not raised: the periodic sweep (``tasks.sweep``, once a
batch has seen no task for ``LASER_BATCH_STALL_S``) and the resume at an embedded start
re-enqueue whatever a batch still needs, from the database.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from celery import current_app
from django.db import transaction

logger = logging.getLogger(__name__)


def after_commit(send: Callable[..., None], *args: int) -> None:
    transaction.on_commit(lambda: _safely(send, *args))


def _safely(send: Callable[..., None], *args: int) -> None:
    sent(send, *args)


def sent(send: Callable[..., None], *args: int) -> bool:
    """Send now; False (logged) when the broker refused it."""
    try:
        send(*args)
    except Exception:
        logger.exception("could not enqueue %s%r; the sweep will retry", send.__name__, args)
        return False
    return True


def _send(task: str, *args: int, countdown: int = 0) -> None:
    options: dict = {"ignore_result": True}
    if countdown > 0:
        options["countdown"] = countdown
    current_app.signature(task, args=args, options=options).delay()


def validate(batch_id: int) -> None:
    _send("batches.validate", batch_id)


def chunk(batch_id: int, first: int, last: int) -> None:
    _send("batches.chunk", batch_id, first, last)


def chunk_later(batch_id: int, first: int, last: int, countdown: int) -> None:
    """A chunk due in ``countdown`` seconds (a tenant waiting for its rate window)."""
    _send("batches.chunk", batch_id, first, last, countdown=countdown)


def finalize(batch_id: int) -> None:
    _send("batches.finalize", batch_id)
