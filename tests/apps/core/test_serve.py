"""The serving process end to end: components around uvicorn, and a clean drain on signals."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PROBE = Path(__file__).with_name("serve_probe.py")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def _child_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LASER_")}
    env.update(LASER_VAR_DIR=str(tmp_path), PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1")
    return env


def _wait_for_url(process: subprocess.Popen[str], pattern: str) -> str:
    lines = []
    for line in process.stdout:  # ends if the child dies
        lines.append(line)
        if match := re.search(pattern, line):
            return match.group(1)
    raise AssertionError("server never listened:\n" + "".join(lines))


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def test_components_start_before_serving_and_stop_after_drain(tmp_path) -> None:
    log = tmp_path / "events.log"
    process = subprocess.Popen(
        [sys.executable, str(PROBE), str(log)],
        cwd=ROOT,
        env=_child_env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        url = _wait_for_url(process, r"LISTENING (http://\S+)")
        assert log.read_text().splitlines() == ["start first", "start probe"]
        assert _get(f"{url}/health") == (200, b'{"status": "ok"}')
        assert _get(f"{url}/ready")[0] == 200
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0
    finally:
        process.kill()
        process.wait()
    assert log.read_text().splitlines() == [
        "start first",
        "start probe",
        "stop probe draining=True",
        "stop first",
        "exited",
    ]


def test_manage_py_serve_serves_admin_static_and_stops_on_ctrl_c(tmp_path) -> None:
    # Web-only (LASER_EMBEDDED=0): the command path without loading an engine; the probe test
    # above covers components.
    process = subprocess.Popen(
        [sys.executable, "manage.py", "serve", "--port", "0", "--log-level", "warning"],
        cwd=ROOT,
        env={**_child_env(tmp_path), "LASER_EMBEDDED": "0"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        url = _wait_for_url(process, r"serving on (http://\S+)")
        assert _get(f"{url}/health")[0] == 200
        assert _get(f"{url}/admin/login/")[0] in (200, 500)  # tables absent: not migrated here
        status, body = _get(f"{url}/static/admin/css/base.css")
        assert status == 200 and b"{" in body
        process.send_signal(signal.SIGINT)
        out, _ = process.communicate(timeout=60)
    finally:
        process.kill()
        process.wait()
    assert process.returncode == 0, out
    assert "Laser stopped." in out
