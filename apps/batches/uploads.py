"""Uploads go to a temporary file, never memory, and stop at the size limit while streaming:
a declared ``Content-Length`` past the limit (or past the tenant's free storage) is refused
before the body is parsed, and an undeclared one as soon as the file part grows past it."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.files.uploadhandler import TemporaryFileUploadHandler
from rest_framework.request import Request

from apps.core.body_limit import FORM_OVERHEAD_BYTES
from apps.core.errors import RequestTooLargeError


class CappedUpload(TemporaryFileUploadHandler):
    """Django's temporary-file upload handler, refusing (413) past ``limit`` bytes."""

    def __init__(self, request: Any, limit: int) -> None:
        super().__init__(request)
        self.limit, self.received = limit, 0

    def receive_data_chunk(self, raw_data: bytes, start: int) -> bytes | None:
        self.received += len(raw_data)
        if self.received > self.limit:
            raise RequestTooLargeError(f"The file is over the limit of {self.limit} bytes.",
                                       param="file")
        return super().receive_data_chunk(raw_data, start)


def cap(request: Request, *, tenant: Any) -> None:
    """Refuse an upload whose declared size is too big; make the rest stream to disk capped."""
    from apps.batches.files import storage_quota_check

    limit = settings.LASER_BATCH_MAX_FILE_BYTES
    declared = request.META.get("CONTENT_LENGTH") or ""
    if declared.isdigit():
        body = int(declared)
        if body > limit + FORM_OVERHEAD_BYTES:
            raise RequestTooLargeError(f"The upload is {body} bytes; files are limited to "
                                       f"{limit} bytes.", param="file")
        # The file is at least the request less its form's framing; a small request is
        # checked with the file's own size once it is read (``file_create``).
        if body > FORM_OVERHEAD_BYTES:
            storage_quota_check(tenant=tenant, size=body - FORM_OVERHEAD_BYTES,
                                what=f"This upload (a {body}-byte request: a file of at "
                                     f"least {body - FORM_OVERHEAD_BYTES} bytes)")
    request._request.upload_handlers = [CappedUpload(request._request, limit)]
