"""``python manage.py run_engine``: an engine worker process for ``LASER_ENGINE_MODE=remote``."""

from __future__ import annotations

import asyncio
import signal
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError


class Command(BaseCommand):
    help = "Serve the engine to web processes over the Redis channel layer."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--worker-id", default=None,
                            help="Stable id of this worker (default: host-pid-random).")

    def handle(self, *args: Any, **options: Any) -> None:
        if not settings.LASER_ENGINE_REDIS_URL:
            raise CommandError("run_engine needs Redis: set REDIS_URL (or LASER_ENGINE_REDIS_URL).")
        from apps.gateway.engine_client import build_async_engine
        from apps.gateway.remote.worker import EngineWorker

        engine = build_async_engine()
        engine.start(wait=True)
        worker = EngineWorker(engine, options["worker_id"])
        self.stdout.write(f"engine worker {worker.worker_id} ready on {worker.channel}")
        self.stdout.flush()
        try:
            asyncio.run(self._serve(worker))
        finally:
            engine.stop()

    async def _serve(self, worker: Any) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, worker.stopping.set)
        await worker.run()
