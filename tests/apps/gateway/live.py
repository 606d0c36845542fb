"""A live Laser for the gateway's end-to-end tests.

``LiveServer``: uvicorn serving the project's ASGI app (REST, SSE, ``/ws/chat/``) on a free port,
on a thread of the test process, so the server shares the test's database, settings and engine
client. ``write_tiny_model``: a 2-layer random Llama as a GGUF file that the engine and
``manage.py run_engine`` workers load like any other model; greedy decoding never picks one of
its stop tokens, so a greedy request always runs to ``max_tokens`` (long streams on demand).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import uvicorn
from asgiref.sync import SyncToAsync

MAX_MODEL_LEN = 4096


def write_tiny_model(path: Path) -> Path:
    """Write the tiny GGUF model to ``path`` and return it."""
    import torch
    from gguf import GGMLQuantizationType as Q
    from transformers import LlamaConfig, LlamaForCausalLM

    from tests.inference.loaders.gguf_writer import write_tiny_gguf

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=97, hidden_size=64, intermediate_size=96,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=MAX_MODEL_LEN, rms_norm_eps=1e-5,
                         bos_token_id=1, eos_token_id=2, tie_word_embeddings=False)
    model = LlamaForCausalLM(config).float().eval()
    with torch.no_grad():
        # The stop tokens (<|endoftext|> = 0, <|im_end|> = 2) get a logit of exactly 0, below
        # the largest of the 95 other random logits at every position in practice.
        model.lm_head.weight[[0, 2]] = 0.0
    write_tiny_gguf(path, model, Q.F32)
    return path


def start_engine(model: str | None, **overrides: Any) -> Any:
    """A started ``AsyncEngine`` over ``model`` (None: the bundled SmolLM2), on the CPU."""
    from inference.engine import EngineConfig, LLMEngine
    from inference.engine.async_engine import AsyncEngine
    from inference.loaders import load_model

    values: dict[str, Any] = {"model": model, "device": "cpu", "kv_memory_mb": 64.0,
                              "max_model_len": MAX_MODEL_LEN if model else 2048,
                              "max_num_batched_tokens": 512, "max_num_seqs": 32,
                              "num_threads": 1}  # two torch threads crawl on a busy 2-core box
    config = EngineConfig(**{**values, **overrides})
    # A test model is loaded without the on-disk weight cache (nothing left under var/models).
    loaded = load_model(model, use_cache=False) if model else None
    engine = AsyncEngine(config, LLMEngine(config, loaded=loaded))
    engine.start(wait=True)
    return engine


class LiveServer:
    """``start()`` -> base URL; ``stop()`` asks uvicorn to exit and joins its thread."""

    def __init__(self, config: uvicorn.Config | None = None) -> None:
        from laser_platform.asgi import application

        self.config = config or uvicorn.Config(application, host="127.0.0.1", port=0,
                                               lifespan="off", log_level="warning",
                                               timeout_graceful_shutdown=2)
        self.server = uvicorn.Server(self.config)
        self.thread: threading.Thread | None = None
        self.url = ""

    def start(self, timeout: float = 30.0) -> str:
        sock = self.config.bind_socket()
        host, port = sock.getsockname()[:2]
        self.url = f"http://{host}:{port}"
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [sock]},
                                       name="live-uvicorn", daemon=True)
        self.thread.start()
        end = time.monotonic() + timeout
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > end:
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.02)
        return self.url

    @property
    def ws_url(self) -> str:
        return "ws" + self.url[len("http"):]

    def stop(self) -> None:
        self.server.should_exit = True
        if self.thread is not None:
            self.thread.join(10)


def wait_until(predicate: Any, timeout: float, interval: float = 0.01) -> bool:
    """Poll ``predicate`` until true or ``timeout`` seconds passed; returns its last value."""
    end = time.monotonic() + timeout
    while True:
        if predicate():
            return True
        if time.monotonic() > end:
            return bool(predicate())
        time.sleep(interval)


def close_server_connections() -> None:
    """End the database sessions the server's worker threads still hold, so the test database
    can be dropped (PostgreSQL refuses while other sessions use it). Under psycopg's pool the
    pool goes too: the sessions ended here were checked out by the server's threads and
    never return, so the next test would wait on an exhausted pool; a fresh one opens on the
    next query."""
    from django.db import connection

    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                       "WHERE datname = current_database() AND pid <> pg_backend_pid()")
    if connection.pool is not None and not connection.in_atomic_block:
        connection.close()  # this thread's session back first: close_pool ends the rest
        connection.close_pool()
    # Those sessions include the one asgiref's shared thread for sync_to_async keeps for this
    # process's async tests (Django's async ORM calls close no connection there): drop it, or
    # the next async test's first query in that thread meets a terminated session.
    SyncToAsync.single_thread_executor.submit(_drop_connections).result(timeout=30)


def _drop_connections() -> None:
    from django.db import connections

    for conn in connections.all(initialized_only=True):
        conn.close()


class EngineWorkers:
    """``manage.py run_engine`` processes serving ``model`` over Redis under ``channel``."""

    def __init__(self, model: Path, channel: str, logs: Path, **settings: str) -> None:
        import os
        import sys

        root = Path(__file__).resolve().parents[3]
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("LASER_") and k != "DATABASE_URL"}
        env.update(settings, LASER_MODEL=str(model), LASER_ENGINE_CHANNEL=channel,
                   LASER_VAR_DIR=str(logs), LASER_MODEL_CACHE=str(logs / "models"),
                   LASER_DEVICE="cpu", LASER_KV_MEMORY_MB="16", LASER_THREADS="1",
                   LASER_WIDE_THREADS="1",
                   LASER_MAX_MODEL_LEN=str(MAX_MODEL_LEN), PYTHONPATH=str(root),
                   PYTHONUNBUFFERED="1")
        self.env, self.root, self.logs, self.python = env, root, logs, sys.executable
        self.procs: dict[str, Any] = {}

    def start(self, *worker_ids: str, timeout: float = 90.0) -> None:
        import subprocess

        for worker_id in worker_ids:
            with (self.logs / f"{worker_id}.log").open("w") as out:
                self.procs[worker_id] = subprocess.Popen(
                    [self.python, "manage.py", "run_engine", "--worker-id", worker_id],
                    cwd=self.root, env=self.env, stdout=out, stderr=subprocess.STDOUT)
        for worker_id in worker_ids:
            log = self.logs / f"{worker_id}.log"
            ready = wait_until(lambda: "ready on" in log.read_text()
                               or self.procs[worker_id].poll() is not None, timeout, 0.1)
            if not ready or self.procs[worker_id].poll() is not None:
                raise RuntimeError(f"worker {worker_id} did not start:\n{log.read_text()}")

    def kill(self, worker_id: str) -> None:
        import signal

        self.procs[worker_id].send_signal(signal.SIGKILL)
        self.procs[worker_id].wait(10)

    def close(self) -> None:
        for worker_id, proc in self.procs.items():
            if proc.poll() is None:
                self.kill(worker_id)
