"""File bytes in ``BatchFilePart`` rows: written as they arrive, read back one part at a time,
so an upload, a validation or an output file never needs the whole file in memory."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from apps.batches.models import BatchFile, BatchFilePart
from apps.core.errors import RequestTooLargeError

PART_BYTES = 1024 * 1024  # also the chunk size uploads are read in


def parts_write(*, file: BatchFile, chunks: Iterable[bytes], limit: int | None = None) -> int:
    """Store ``chunks`` as ``file``'s parts; return the byte count. 413 (``param="file"``) as
    soon as more than ``limit`` bytes arrived. Call inside the transaction creating ``file``."""
    buffer, seq, total = bytearray(), 0, 0
    for chunk in chunks:
        total += len(chunk)
        if limit is not None and total > limit:
            raise RequestTooLargeError(f"The file is over the limit of {limit} bytes.",
                                       param="file")
        buffer += chunk
        while len(buffer) >= PART_BYTES:
            BatchFilePart.objects.create(file=file, seq=seq, data=bytes(buffer[:PART_BYTES]))
            del buffer[:PART_BYTES]
            seq += 1
    if buffer:
        BatchFilePart.objects.create(file=file, seq=seq, data=bytes(buffer))
    return total


def content_chunks(file_pk: int) -> Iterator[bytes]:
    """The file's bytes, one part (at most ``PART_BYTES``) per item."""
    part_ids = list(BatchFilePart.objects.filter(file_id=file_pk).order_by("seq")
                    .values_list("pk", flat=True))
    for pk in part_ids:
        yield bytes(BatchFilePart.objects.values_list("data", flat=True).get(pk=pk))


def content_lines(file_pk: int) -> Iterator[bytes]:
    """The file split on ``\\n`` only (like ``bytes.split``: the last item follows the last
    newline, empty when the file ends with one)."""
    rest = b""
    for chunk in content_chunks(file_pk):
        lines = (rest + chunk).split(b"\n")
        rest = lines.pop()
        yield from lines
    yield rest
