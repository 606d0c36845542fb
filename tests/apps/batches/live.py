"""Real processes for the end-to-end batch tests: a web front end (``manage.py serve`` with
``LASER_EMBEDDED=0``, uvicorn on a free port) and Celery workers (``celery -A laser_platform
worker``), all on the test's PostgreSQL database and a Redis broker under a key prefix of their
own, so that other runs sharing the Redis server never see their tasks.

Each worker holds its own in-process engine (embedded mode) with the bundled SmolLM2.
"""

from __future__ import annotations

import os
import re
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

import openai

ROOT = Path(__file__).resolve().parents[3]
TERMINAL = ("completed", "failed", "expired", "cancelled")


def database_url() -> str:
    """The URL of the database this test process uses (pytest-django's test database)."""
    from django.db import connection

    s = connection.settings_dict
    auth = s["USER"] + (f":{s['PASSWORD']}" if s.get("PASSWORD") else "")
    return f"postgres://{auth}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"


class LiveStack:
    """Start with ``server()`` and ``worker()``; ``close()`` kills whatever is still running."""

    def __init__(self, logs: Path, **env: str) -> None:
        self.logs = logs
        self.env = {
            **os.environ, "DATABASE_URL": database_url(), "REDIS_URL": os.environ["REDIS_URL"],
            "LASER_CELERY_KEY_PREFIX": f"laser-test-{secrets.token_hex(4)}:",
            "LASER_EMBEDDED": "0", "LASER_BATCH_EMBEDDED_WORKER": "0", "LASER_DEVICE": "cpu",
            "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1", **env,
        }
        self.procs: list[subprocess.Popen] = []
        self.url = ""

    def _spawn(self, name: str, argv: list[str]) -> tuple[subprocess.Popen, Path]:
        log = self.logs / f"{name}.log"
        with log.open("w") as out:
            proc = subprocess.Popen(argv, cwd=ROOT, env=self.env, stdout=out,
                                    stderr=subprocess.STDOUT)
        self.procs.append(proc)
        return proc, log

    def server(self) -> str:
        argv = [sys.executable, "manage.py", "serve", "--port", "0", "--log-level", "warning"]
        proc, log = self._spawn("server", argv)
        self.url = _wait_for(proc, log, r"serving on (http://\S+)")
        return self.url

    def worker(self, name: str) -> subprocess.Popen:
        """A solo-pool worker (one process: SIGKILL takes the worker and its engine)."""
        argv = [sys.executable, "-m", "celery", "-A", "laser_platform", "worker", "--pool",
                "solo", "--hostname", f"{name}@%h", "--loglevel", "INFO", "--without-gossip",
                "--without-mingle", "--without-heartbeat"]
        proc, log = self._spawn(name, argv)
        _wait_for(proc, log, r"(ready\.)")
        return proc

    def client(self, api_key: str) -> openai.OpenAI:
        return openai.OpenAI(base_url=f"{self.url}/v1", api_key=api_key, max_retries=0,
                             timeout=30)

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)


def _wait_for(proc: subprocess.Popen, log: Path, pattern: str, timeout: float = 60) -> str:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        text = log.read_text()
        if match := re.search(pattern, text):
            return match.group(1)
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    raise AssertionError(f"{log.name}: no {pattern!r} (exit {proc.poll()}):\n{log.read_text()}")


def wait_batch(client: openai.OpenAI, batch_id: str, until=None, timeout: float = 120):
    """Poll ``batches.retrieve`` until ``until(batch)`` (default: a terminal status)."""
    until = until or (lambda b: b.status in TERMINAL)
    end = time.monotonic() + timeout
    while True:
        batch = client.batches.retrieve(batch_id)
        if until(batch):
            return batch
        if time.monotonic() > end:
            raise AssertionError(f"batch stuck at {batch.status} {batch.request_counts}")
        time.sleep(0.2)
