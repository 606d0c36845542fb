"""Batch writes: create, validate, start, cancel. Finalization lives in ``finalize.py``; running
lines through the engine in ``execution.py``.

Every state change is a conditional UPDATE on the current status, so two workers (a redelivered
task next to the original, the sweep next to a chunk) can never both make the same transition.
Tasks are enqueued after the transaction commits, so a worker never looks for a row that is not
there yet.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from collections.abc import Iterator
from typing import Any

from django.conf import settings
from django.db import DatabaseError, transaction
from django.utils import timezone

from apps.batches import enqueue
from apps.batches.files import batch_room_check, expiry_seconds, file_get, output_file_create
from apps.batches.models import (
    Batch,
    BatchFile,
    BatchLine,
    BatchStatus,
    LineStatus,
    could_be_id,
)
from apps.batches.reports import report_batch_state, report_line
from apps.batches.storage import content_lines
from apps.batches.validation import ENDPOINTS, InputLine, validate_input
from apps.batches.windows import window_deadline_s
from apps.core.errors import BadRequestError, NotFoundError
from apps.core.tiers import Tier
from apps.slo.selectors import contract_for
from apps.tenants.models import ApiKey, Tenant

logger = logging.getLogger(__name__)

CANCELLABLE = (BatchStatus.VALIDATING, BatchStatus.IN_PROGRESS)


def _check_metadata(metadata: Any) -> dict | None:
    if metadata is None:
        return None
    ok = isinstance(metadata, dict) and len(metadata) <= 16 and all(
        isinstance(k, str) and len(k) <= 64 and isinstance(v, str) and len(v) <= 512
        and "\x00" not in k + v for k, v in metadata.items())
    if not ok:
        raise BadRequestError("'metadata' takes at most 16 string pairs (keys up to 64 "
                              "characters, values up to 512, no NUL).", param="metadata",
                              code="invalid_value")
    return metadata


def batch_create(*, tenant: Tenant, api_key: ApiKey | None, input_file_id: Any, endpoint: Any,
                 completion_window: Any, metadata: Any = None,
                 output_expires_after: Any = None, created_by: Any = None,
                 validate_now: bool = False) -> Batch:
    """Accept a batch (status ``validating``) and enqueue its validation; with
    ``validate_now`` (the web page's upload) a file up to ``LASER_BATCH_INLINE_VALIDATE_BYTES``
    is validated before this returns, so the caller can show its line errors at once.

    400 naming the parameter for an unknown endpoint, a window the tenant's cold contract cannot
    promise, bad metadata, files leaving no room for its results (``batch_room_check``); 404
    for an input file the tenant does not have. ``created_by``: the signed-in user who started
    it without a key (its lines run as that user).
    """
    if not isinstance(endpoint, str) or endpoint not in ENDPOINTS:
        raise BadRequestError(f"'endpoint' must be one of {sorted(ENDPOINTS)}.",
                              param="endpoint", code="invalid_value")
    if not isinstance(input_file_id, str) or not input_file_id:
        raise BadRequestError("'input_file_id' must be a file id string (such as "
                              "'file-abc123').", param="input_file_id", code="invalid_type")
    input_file = file_get(tenant=tenant, file_id=input_file_id)
    if input_file.purpose != BatchFile.Purpose.BATCH:
        raise BadRequestError("The input file must have purpose 'batch'.",
                              param="input_file_id", code="invalid_value")
    contract = contract_for(tenant=tenant, tier=Tier.COLD)
    window_s = window_deadline_s(completion_window, contract=contract)
    batch_room_check(tenant=tenant, input_bytes=input_file.bytes)
    now = timezone.now()
    batch = Batch.objects.create(
        tenant=tenant, api_key=api_key, created_by=created_by, input_file=input_file,
        input_file_uid=input_file.uid,
        endpoint=endpoint, completion_window=completion_window.strip(),
        metadata=_check_metadata(metadata), contract_version_id=contract.version_id,
        output_expires_after_s=expiry_seconds(output_expires_after,
                                              param="output_expires_after"),
        deadline_at=now + dt.timedelta(seconds=window_s), progress_at=now,
    )
    report_batch_state(batch)
    if validate_now and input_file.bytes <= settings.LASER_BATCH_INLINE_VALIDATE_BYTES:
        transaction.on_commit(lambda: _validate_here(batch.pk))
        transaction.on_commit(batch.refresh_from_db)
    else:
        enqueue.after_commit(enqueue.validate, batch.pk)
    return batch


def _validate_here(batch_id: int) -> None:
    """Validate in this process (after commit); on a failure the control queue does it."""
    try:
        batch_validate(batch_id=batch_id)
    except Exception:
        logger.exception("validating batch %s at upload failed; enqueued instead", batch_id)
        enqueue.after_commit(enqueue.validate, batch_id)


def batch_get(*, tenant: Tenant, batch_id: str) -> Batch:
    found = Batch.objects.filter(tenant=tenant, uid=batch_id).first() \
        if could_be_id(batch_id) else None
    if found is None:
        raise NotFoundError(f"No such Batch object: {batch_id}", param="batch_id",
                            code="batch_not_found")
    return found


def batch_cancel(*, tenant: Tenant, batch_id: str) -> Batch:
    """Move a validating or running batch to ``cancelling``; the finalize task aborts what is
    in the engine, keeps what finished, and ends in ``cancelled``. Idempotent."""
    batch = batch_get(tenant=tenant, batch_id=batch_id)
    if batch.status in (BatchStatus.CANCELLING, BatchStatus.CANCELLED):
        return batch
    now = timezone.now()
    moved = Batch.objects.filter(pk=batch.pk, status__in=CANCELLABLE).update(
        status=BatchStatus.CANCELLING, cancelling_at=now)
    batch.refresh_from_db()
    if not moved:
        raise BadRequestError(f"Cannot cancel a batch with status '{batch.status}'.",
                              param="batch_id", code="batch_not_cancellable")
    report_batch_state(batch)
    enqueue.after_commit(enqueue.finalize, batch.pk)
    return batch


# --- validation (run by the validate task) -------------------------------------------------


def batch_validate(*, batch_id: int) -> Batch | None:
    """Validate a ``validating`` batch: fail it with file-level errors, or store its lines and
    start it. Safe to run twice (lines are inserted with ``ignore_conflicts``)."""
    batch = Batch.objects.select_related("tenant", "api_key").filter(pk=batch_id).first()
    if batch is None or batch.status != BatchStatus.VALIDATING:
        return batch
    present = BatchFile.objects.filter(pk=batch.input_file_id).exists()
    contract = contract_for(tenant=batch.tenant, tier=Tier.COLD)
    if not present or contract is None:
        why = "No cold contract." if present else "The input file was deleted."
        return _fail(batch, [{"code": "invalid_file", "message": why, "param": None,
                              "line": None}])
    def progress(checked: int) -> None:  # request_counts.total counts the lines checked
        Batch.objects.filter(pk=batch.pk, status=BatchStatus.VALIDATING).update(
            request_counts=_counts(checked), progress_at=timezone.now())

    try:
        result = validate_input(content_lines(batch.input_file_id), endpoint=batch.endpoint,
                                tenant=batch.tenant, contract=contract, progress=progress)
    except DatabaseError:
        raise  # transient: the task fails and the sweep re-dispatches the batch
    except Exception:  # a bug must fail the batch visibly, not leave it validating for a day
        logger.exception("validating batch %s failed", batch.uid)
        return _fail(batch, [{"code": "invalid_file", "message": "The input file could not be "
                              "validated (a server error, logged).", "param": None,
                              "line": None}])
    if not result.ok:
        return _fail(batch, result.errors)
    return _start(batch, result.lines)


def _counts(total: int) -> dict[str, int]:
    return {"total": total, "completed": 0, "failed": 0}


def _error_lines(errors: list[dict]) -> Iterator[bytes]:
    """The error file of a batch that failed validation: one line per error, in the output
    line shape (``error`` also names the input ``line`` and ``param``)."""
    for error in errors:
        yield json.dumps({"id": None, "custom_id": error.get("custom_id"), "response": None,
                          "error": error}, separators=(",", ":")).encode() + b"\n"


def _fail(batch: Batch, errors: list[dict]) -> Batch:
    now = timezone.now()
    with transaction.atomic():
        moved = Batch.objects.filter(pk=batch.pk, status=BatchStatus.VALIDATING).update(
            status=BatchStatus.FAILED, failed_at=now, finished_at=now, request_counts=_counts(0),
            errors={"object": "list", "data": errors})
        if moved:
            error_file = output_file_create(
                tenant=batch.tenant, filename=f"{batch.uid}_error.jsonl",
                lines=_error_lines(errors), ttl_s=batch.output_expires_after_s)
            Batch.objects.filter(pk=batch.pk).update(error_file=error_file)
    batch.refresh_from_db()
    if batch.status == BatchStatus.CANCELLING:
        enqueue.after_commit(enqueue.finalize, batch.pk)
    report_batch_state(batch)
    return batch


def _line_row(batch: Batch, line: InputLine, now: dt.datetime) -> BatchLine:
    row = BatchLine(batch=batch, line_no=line.line_no, custom_id=line.custom_id, body=line.body)
    if line.refusal is not None:
        row.status = LineStatus.FAILED
        row.finished_at = now
        row.response = {"status_code": line.refusal.status, "request_id": row.request_id,
                        "body": line.refusal.body()}
    return row


def _start(batch: Batch, lines: list[InputLine]) -> Batch:
    now = timezone.now()
    rows = [_line_row(batch, line, now) for line in lines]
    with transaction.atomic():
        BatchLine.objects.bulk_create(rows, ignore_conflicts=True, batch_size=500)
        moved = Batch.objects.filter(pk=batch.pk, status=BatchStatus.VALIDATING).update(
            status=BatchStatus.IN_PROGRESS, in_progress_at=now, progress_at=now,
            model=_model_of(lines), request_counts=None)
    batch.refresh_from_db()
    for row in rows:
        if row.status == LineStatus.FAILED and moved:
            report_line(batch, row, outcome="rejected_400",
                        error_code=str(row.response["body"]["error"].get("code") or ""))
    report_batch_state(batch)
    if batch.status == BatchStatus.IN_PROGRESS:
        if moved:  # a second validation (a duplicate message) queues no second turn
            batch_enqueue_chunks(batch=batch)
    else:  # cancelled while validating
        enqueue.after_commit(enqueue.finalize, batch.pk)
    return batch


def _model_of(lines: list[InputLine]) -> str | None:
    """The batch's ``model``: that of the first line's body (kept past cleanup)."""
    model = lines[0].body.get("model") if lines and isinstance(lines[0].body, dict) else None
    return model[:256] if isinstance(model, str) else None


def batch_touch(*, batch_id: int) -> None:
    """Mark that work for the batch was enqueued or made progress (see ``sweep.redispatch``)."""
    Batch.objects.filter(pk=batch_id).update(progress_at=timezone.now())


def split_ranges(line_nos: list[int], parts: int) -> list[tuple[int, int]]:
    """Split sorted line numbers into at most ``parts`` inclusive ``(first, last)`` ranges of
    nearly equal counts."""
    size = -(-len(line_nos) // max(1, parts))
    return [(line_nos[i], line_nos[min(i + size, len(line_nos)) - 1])
            for i in range(0, len(line_nos), size)] if line_nos else []


def batch_enqueue_chunks(*, batch: Batch) -> int:
    """Enqueue the batch's next turns: one chunk task over its pending lines (or
    ``LASER_BATCH_PARALLEL_TURNS`` over as many parts of them), each running the first
    ``LASER_BATCH_CHUNK_LINES`` lines of its range and enqueueing the rest behind the other
    batches (start, and resume after a restart); with no pending line, enqueue finalization.
    Returns the number of chunk tasks enqueued."""
    pending = list(batch.lines.filter(status=LineStatus.PENDING)
                   .order_by("line_no").values_list("line_no", flat=True))
    ranges = split_ranges(pending, settings.LASER_BATCH_PARALLEL_TURNS)
    for first, last in ranges:
        enqueue.after_commit(enqueue.chunk, batch.pk, first, last)
    if ranges:
        batch_touch(batch_id=batch.pk)
    else:
        enqueue.after_commit(enqueue.finalize, batch.pk)
    return len(ranges)
