"""The embedded process's SLO housekeeping thread: materialise windows and raise alerts every
``LASER_SLO_AGGREGATE_INTERVAL_S``, prune records hourly. Production runs the same work as the
Celery beat tasks in ``tasks.py``."""

from __future__ import annotations

import logging
import threading
import time

from django.conf import settings
from django.db import close_old_connections, connection

logger = logging.getLogger(__name__)
PRUNE_EVERY_S = 3600.0


class Housekeeper:
    def __init__(self) -> None:
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="slo-housekeeping", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None

    def _run(self) -> None:
        from apps.slo import retention, tasks

        interval = float(getattr(settings, "LASER_SLO_AGGREGATE_INTERVAL_S", 60.0))
        last_prune = 0.0
        while not self._stop.wait(interval):
            close_old_connections()
            try:
                tasks.materialise_and_alert()
                if time.monotonic() - last_prune > PRUNE_EVERY_S:
                    retention.prune()
                    last_prune = time.monotonic()
            except Exception:
                logger.exception("SLO housekeeping failed; retrying next interval")
        connection.close()


housekeeper = Housekeeper()
