"""Files API services and selectors: upload, list, read, delete; expiry of old files."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.conf import settings
from django.utils import timezone

from apps.batches.models import BatchFile, could_be_id
from apps.tenants.models import Tenant
from laser_platform.errors import BadRequestError, NotFoundError, RequestTooLargeError

MIN_EXPIRY_S = 3600
MAX_EXPIRY_S = 30 * 24 * 3600


def expiry_seconds(value: Any, *, param: str) -> int:
    """Seconds from an OpenAI ``{"anchor": "created_at", "seconds": n}`` policy (or the default).

    Raises 400 naming ``param`` for anything else, as OpenAI does (1 hour to 30 days).
    """
    if value is None:
        return settings.LASER_BATCH_FILE_TTL_S
    if not isinstance(value, dict) or value.get("anchor") != "created_at":
        raise BadRequestError(f"'{param}' must be {{'anchor': 'created_at', 'seconds': n}}.",
                              param=param, code="invalid_value")
    seconds = value.get("seconds")
    if isinstance(seconds, str) and seconds.isdigit():
        seconds = int(seconds)  # multipart form fields arrive as strings
    if isinstance(seconds, bool) or not isinstance(seconds, int) or not (
            MIN_EXPIRY_S <= seconds <= MAX_EXPIRY_S):
        raise BadRequestError(f"'{param}.seconds' must be an integer between {MIN_EXPIRY_S} and "
                              f"{MAX_EXPIRY_S}.", param=f"{param}.seconds", code="invalid_value")
    return seconds


def file_create(*, tenant: Tenant, filename: str, content: bytes, purpose: str,
                expires_after_s: int | None = None) -> BatchFile:
    """Store an uploaded file. Only ``purpose=batch`` is accepted (this server has no other
    API that reads files); size over ``LASER_BATCH_MAX_FILE_BYTES`` is a 413."""
    if purpose != BatchFile.Purpose.BATCH:
        raise BadRequestError(f"Invalid purpose '{purpose}': this server accepts 'batch' only.",
                              param="purpose", code="invalid_value")
    limit = settings.LASER_BATCH_MAX_FILE_BYTES
    if len(content) > limit:
        raise RequestTooLargeError(f"File is {len(content)} bytes; the limit is {limit} bytes.",
                                   param="file")
    if not content:
        raise BadRequestError("The file is empty.", param="file", code="empty_file")
    ttl = expires_after_s if expires_after_s is not None else settings.LASER_BATCH_FILE_TTL_S
    return BatchFile.objects.create(
        tenant=tenant, filename=filename.replace("\x00", "")[:255] or "upload.jsonl",
        purpose=purpose,
        bytes=len(content), content=content,
        expires_at=timezone.now() + dt.timedelta(seconds=ttl),
    )


def output_file_create(*, tenant: Tenant, filename: str, content: bytes,
                       ttl_s: int) -> BatchFile:
    """A generated output or error file (purpose ``batch_output``)."""
    return BatchFile.objects.create(
        tenant=tenant, filename=filename, purpose=BatchFile.Purpose.BATCH_OUTPUT,
        bytes=len(content), content=content,
        expires_at=timezone.now() + dt.timedelta(seconds=ttl_s),
    )


def file_get(*, tenant: Tenant, file_id: str) -> BatchFile:
    """The tenant's live file ``file_id``; another tenant's or an expired file is a 404."""
    found = (BatchFile.objects.defer("content").filter(tenant=tenant, uid=file_id).first()
             if could_be_id(file_id) else None)
    if found is None or _expired(found):
        raise NotFoundError(f"No such File object: {file_id}", param="id", code="file_not_found")
    return found


def file_content(*, tenant: Tenant, file_id: str) -> bytes:
    found = file_get(tenant=tenant, file_id=file_id)
    return bytes(BatchFile.objects.values_list("content", flat=True).get(pk=found.pk))


def file_delete(*, tenant: Tenant, file_id: str) -> str:
    found = file_get(tenant=tenant, file_id=file_id)
    found.delete()
    return file_id


def files_list(*, tenant: Tenant, purpose: str | None = None, after: str | None = None,
               limit: int = 10_000, order: str = "desc") -> tuple[list[BatchFile], bool]:
    """A page of the tenant's live files and whether more follow (cursor ``after``)."""
    rows = BatchFile.objects.defer("content").filter(tenant=tenant).exclude(
        expires_at__lte=timezone.now())
    if purpose:
        rows = rows.filter(purpose=purpose) if purpose in BatchFile.Purpose.values else rows.none()
    rows = rows.order_by("id" if order == "asc" else "-id")
    if after:
        anchor = BatchFile.objects.filter(tenant=tenant, uid=after).values_list("id", flat=True)
        anchor_id = anchor.first() if could_be_id(after) else None
        if anchor_id is None:
            raise NotFoundError(f"No such File object: {after}", param="after")
        rows = rows.filter(id__gt=anchor_id) if order == "asc" else rows.filter(id__lt=anchor_id)
    page = list(rows[: limit + 1])
    return page[:limit], len(page) > limit


def files_delete_expired(*, now: dt.datetime | None = None) -> int:
    """Delete every file past its ``expires_at`` (periodic cleanup). Returns how many."""
    deleted, _ = BatchFile.objects.filter(expires_at__lte=now or timezone.now()).delete()
    return deleted


def _expired(found: BatchFile) -> bool:
    return found.expires_at is not None and found.expires_at <= timezone.now()
