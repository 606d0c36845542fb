"""Cold tier (``apps.batches``): limits of the Files + Batches API and the Celery settings the
batch tasks rely on for crash safety.

Imported by ``base.py`` after ``celery.py``, so the values here override the generic ones.
"""

from __future__ import annotations

from datetime import timedelta

from kombu import Queue

from laser_platform.settings._env import env

# Upload limits. Files are stored in the database (see docs/batches.md for why).
LASER_BATCH_MAX_FILE_BYTES: int = env("LASER_BATCH_MAX_FILE_BYTES", 64 * 1024 * 1024, int)
LASER_BATCH_MAX_LINES: int = env("LASER_BATCH_MAX_LINES", 50_000, int)
# The web page's upload validates a file up to this size before it answers, so its line errors
# show at once; a larger file (and every POST /v1/batches) is validated on the control queue.
LASER_BATCH_INLINE_VALIDATE_BYTES: int = env("LASER_BATCH_INLINE_VALIDATE_BYTES",
                                             4 * 1024 * 1024, int)
# Per-tenant file storage quota (uploads plus output/error files); an upload past it is a 400.
LASER_FILE_STORAGE_MB: int = env("LASER_FILE_STORAGE_MB", 1024, int)
# The longest completion_window accepted (OpenAI's only window is 24h).
LASER_BATCH_MAX_WINDOW_S: int = env("LASER_BATCH_MAX_WINDOW_S", 24 * 3600, int)
# Default lifetime of uploaded batch files and of output/error files (OpenAI: 30 days).
LASER_BATCH_FILE_TTL_S: int = env("LASER_BATCH_FILE_TTL_S", 30 * 24 * 3600, int)

# A chunk task (one turn of one batch) runs this many lines, at most this many in the engine at
# once, then hands the rest of the batch to the back of the queue. Chunks are the unit of
# redelivery and of fairness: a worker lost mid-chunk costs one chunk of recomputation, and a
# batch waits at most one turn of each batch ahead of it.
LASER_BATCH_CHUNK_LINES: int = env("LASER_BATCH_CHUNK_LINES", 32, int)
LASER_BATCH_CHUNK_CONCURRENCY: int = env("LASER_BATCH_CHUNK_CONCURRENCY", 16, int)
# Turns of one batch queued at once (each over its own part of the lines): 1 serves batches in
# strict turn; more let several workers (each with its engine) run one large batch together.
LASER_BATCH_PARALLEL_TURNS: int = env("LASER_BATCH_PARALLEL_TURNS", 1, int)
# Bounded task length: past the soft limit a chunk stops taking lines and re-enqueues the
# rest; the hard limit kills it. Both stay well under the visibility timeout below.
LASER_BATCH_CHUNK_SOFT_LIMIT_S: float = env("LASER_BATCH_CHUNK_SOFT_LIMIT_S", 60.0, float)
LASER_BATCH_CHUNK_HARD_LIMIT_S: int = env("LASER_BATCH_CHUNK_HARD_LIMIT_S", 420, int)
# A line told to wait longer than this (a tenant's rate window) ends the chunk's turn: the
# rest is re-enqueued with that countdown instead of holding the worker while it waits.
LASER_BATCH_YIELD_S: float = env("LASER_BATCH_YIELD_S", 2.0, float)
# How often a running chunk re-reads its batch (cancel / deadline) while lines are in flight.
LASER_BATCH_POLL_S: float = env("LASER_BATCH_POLL_S", 0.5, float)
# Expiry / cleanup sweep period (Celery beat in production, a thread in embedded mode).
LASER_BATCH_SWEEP_S: float = env("LASER_BATCH_SWEEP_S", 30.0, float)

# Crash safety: the batch tasks set acks_late + reject_on_worker_lost themselves (their writes
# are idempotent; other apps' tasks keep Celery's defaults).
# Redis hands an unacked task to another worker after this many seconds. It must exceed the
# longest task (the chunk hard limit) or a healthy chunk would run twice; it should not be
# much longer, or a killed worker's chunk waits that long before being redelivered.
CELERY_VISIBILITY_TIMEOUT: int = env(
    "CELERY_VISIBILITY_TIMEOUT", 2 * LASER_BATCH_CHUNK_HARD_LIMIT_S + 60, int
)
if CELERY_VISIBILITY_TIMEOUT <= LASER_BATCH_CHUNK_HARD_LIMIT_S:
    from django.core.exceptions import ImproperlyConfigured

    raise ImproperlyConfigured(
        "CELERY_VISIBILITY_TIMEOUT must exceed LASER_BATCH_CHUNK_HARD_LIMIT_S"
    )
# How often a live worker looks for (and re-queues) tasks a dead worker left unacked; kombu's
# default (every 10th of 10 s polls) would add ~100 s to every redelivery.
LASER_BATCH_RESTORE_INTERVAL_S: int = env("LASER_BATCH_RESTORE_INTERVAL_S", 10, int)
# Deployments (or CI runs) sharing one Redis keep their queues and unacked sets apart by a key
# prefix; every producer and worker of one deployment must use the same one.
LASER_CELERY_KEY_PREFIX: str = env("LASER_CELERY_KEY_PREFIX", "")
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": CELERY_VISIBILITY_TIMEOUT,
    "unacked_restore_interval": LASER_BATCH_RESTORE_INTERVAL_S,
    "unacked_restore_throttle": 1,
    **({"global_keyprefix": LASER_CELERY_KEY_PREFIX} if LASER_CELERY_KEY_PREFIX else {}),
}
CELERY_RESULT_BACKEND_TRANSPORT_OPTIONS = {"visibility_timeout": CELERY_VISIBILITY_TIMEOUT}

# The sweep re-enqueues the work of an open batch when no task for it was enqueued or ran for
# this long: a chunk message lost for good (a failed enqueue, a chunk acked at the hard limit).
# Above the visibility timeout (plus a restore round), so the sweep does not race Redis
# redelivering a killed worker's chunk; running chunks refresh the mark while they run.
LASER_BATCH_STALL_S: int = env(
    "LASER_BATCH_STALL_S", CELERY_VISIBILITY_TIMEOUT + LASER_BATCH_RESTORE_INTERVAL_S + 60, int
)
if LASER_BATCH_STALL_S <= LASER_BATCH_CHUNK_HARD_LIMIT_S:
    from django.core.exceptions import ImproperlyConfigured

    raise ImproperlyConfigured("LASER_BATCH_STALL_S must exceed LASER_BATCH_CHUNK_HARD_LIMIT_S")
# At most this many stalled batches are re-enqueued per sweep run (the rest, next run).
LASER_BATCH_SWEEP_REDISPATCH: int = env("LASER_BATCH_SWEEP_REDISPATCH", 20, int)

# Two queues: chunks (engine work, each task one turn of one batch) on the default queue, and
# the short control tasks (validation, finalization) on their own, so that a file is validated
# by a worker that is never busy with another batch's chunk. A worker started without ``-Q``
# consumes both; `celery worker -Q batch-control` is a control-only worker (see
# docs/batches.md). The embedded process runs one worker thread per queue.
LASER_BATCH_CONTROL_QUEUE = "batch-control"
CELERY_TASK_DEFAULT_QUEUE = "celery"
CELERY_TASK_QUEUES = (Queue(CELERY_TASK_DEFAULT_QUEUE), Queue(LASER_BATCH_CONTROL_QUEUE))
# The periodic sweep and cleanup stay on the default queue: validation never waits behind them.
CELERY_TASK_ROUTES = {name: {"queue": LASER_BATCH_CONTROL_QUEUE}
                      for name in ("batches.validate", "batches.finalize")}

# Periodic batch tasks (`celery -A laser_platform beat`). Another app adding periodic tasks
# should extend this dict rather than redefine it.
CELERY_BEAT_SCHEDULE = {
    "batches-sweep": {
        "task": "batches.sweep",
        "schedule": timedelta(seconds=LASER_BATCH_SWEEP_S),
    },
    "batches-cleanup": {
        "task": "batches.cleanup",
        "schedule": timedelta(hours=1),
    },
}

# Run the Celery worker thread inside `manage.py serve` (embedded mode). Turn it off when
# separate `celery -A laser_platform worker` processes consume the Redis queue instead.
LASER_BATCH_EMBEDDED_WORKER: bool = env("LASER_BATCH_EMBEDDED_WORKER", True, bool)
