"""Real processes for the end-to-end batch tests.

Production layout (``shared_env``): a web front end (``manage.py serve`` with
``LASER_EMBEDDED=0``, uvicorn on a free port) and Celery workers (``celery -A laser_platform
worker``), all on the test's PostgreSQL database and a Redis broker under a key prefix of their
own, so that other runs sharing the Redis server never see their tasks. Each worker holds its
own in-process engine with the bundled SmolLM2.

Embedded layout (``embedded_env``): one ``manage.py serve`` process with the engine and the
worker thread, SQLite and the in-memory broker under a private ``LASER_VAR_DIR``.
"""

from __future__ import annotations

import json
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


def shared_env(**extra: str) -> dict[str, str]:
    return {**os.environ, "DATABASE_URL": database_url(), "REDIS_URL": os.environ["REDIS_URL"],
            "LASER_CELERY_KEY_PREFIX": f"laser-test-{secrets.token_hex(4)}:",
            "LASER_EMBEDDED": "0", "LASER_BATCH_EMBEDDED_WORKER": "0", **_common(), **extra}


def embedded_env(var_dir: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("DATABASE_URL", "REDIS_URL", "LASER_EMBEDDED")}
    return {**env, "LASER_VAR_DIR": str(var_dir), **_common(), **extra}


def _common() -> dict[str, str]:
    # One torch thread per engine: several engines (and other test processes) share 2 cores in
    # CI, and competing OpenMP threads made steps several times slower in a trial.
    # 256 MB of KV (not the platform's 2 GiB, allocated at start): a few lines at a time here.
    return {"LASER_DEVICE": "cpu", "LASER_THREADS": "1", "LASER_WIDE_THREADS": "1",
            "LASER_KV_MEMORY_MB": "256", "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}


class LiveStack:
    """Start with ``server()`` and ``worker()``; ``close()`` kills whatever is still running."""

    def __init__(self, logs: Path, env: dict[str, str]) -> None:
        self.logs, self.env = logs, env
        self.procs: list[subprocess.Popen] = []
        self.worker_logs: list[Path] = []
        self.url = ""

    def manage(self, *argv: str) -> str:
        """Run a ``manage.py`` command to its end; its output."""
        done = subprocess.run([sys.executable, "manage.py", *argv], cwd=ROOT, env=self.env,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    def _spawn(self, name: str, argv: list[str]) -> tuple[subprocess.Popen, Path]:
        log = self.logs / f"{name}.log"
        with log.open("w") as out:
            proc = subprocess.Popen(argv, cwd=ROOT, env=self.env, stdout=out,
                                    stderr=subprocess.STDOUT)
        self.procs.append(proc)
        return proc, log

    def server(self, name: str = "server") -> subprocess.Popen:
        argv = [sys.executable, "manage.py", "serve", "--port", "0", "--log-level", "warning"]
        proc, log = self._spawn(name, argv)
        self.url = _wait_for(proc, log, r"serving on (http://\S+)")
        return proc

    def worker(self, name: str) -> subprocess.Popen:
        """A solo-pool worker (one process: SIGKILL takes the worker and its engine)."""
        argv = [sys.executable, "-m", "celery", "-A", "laser_platform", "worker", "--pool",
                "solo", "--hostname", f"{name}@%h", "--loglevel", "INFO", "--without-gossip",
                "--without-mingle", "--without-heartbeat"]
        proc, log = self._spawn(name, argv)
        _wait_for(proc, log, r"(ready\.)")
        self.worker_logs.append(log)
        return proc

    def wait_idle(self, timeout: float = 120) -> None:
        """Wait until every task a live worker received has ended (by its log).

        A batch reads as cancelled or expired while the chunk in the worker is still stopping
        and writing; the test database must not be flushed under it (the flush's TRUNCATE and
        the worker's row locks can deadlock)."""
        end = time.monotonic() + timeout
        quiet_since = None
        # idle for a whole second: a chunk that ends may enqueue the next one (or finalize)
        while quiet_since is None or time.monotonic() - quiet_since < 1:
            busy = [log.name for log in self.worker_logs if _in_flight(log)]
            if busy:
                quiet_since = None
                if time.monotonic() > end:
                    raise AssertionError(f"workers still busy after {timeout} s: {busy}")
            elif quiet_since is None:
                quiet_since = time.monotonic()
            time.sleep(0.2)

    def client(self, api_key: str) -> openai.OpenAI:
        return openai.OpenAI(base_url=f"{self.url}/v1", api_key=api_key, max_retries=0,
                             timeout=30)

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)


def tiny_line(i: int) -> dict:
    """A /v1/completions line with little model work (a 1-3 token prompt, 2 tokens out): for
    tests of the batch machinery, which must run in about a minute on 2 CPU cores."""
    from django.conf import settings

    return {"custom_id": f"doc-{i}", "method": "POST", "url": "/v1/completions",
            "body": {"model": settings.LASER_SERVED_MODEL_ID, "prompt": str(i), "max_tokens": 2,
                     "temperature": 0}}


def output_ids(client: openai.OpenAI, batch) -> list[str]:
    """The custom_ids of a finished batch's output file, in file order."""
    text = client.files.content(batch.output_file_id).text
    return [json.loads(x)["custom_id"] for x in text.splitlines()]


def _in_flight(log: Path) -> set[str]:
    """Task ids a Celery worker's INFO log shows received and not yet ended."""
    text = log.read_text()
    received = set(re.findall(r"Task \S+\[([0-9a-f-]+)\] received", text))
    ended = set(re.findall(r"Task \S+\[([0-9a-f-]+)\] (?:succeeded|raised|retry|failed)",
                           text))
    return received - ended


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
