"""SIGTERM while a stream is in flight (issue 18): ``manage.py serve`` (embedded engine over the
tiny random model) lets the stream run to its last token and ``[DONE]`` within
``LASER_DRAIN_TIMEOUT``, then exits 0; meanwhile ``/ready`` and a new request get 503 (the
listener stays open ``LASER_DRAIN_ACCEPT_S``), and once it closed a new connection is refused."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[3]
pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]
TOKENS = 400


def _env(tmp_path: Path, model: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("LASER_") and k not in ("DATABASE_URL", "REDIS_URL")}
    env.update(LASER_VAR_DIR=str(tmp_path), PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1",
               LASER_MODEL=str(model), LASER_SERVED_MODEL_ID="smollm2-135m-instruct",
               LASER_DEVICE="cpu", LASER_KV_MEMORY_MB="16",
               LASER_THREADS="1", LASER_MAX_MODEL_LEN="1024", LASER_DRAIN_TIMEOUT="60",
               LASER_DRAIN_ACCEPT_S="3",
               LASER_BATCH_EMBEDDED_WORKER="0", LASER_MODEL_CACHE=str(tmp_path / "models"))
    return env


def _manage(env: dict[str, str], *args: str) -> str:
    done = subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, text=True,
                          capture_output=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def _stream(url: str, key: str, events: list[str]) -> None:
    body = {"model": "smollm2-135m-instruct", "stream": True, "max_tokens": TOKENS,
            "temperature": 0, "messages": [{"role": "user", "content": "count"}]}
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=120,
                      headers={"Authorization": f"Bearer {key}"}) as response:
        for line in response.iter_lines():
            if line.startswith("data: "):
                events.append(line[len("data: "):])


def _new_request(url: str, key: str):
    body = {"model": "smollm2-135m-instruct", "max_tokens": 4,
            "messages": [{"role": "user", "content": "late"}]}
    return httpx.post(f"{url}/v1/chat/completions", json=body, timeout=30,
                      headers={"Authorization": f"Bearer {key}"})


def test_sigterm_lets_the_stream_in_flight_finish(tmp_path):
    from tests.apps.gateway.live import write_tiny_model

    env = _env(tmp_path, write_tiny_model(tmp_path / "tiny.gguf"))
    _manage(env, "migrate", "--noinput", "-v0")
    _manage(env, "bootstrap_demo")
    key = (tmp_path / "demo_api_key").read_text().strip()
    server = subprocess.Popen([sys.executable, "manage.py", "serve", "--port", "0"], cwd=ROOT,
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True)
    output: list[str] = []
    try:
        url = None
        for line in server.stdout:
            output.append(line)
            if match := re.search(r"serving on (http://\S+)", line):
                url = match.group(1)
                break
        assert url, "".join(output)
        reader = threading.Thread(target=lambda: output.extend(server.stdout), daemon=True)
        reader.start()
        events: list[str] = []
        client = threading.Thread(target=_stream, args=(url, key, events))
        client.start()
        deadline = time.monotonic() + 60
        while len(events) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(events) >= 3, "".join(output)
        server.send_signal(signal.SIGTERM)
        signalled, at_signal = time.monotonic(), len(events)
        late = _new_request(url, key)
        ready = httpx.get(f"{url}/ready", timeout=10)
        client.join(90)
        assert server.wait(timeout=90) == 0, "".join(output)
        assert time.monotonic() - signalled < 60  # within LASER_DRAIN_TIMEOUT
    finally:
        server.kill()
        server.wait()
    assert late.status_code == 503 and late.json()["error"]["code"] == "draining", late.text
    assert late.headers["Retry-After"]
    assert ready.status_code == 503 and "draining" in ready.json()["error"]["message"]
    with pytest.raises(httpx.ConnectError):  # the listener closed after LASER_DRAIN_ACCEPT_S
        _new_request(url, key)
    assert at_signal < len(events) - 10, (at_signal, len(events))  # it was mid-stream
    assert events[-1] == "[DONE]", events[-3:]
    chunks = [json.loads(e) for e in events[:-1]]
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert sum(1 for c in chunks if c["choices"] and c["choices"][0]["delta"].get("content")
               is not None) >= TOKENS - 1
