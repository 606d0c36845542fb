"""Ending a batch, exactly once: ``completed`` when every line is done, ``expired`` at the
deadline, ``cancelled`` after a cancel. Unfinished lines go to the error file (``batch_expired``
/ ``batch_cancelled``); finished ones are kept. Output and error files use OpenAI's line format.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

from django.db import transaction
from django.db.models import QuerySet, Sum
from django.utils import timezone

from apps.batches.files import output_file_create
from apps.batches.models import TERMINAL_STATUSES, Batch, BatchLine, BatchStatus, LineStatus
from apps.batches.reports import report_batch_state, report_line
from apps.batches.selectors import live_request_counts

logger = logging.getLogger(__name__)

_ABANDONED = {
    BatchStatus.EXPIRED: (LineStatus.EXPIRED, "batch_expired",
                          "This request could not be executed before the completion window "
                          "expired."),
    BatchStatus.CANCELLED: (LineStatus.CANCELLED, "batch_cancelled",
                            "This request was not executed because the batch was cancelled."),
}
_STAMP = {BatchStatus.COMPLETED: "completed_at", BatchStatus.EXPIRED: "expired_at",
          BatchStatus.CANCELLED: "cancelled_at"}


def _outcome(batch: Batch, has_pending: bool) -> str | None:
    """The terminal status ``batch`` should reach now, or None while it still has work."""
    if batch.status == BatchStatus.CANCELLING:
        return BatchStatus.CANCELLED
    if batch.status not in (BatchStatus.VALIDATING, BatchStatus.IN_PROGRESS,
                            BatchStatus.FINALIZING):
        return None
    if has_pending or batch.status == BatchStatus.VALIDATING:
        return BatchStatus.EXPIRED if batch.deadline_at <= timezone.now() else None
    return BatchStatus.COMPLETED


def output_line(line: BatchLine) -> dict:
    """A line of the output or error file, joined to the input on ``custom_id``."""
    return {"id": line.request_id, "custom_id": line.custom_id, "response": line.response,
            "error": line.error}


def _jsonl(lines: QuerySet[BatchLine]) -> Iterator[bytes]:
    for line in lines.iterator(chunk_size=500):
        yield json.dumps(output_line(line), separators=(",", ":")).encode() + b"\n"


def _write_files(batch: Batch) -> None:
    """The output and error files, written line by line as the rows are read."""
    done = batch.lines.exclude(status=LineStatus.PENDING).order_by("line_no")
    ok, bad = done.filter(status=LineStatus.SUCCEEDED), done.exclude(status=LineStatus.SUCCEEDED)
    ttl = batch.output_expires_after_s
    if ok.exists():
        batch.output_file = output_file_create(
            tenant=batch.tenant, filename=f"{batch.uid}_output.jsonl", lines=_jsonl(ok),
            ttl_s=ttl)
    if bad.exists():
        batch.error_file = output_file_create(
            tenant=batch.tenant, filename=f"{batch.uid}_error.jsonl", lines=_jsonl(bad),
            ttl_s=ttl)
    sums = ok.aggregate(prompt=Sum("prompt_tokens"), completion=Sum("completion_tokens"))
    prompt, completion = sums["prompt"] or 0, sums["completion"] or 0
    batch.usage = {"input_tokens": prompt, "input_tokens_details": {"cached_tokens": 0},
                   "output_tokens": completion, "output_tokens_details": {"reasoning_tokens": 0},
                   "total_tokens": prompt + completion}


def batch_finalize(*, batch_id: int) -> Batch | None:
    """Bring ``batch_id`` to its terminal status if its work has ended; a no-op otherwise and
    when already terminal. Concurrent calls are safe: the row is locked and re-read."""
    batch = Batch.objects.filter(pk=batch_id).first()
    if batch is None or batch.status in TERMINAL_STATUSES:
        return batch
    has_pending = batch.lines.filter(status=LineStatus.PENDING).exists()
    if _outcome(batch, has_pending) == BatchStatus.COMPLETED:
        # Visible while the files are written (OpenAI's ``finalizing``).
        Batch.objects.filter(pk=batch_id, status=BatchStatus.IN_PROGRESS).update(
            status=BatchStatus.FINALIZING, finalizing_at=timezone.now())
    abandoned: list[BatchLine] = []
    with transaction.atomic():
        batch = Batch.objects.select_for_update().select_related("tenant").get(pk=batch_id)
        pending = batch.lines.filter(status=LineStatus.PENDING)
        outcome = _outcome(batch, pending.exists())
        if outcome is None:
            return batch
        if outcome in _ABANDONED:
            abandoned = _abandon(batch, outcome)
        _write_files(batch)
        batch.request_counts = live_request_counts(batch)  # outlives the lines (cleanup)
        now = timezone.now()
        batch.status = outcome
        setattr(batch, _STAMP[outcome], now)
        batch.finished_at = now
        batch.save()
    for line in abandoned:
        report_line(batch, line, outcome="expired" if outcome == BatchStatus.EXPIRED
                    else "cancelled", error_code=line.error["code"])
    report_batch_state(batch, batch.request_counts)
    logger.info("batch %s %s", batch.uid, outcome)
    return batch


def _abandon(batch: Batch, outcome: str) -> list[BatchLine]:
    status, code, message = _ABANDONED[outcome]
    now = timezone.now()
    lines = list(batch.lines.filter(status=LineStatus.PENDING))
    error = {"code": code, "message": message}
    BatchLine.objects.filter(pk__in=[x.pk for x in lines], status=LineStatus.PENDING).update(
        status=status, error=error, finished_at=now)
    for line in lines:
        line.status, line.error, line.finished_at = status, error, now
    return lines
