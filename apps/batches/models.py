"""Files, batches and batch lines of the cold tier.

Public ids are OpenAI-style strings (``file-…``, ``batch_…``); the integer primary key orders
rows for cursor pagination. A line's result is written once: ``(batch, custom_id)`` is unique
and results are written by a conditional update from ``pending`` (see ``execution.py``).
"""

from __future__ import annotations

import secrets

from django.conf import settings
from django.db import models

from apps.tenants.models import ApiKey, Tenant


def could_be_id(value: str) -> bool:
    """Whether ``value`` could be a stored public id. PostgreSQL refuses a text parameter with
    a NUL byte (a 500 if sent), and no id is longer than the column."""
    return isinstance(value, str) and len(value) <= 40 and "\x00" not in value


def new_file_id() -> str:
    return f"file-{secrets.token_hex(12)}"


def new_batch_id() -> str:
    return f"batch_{secrets.token_hex(12)}"


class BatchFile(models.Model):
    """An uploaded input file or a generated output/error file, stored in the database.

    The database (not a directory) holds the bytes so that web front ends and Celery workers on
    different machines see the same files with no shared filesystem, and a file and the rows
    that reference it commit together. The bytes live in ``BatchFilePart`` rows of at most
    ``PART_BYTES`` each, written and read one part at a time (``storage.py``), so no process
    holds a whole file in memory.
    """

    class Purpose(models.TextChoices):
        BATCH = "batch"
        BATCH_OUTPUT = "batch_output"

    uid = models.CharField(max_length=40, unique=True, default=new_file_id, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="batch_files")
    filename = models.CharField(max_length=255)
    purpose = models.CharField(max_length=16, choices=Purpose.choices)
    bytes = models.BigIntegerField()
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    expires_at = models.DateTimeField(null=True, blank=True, db_index=True)

    class Meta:
        ordering = ["-id"]
        indexes = [models.Index(fields=["tenant", "purpose", "id"])]

    def __str__(self) -> str:
        return f"{self.uid} ({self.filename})"


class BatchFilePart(models.Model):
    """Bytes ``[seq * PART_BYTES, (seq + 1) * PART_BYTES)`` of a file."""

    file = models.ForeignKey(BatchFile, on_delete=models.CASCADE, related_name="parts")
    seq = models.PositiveIntegerField()
    data = models.BinaryField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["file", "seq"], name="batch_file_part")]


class BatchStatus(models.TextChoices):
    VALIDATING = "validating"
    FAILED = "failed"
    IN_PROGRESS = "in_progress"
    FINALIZING = "finalizing"
    COMPLETED = "completed"
    EXPIRED = "expired"
    CANCELLING = "cancelling"
    CANCELLED = "cancelled"


TERMINAL_STATUSES = frozenset(
    {BatchStatus.FAILED, BatchStatus.COMPLETED, BatchStatus.EXPIRED, BatchStatus.CANCELLED}
)
# Statuses in which chunks may still send lines to the engine.
RUNNING_STATUSES = frozenset({BatchStatus.IN_PROGRESS})


class Batch(models.Model):
    """One cold-tier job. ``deadline_at`` is the promise (created_at + completion_window);
    ``finished_at`` is when it reached a terminal status: the SLO app compares the two."""

    uid = models.CharField(max_length=40, unique=True, default=new_batch_id, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="batches")
    api_key = models.ForeignKey(
        ApiKey, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    # A batch started in the web app has no key: its lines run as the user who started it.
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True,
        related_name="+"
    )
    input_file = models.ForeignKey(
        BatchFile, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    input_file_uid = models.CharField(max_length=40)
    endpoint = models.CharField(max_length=64)
    completion_window = models.CharField(max_length=16)
    metadata = models.JSONField(null=True, blank=True)
    status = models.CharField(
        max_length=16, choices=BatchStatus.choices, default=BatchStatus.VALIDATING, db_index=True
    )
    # Validation errors (file-level), OpenAI's ``errors.data`` entries.
    errors = models.JSONField(null=True, blank=True)
    contract_version_id = models.BigIntegerField(null=True, blank=True)
    output_expires_after_s = models.PositiveIntegerField()
    output_file = models.ForeignKey(
        BatchFile, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    error_file = models.ForeignKey(
        BatchFile, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    usage = models.JSONField(null=True, blank=True)
    # Kept on the row at finalization, so they outlive the lines that cleanup deletes.
    request_counts = models.JSONField(null=True, blank=True)
    model = models.CharField(max_length=256, null=True, blank=True)
    # When work for the batch was last enqueued or a chunk of it last ran: the sweep
    # re-enqueues the work of an open batch idle longer than ``LASER_BATCH_STALL_S``.
    progress_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    deadline_at = models.DateTimeField(db_index=True)
    in_progress_at = models.DateTimeField(null=True, blank=True)
    finalizing_at = models.DateTimeField(null=True, blank=True)
    completed_at = models.DateTimeField(null=True, blank=True)
    failed_at = models.DateTimeField(null=True, blank=True)
    expired_at = models.DateTimeField(null=True, blank=True)
    cancelling_at = models.DateTimeField(null=True, blank=True)
    cancelled_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True, db_index=True)

    class Meta:
        ordering = ["-id"]
        verbose_name_plural = "batches"
        indexes = [models.Index(fields=["tenant", "id"]),
                   models.Index(fields=["status", "progress_at"])]

    def __str__(self) -> str:
        return f"{self.uid} ({self.status})"

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES

    @property
    def on_time(self) -> bool | None:
        """True when it completed by its deadline; None while unfinished."""
        if self.finished_at is None:
            return None
        return self.status == BatchStatus.COMPLETED and self.finished_at <= self.deadline_at


class LineStatus(models.TextChoices):
    PENDING = "pending"
    SUCCEEDED = "succeeded"
    FAILED = "failed"  # the endpoint refused the body, or the engine failed the request
    EXPIRED = "expired"
    CANCELLED = "cancelled"


class BatchLine(models.Model):
    """One request of a batch and, once finished, its result (OpenAI's output-line fields)."""

    batch = models.ForeignKey(Batch, on_delete=models.CASCADE, related_name="lines")
    line_no = models.PositiveIntegerField()
    custom_id = models.CharField(max_length=512)
    body = models.JSONField()
    status = models.CharField(max_length=16, choices=LineStatus.choices, default="pending")
    # {"status_code", "request_id", "body"} for an answered request (200 or a 4xx body) ...
    response = models.JSONField(null=True, blank=True)
    # ... or {"code", "message"} when no response exists (expired, cancelled, engine failure).
    error = models.JSONField(null=True, blank=True)
    prompt_tokens = models.PositiveIntegerField(default=0)
    completion_tokens = models.PositiveIntegerField(default=0)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["batch_id", "line_no"]
        constraints = [
            models.UniqueConstraint(fields=["batch", "custom_id"], name="batch_line_custom_id"),
            models.UniqueConstraint(fields=["batch", "line_no"], name="batch_line_no"),
        ]
        indexes = [models.Index(fields=["batch", "status", "line_no"])]

    def __str__(self) -> str:
        return f"{self.batch_id}:{self.custom_id} ({self.status})"

    @property
    def request_id(self) -> str:
        """The engine request id, stable across redeliveries (so an abort finds it)."""
        return f"batch_req_{self.batch_id}_{self.line_no}"
