"""Celery: Redis broker/results when ``REDIS_URL`` is set, else in-process memory transport.

With ``memory://`` the worker must live in the same process as the producers: that is the
embedded mode, where the batches app runs a worker thread next to the ASGI server.
Read by ``laser_platform.celery`` through the ``CELERY_`` namespace.
"""

from __future__ import annotations

from laser_platform.settings._env import env

_REDIS_URL: str = env("REDIS_URL", "")

CELERY_BROKER_URL: str = _REDIS_URL or "memory://"
CELERY_RESULT_BACKEND: str = _REDIS_URL or "cache+memory://"
# Redis redelivers a task not acked within this many seconds; it must exceed the longest task,
# otherwise a long cold-tier batch would run twice.
CELERY_VISIBILITY_TIMEOUT: int = env("CELERY_VISIBILITY_TIMEOUT", 12 * 3600, int)
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": CELERY_VISIBILITY_TIMEOUT}
CELERY_RESULT_BACKEND_TRANSPORT_OPTIONS = {"visibility_timeout": CELERY_VISIBILITY_TIMEOUT}
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TIMEZONE = "UTC"
CELERY_TASK_TRACK_STARTED = True
CELERY_RESULT_EXPIRES = 24 * 3600
# One task at a time per worker process: batch items are long and uneven.
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
