"""Settings: the typed env reader, and the production profile passing ``check --deploy``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from laser_platform.settings._env import env, env_required

ROOT = Path(__file__).resolve().parents[3]
LONG_SECRET = "x7!Qp-" + "k2#Lm9$Zr4^Vb8&Nt1*Hw6(Yc3)Jd5_Fg0+Ts" * 2


def test_env_casts_and_defaults(monkeypatch) -> None:
    monkeypatch.setenv("LASER_T_INT", "42")
    monkeypatch.setenv("LASER_T_BOOL", "Yes")
    monkeypatch.setenv("LASER_T_LIST", "a.example, b.example,,")
    assert env("LASER_T_INT", 1, int) == 42
    assert env("LASER_T_BOOL", False, bool) is True
    assert env("LASER_T_LIST", [], list) == ["a.example", "b.example"]
    assert env("LASER_T_UNSET", "fallback") == "fallback"


@pytest.mark.parametrize(
    ("raw", "cast", "choices"),
    [("many", int, None), ("maybe", bool, None), ("gpu9", str, ("cpu", "cuda"))],
)
def test_env_fails_loudly_naming_the_variable(monkeypatch, raw, cast, choices) -> None:
    monkeypatch.setenv("LASER_T_BAD", raw)
    with pytest.raises(ImproperlyConfigured, match="LASER_T_BAD"):
        env("LASER_T_BAD", None, cast, choices=choices)


def test_env_required(monkeypatch) -> None:
    monkeypatch.delenv("LASER_T_REQ", raising=False)
    with pytest.raises(ImproperlyConfigured, match="LASER_T_REQ"):
        env_required("LASER_T_REQ")


def _manage(*args: str, **env_vars: str) -> subprocess.CompletedProcess[str]:
    child_env = {k: v for k, v in os.environ.items() if not k.startswith(("LASER_", "DJANGO_"))}
    child_env.pop("SECRET_KEY", None)
    child_env.update(env_vars)
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=child_env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_production_profile_passes_check_deploy(tmp_path) -> None:
    result = _manage(
        "check",
        "--deploy",
        "--fail-level",
        "WARNING",
        LASER_ENV="production",
        SECRET_KEY=LONG_SECRET,
        ALLOWED_HOSTS="laser.example.com",
        LASER_VAR_DIR=str(tmp_path),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_production_profile_refuses_the_dev_secret(tmp_path) -> None:
    result = _manage(
        "check", LASER_ENV="production", ALLOWED_HOSTS="x.example", LASER_VAR_DIR=str(tmp_path)
    )
    assert result.returncode != 0
    assert "SECRET_KEY" in result.stderr


def test_base_profile_does_not_pass_check_deploy(tmp_path) -> None:
    # The check is meaningful: the development profile (DEBUG on) fails it.
    result = _manage(
        "check", "--deploy", "--fail-level", "WARNING", DEBUG="1", LASER_VAR_DIR=str(tmp_path)
    )
    assert result.returncode != 0
