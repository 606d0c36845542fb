"""API objects in OpenAI's shapes (``openai.types.FileObject``, ``Batch``), from model rows."""

from __future__ import annotations

import datetime as dt
from typing import Any

from apps.batches.models import Batch, BatchFile
from apps.batches.selectors import request_counts


def _ts(value: dt.datetime | None) -> int | None:
    return None if value is None else int(value.timestamp())


def file_object(found: BatchFile) -> dict[str, Any]:
    return {
        "id": found.uid, "object": "file", "bytes": found.bytes,
        "created_at": _ts(found.created_at), "expires_at": _ts(found.expires_at),
        "filename": found.filename, "purpose": found.purpose, "status": "processed",
        "status_details": None,
    }


def batch_object(batch: Batch, counts: dict[str, int] | None = None) -> dict[str, Any]:
    counts = counts or request_counts(batch)
    errors = batch.errors if batch.errors else None
    return {
        "id": batch.uid, "object": "batch", "endpoint": batch.endpoint,
        "errors": errors, "input_file_id": batch.input_file_uid,
        "completion_window": batch.completion_window, "status": batch.status,
        "output_file_id": batch.output_file.uid if batch.output_file_id else None,
        "error_file_id": batch.error_file.uid if batch.error_file_id else None,
        "created_at": _ts(batch.created_at), "in_progress_at": _ts(batch.in_progress_at),
        "expires_at": _ts(batch.deadline_at), "finalizing_at": _ts(batch.finalizing_at),
        "completed_at": _ts(batch.completed_at), "failed_at": _ts(batch.failed_at),
        "expired_at": _ts(batch.expired_at), "cancelling_at": _ts(batch.cancelling_at),
        "cancelled_at": _ts(batch.cancelled_at),
        "request_counts": counts, "metadata": batch.metadata, "usage": batch.usage,
        "model": batch.model,
    }


def list_object(data: list[dict[str, Any]], has_more: bool) -> dict[str, Any]:
    return {"object": "list", "data": data, "has_more": has_more,
            "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None}
