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
                              "max_num_batched_tokens": 512, "max_num_seqs": 32}
    config = EngineConfig(**{**values, **overrides})
    # A test model is loaded without the on-disk weight cache (nothing left under var/models).
    loaded = load_model(model, use_cache=False) if model else None
    engine = AsyncEngine(config, LLMEngine(config, loaded=loaded))
    engine.start(wait=True)
    return engine


class LiveServer:
    """``start()`` -> base URL; ``stop()`` asks uvicorn to exit and joins its thread."""

    def __init__(self) -> None:
        from laser_platform.asgi import application

        self.config = uvicorn.Config(application, host="127.0.0.1", port=0, lifespan="off",
                                     log_level="warning", timeout_graceful_shutdown=2)
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
    can be dropped (PostgreSQL refuses while other sessions use it)."""
    from django.db import connection

    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                       "WHERE datname = current_database() AND pid <> pg_backend_pid()")
