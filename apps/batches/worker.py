"""The embedded Celery workers: worker threads (solo pools) and a sweep thread inside the
``manage.py serve`` process, consuming the in-memory broker (or Redis, when ``REDIS_URL`` is
set). Registered with ``apps.core.lifecycle`` by ``BatchesConfig.ready``.

On the in-memory broker one worker takes the chunks (the default queue), the other the control
tasks (validation, finalization: ``LASER_BATCH_CONTROL_QUEUE``), so that a new batch is
validated while another batch's chunk holds the first worker; on Redis one worker takes both
(kombu's event loop is one per process). Celery keeps a worker's queue selection on its app,
so the control worker runs on an app of its own with the same configuration (the in-memory broker's
queues are shared by the whole process).

On start it resumes every unfinished batch from the database, because the in-memory broker
forgot the queued tasks together with the previous process.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from django.conf import settings
from django.db import close_old_connections, connection

logger = logging.getLogger(__name__)

CLEANUP_EVERY_S = 3600.0
_READY: dict[str, threading.Event] = {}  # by worker hostname, set once it consumes


def _ready_step() -> type:
    from celery import bootsteps

    class Ready(bootsteps.StartStopStep):
        requires = {"celery.worker.consumer.tasks:Tasks"}

        def start(self, consumer: Any) -> None:
            _READY[consumer.hostname].set()

    return Ready


def _control_app() -> Any:
    """A second Celery app with the project's configuration (tasks are shared tasks)."""
    from celery import Celery

    import apps.batches.tasks  # noqa: F401 - registers the shared tasks on every app

    app = Celery("laser-control", set_as_current=False)
    app.config_from_object("django.conf:settings", namespace="CELERY")
    return app


class EmbeddedWorker:
    def __init__(self, *, sweep_s: float | None = None) -> None:
        self.sweep_s = sweep_s if sweep_s is not None else settings.LASER_BATCH_SWEEP_S
        self._workers: list[tuple[Any, threading.Thread, threading.Event]] = []
        self._sweeper: threading.Thread | None = None
        self._stop = threading.Event()

    def start(self) -> None:
        from celery import current_app  # the project's (laser_platform/celery.py)

        host = _host()
        chunks, control = settings.CELERY_TASK_DEFAULT_QUEUE, settings.LASER_BATCH_CONTROL_QUEUE
        if settings.CELERY_BROKER_URL.startswith("memory://"):
            self._start_one(current_app, f"embedded@{host}", [chunks])
            self._start_one(_control_app(), f"embedded-control@{host}", [control])
        else:
            # kombu keeps one event loop per process (kombu.asynchronous.hub), and a Redis
            # consumer runs on it: a second worker thread would drive the first one's loop and
            # interleave their BRPOP replies (the worker died on "too many values to unpack").
            # One worker takes both queues; run `celery worker -Q <control>` beside it to keep
            # validation from waiting one turn.
            self._start_one(current_app, f"embedded@{host}", [chunks, control])
        from apps.batches.sweep import resume

        resume()
        self._sweeper = threading.Thread(target=self._sweep_loop, name="batch-sweep",
                                         daemon=True)
        self._sweeper.start()

    def _start_one(self, app: Any, hostname: str, queues: list[str]) -> None:
        from celery.worker import WorkController

        ready = _READY[hostname] = threading.Event()
        app.steps["consumer"].add(_ready_step())
        app.finalize()
        worker = WorkController(
            app=app, pool="solo", concurrency=1, hostname=hostname, queues=queues,
            loglevel=settings.LOG_LEVEL, without_heartbeat=True, without_mingle=True,
            without_gossip=True,
        )
        thread = threading.Thread(target=self._run, args=(worker, ready),
                                  name=f"batch-worker-{'+'.join(queues)}", daemon=True)
        thread.start()
        self._workers.append((worker, thread, ready))
        if not ready.wait(timeout=30):
            raise RuntimeError(f"the embedded Celery worker for {queues!r} did not start "
                               "within 30 s")

    @staticmethod
    def _run(worker: Any, ready: threading.Event) -> None:
        try:
            worker.start()
        except Exception:
            logger.exception("embedded Celery worker crashed")
        finally:
            ready.clear()
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
        return bool(self._workers) and all(
            ready.is_set() and thread.is_alive() for _, thread, ready in self._workers)

    def stop(self, timeout: float = 15.0) -> None:
        """Stop consuming. A chunk still running is abandoned: its lines stay pending and the
        next start resumes them (results already written are kept)."""
        from celery.worker import state

        self._stop.set()
        if self._workers:
            state.should_terminate = 0  # read by every worker of the process
            for _, thread, _ in self._workers:
                thread.join(timeout)
            state.should_terminate = None
        if self._sweeper is not None:
            self._sweeper.join(timeout)


def _host() -> str:
    import socket

    return socket.gethostname()
