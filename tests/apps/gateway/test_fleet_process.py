"""The Ray Serve fleet's live tests (test_live_ray.py), run by pytest in a child process: a
local Ray cluster leaves threads, processes and database sessions in the interpreter that
started it, so it gets an interpreter of its own and the rest of the run stays clean."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("ray.serve")
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
ROOT = Path(__file__).resolve().parents[3]


def test_the_fleet_tests_pass_in_a_process_of_their_own():
    env = dict(os.environ, LASER_RAY_TESTS_IN_PROCESS="1")
    if env.get("DATABASE_URL"):  # a test database of its own beside this run's
        env["DATABASE_URL"] += "_fleet"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "tests/apps/gateway/test_live_ray.py"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=850)
    tail = (done.stdout + done.stderr)[-4000:]
    assert done.returncode == 0, tail
    assert " passed" in done.stdout and "skipped" not in done.stdout, tail
