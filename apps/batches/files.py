"""Files API services and selectors: upload, list, read, delete; expiry of old files."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Iterator
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Sum
from django.utils import timezone

from apps.batches.models import BatchFile, could_be_id
from apps.batches.storage import content_chunks, parts_write
from apps.core.errors import BadRequestError, NotFoundError, RequestTooLargeError
from apps.tenants.models import Tenant

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


def tenant_storage_used(*, tenant: Tenant) -> int:
    """Bytes of the tenant's live files (uploads and generated output/error files)."""
    rows = BatchFile.objects.filter(tenant=tenant).exclude(expires_at__lte=timezone.now())
    return rows.aggregate(used=Sum("bytes"))["used"] or 0


def storage_quota_check(*, tenant: Tenant, size: int, what: str = "") -> None:
    """400 ``storage_quota_exceeded`` when ``size`` more bytes would pass the tenant's quota
    (its plan's ``max_storage_bytes``); the message states the bytes in use, the quota and
    ``what`` is being added."""
    from apps.tenants.plans import tenant_limits

    quota = tenant_limits(tenant).max_storage_bytes
    used = tenant_storage_used(tenant=tenant)
    if used + size > quota:
        what = what or f"This file ({size} bytes)"
        raise BadRequestError(
            f"{what} would exceed your file storage quota: {used} of {quota} "
            f"bytes are in use ({max(0, quota - used)} free; batch output and error files "
            "count). Delete files you no longer need (DELETE /v1/files/{file_id}) or wait for "
            "them to expire.", param="file", code="storage_quota_exceeded")


def batch_room_check(*, tenant: Tenant, input_bytes: int) -> None:
    """400 ``storage_quota_exceeded`` before a batch runs when the tenant's files leave no room
    for its results: a batch starts only while the files in use plus its input's size are
    within the quota. Its output and error files are then always written, even past the quota
    (the headroom of docs/batches.md): results are never dropped for a full quota."""
    storage_quota_check(tenant=tenant, size=input_bytes,
                        what=f"This batch's results (room for at least its input's "
                             f"{input_bytes} bytes)")


def file_create(*, tenant: Tenant, filename: str, content: bytes | Iterable[bytes],
                purpose: str, expires_after_s: int | None = None,
                size: int | None = None) -> BatchFile:
    """Store an uploaded file, ``content`` as bytes or as chunks of ``size`` bytes in all.

    Only ``purpose=batch`` is accepted (this server has no other API that reads files); over
    ``LASER_BATCH_MAX_FILE_BYTES`` is a 413 (on the declared size before a byte is stored, and
    again while the chunks arrive); over the tenant plan's ``max_storage_bytes`` a 400
    ``storage_quota_exceeded`` (on the declared size, or once stored when none is declared).
    Two concurrent uploads may pass the quota together: it is checked, not reserved.
    """
    if purpose != BatchFile.Purpose.BATCH:
        raise BadRequestError(f"Invalid purpose '{purpose}': this server accepts 'batch' only.",
                              param="purpose", code="invalid_value")
    if isinstance(content, bytes):
        content, size = [content], len(content)
    limit = settings.LASER_BATCH_MAX_FILE_BYTES
    if size is not None and size > limit:
        raise RequestTooLargeError(f"File is {size} bytes; the limit is {limit} bytes.",
                                   param="file")
    if size == 0:
        raise BadRequestError("The file is empty.", param="file", code="empty_file")
    storage_quota_check(tenant=tenant, size=size or 0)
    ttl = expires_after_s if expires_after_s is not None else settings.LASER_BATCH_FILE_TTL_S
    with transaction.atomic():
        created = BatchFile.objects.create(
            tenant=tenant, filename=filename.replace("\x00", "")[:255] or "upload.jsonl",
            purpose=purpose, bytes=0, expires_at=timezone.now() + dt.timedelta(seconds=ttl))
        created.bytes = parts_write(file=created, chunks=content, limit=limit)
        if not created.bytes:
            raise BadRequestError("The file is empty.", param="file", code="empty_file")
        created.save(update_fields=["bytes"])
        if size is None:  # the file counts itself now; a refusal rolls it back
            storage_quota_check(tenant=tenant, size=0)
    return created


def output_file_create(*, tenant: Tenant, filename: str, lines: Iterable[bytes],
                       ttl_s: int) -> BatchFile:
    """A generated output or error file (purpose ``batch_output``), stored as ``lines``
    arrive. Counted against the quota but never refused by it: a batch's results are never
    dropped (``batch_room_check`` refuses a batch before it runs instead)."""
    created = BatchFile.objects.create(
        tenant=tenant, filename=filename, purpose=BatchFile.Purpose.BATCH_OUTPUT, bytes=0,
        expires_at=timezone.now() + dt.timedelta(seconds=ttl_s))
    created.bytes = parts_write(file=created, chunks=lines)
    created.save(update_fields=["bytes"])
    return created


def file_get(*, tenant: Tenant, file_id: str) -> BatchFile:
    """The tenant's live file ``file_id``; another tenant's or an expired file is a 404."""
    found = (BatchFile.objects.filter(tenant=tenant, uid=file_id).first()
             if could_be_id(file_id) else None)
    if found is None or _expired(found):
        raise NotFoundError(f"No such File object: {file_id}", param="id", code="file_not_found")
    return found


def file_content(*, tenant: Tenant, file_id: str) -> tuple[BatchFile, Iterator[bytes]]:
    """The file and its bytes, one stored part at a time."""
    found = file_get(tenant=tenant, file_id=file_id)
    return found, content_chunks(found.pk)


def file_delete(*, tenant: Tenant, file_id: str) -> str:
    found = file_get(tenant=tenant, file_id=file_id)
    found.delete()
    return file_id


def files_list(*, tenant: Tenant, purpose: str | None = None, after: str | None = None,
               limit: int = 10_000, order: str = "desc") -> tuple[list[BatchFile], bool]:
    """A page of the tenant's live files and whether more follow (cursor ``after``)."""
    rows = BatchFile.objects.filter(tenant=tenant).exclude(
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
    _, per_model = BatchFile.objects.filter(expires_at__lte=now or timezone.now()).delete()
    return per_model.get(BatchFile._meta.label, 0)  # not counting their parts


def _expired(found: BatchFile) -> bool:
    return found.expires_at is not None and found.expires_at <= timezone.now()
