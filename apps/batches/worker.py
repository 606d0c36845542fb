"""The embedded Celery worker: a worker thread (solo pool) and a sweep thread inside the
``manage.py serve`` process, consuming the in-memory broker (or Redis, when ``REDIS_URL`` is
set). Registered with ``apps.core.lifecycle`` by ``BatchesConfig.ready``.

On start it resumes every unfinished batch from the database, because the in-memory broker
forgot the queued tasks together with the previous process.
"""

from __future__ import annotations

import logging
import threading
import time

from django.conf import settings
from django.db import close_old_connections, connection

logger = logging.getLogger(__name__)

CLEANUP_EVERY_S = 3600.0


class EmbeddedWorker:
    def __init__(self, *, sweep_s: float | None = None) -> None:
        self.sweep_s = sweep_s if sweep_s is not None else settings.LASER_BATCH_SWEEP_S
        self._worker = None
        self._thread: threading.Thread | None = None
        self._sweeper: threading.Thread | None = None
        self._stop = threading.Event()
        self._consuming = threading.Event()

    def start(self) -> None:
        from celery import bootsteps
        from celery import current_app as app  # the project's (laser_platform/celery.py)
        from celery.worker import WorkController

        consuming = self._consuming

        class Ready(bootsteps.StartStopStep):
            requires = {"celery.worker.consumer.tasks:Tasks"}

            def start(self, consumer: object) -> None:
                consuming.set()

        app.steps["consumer"].add(Ready)
        app.finalize()
        self._worker = WorkController(
            app=app, pool="solo", concurrency=1, hostname=f"embedded@{_host()}",
            loglevel=settings.LOG_LEVEL, without_heartbeat=True, without_mingle=True,
            without_gossip=True,
        )
        self._thread = threading.Thread(target=self._run, name="batch-worker", daemon=True)
        self._thread.start()
        if not consuming.wait(timeout=30):
            raise RuntimeError("the embedded Celery worker did not start within 30 s")
        from apps.batches.sweep import resume

        resume()
        self._sweeper = threading.Thread(target=self._sweep_loop, name="batch-sweep",
                                         daemon=True)
        self._sweeper.start()

    def _run(self) -> None:
        try:
            self._worker.start()
        except Exception:
            logger.exception("embedded Celery worker crashed")
        finally:
            self._consuming.clear()
            connection.close()

    def _sweep_loop(self) -> None:
        from apps.batches.sweep import cleanup, sweep

        last_cleanup = 0.0
        while not self._stop.wait(self.sweep_s):
            close_old_connections()
            try:
                sweep()
                if time.monotonic() - last_cleanup > CLEANUP_EVERY_S:
                    cleanup()
                    last_cleanup = time.monotonic()
            except Exception:
                logger.exception("batch sweep failed")
        connection.close()

    def is_ready(self) -> bool:
        return self._consuming.is_set() and self._thread is not None and self._thread.is_alive()

    def stop(self, timeout: float = 15.0) -> None:
        """Stop consuming. A chunk still running is abandoned: its lines stay pending and the
        next start resumes them (results already written are kept)."""
        from celery.worker import state

        self._stop.set()
        if self._worker is not None:
            state.should_terminate = 0
            if self._thread is not None:
                self._thread.join(timeout)
            state.should_terminate = None
        if self._sweeper is not None:
            self._sweeper.join(timeout)


def _host() -> str:
    import socket

    return socket.gethostname()
