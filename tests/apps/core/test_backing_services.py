"""Which backing services the settings pick, and live round trips when they are configured.

The live tests skip on a laptop without PostgreSQL/Redis and fail under CI=true (tests/conftest).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]

_DUMP = """
import json, django
from django.conf import settings
django.setup()
from laser_platform.celery import app
print(json.dumps({
    "db": settings.DATABASES["default"]["ENGINE"],
    "layer": settings.CHANNEL_LAYERS["default"]["BACKEND"],
    "broker": app.conf.broker_url,
    "backend": app.conf.result_backend,
    "visibility": app.conf.broker_transport_options.get("visibility_timeout"),
}))
"""


def _settings_with(tmp_path: Path, **env_vars: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env.update(DJANGO_SETTINGS_MODULE="laser_platform.settings", LASER_VAR_DIR=str(tmp_path))
    env.update(env_vars)
    result = subprocess.run(
        [sys.executable, "-c", _DUMP],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_without_services_everything_is_in_process(tmp_path) -> None:
    picked = _settings_with(tmp_path)
    assert picked["db"] == "django.db.backends.sqlite3"
    assert picked["layer"] == "channels.layers.InMemoryChannelLayer"
    assert picked["broker"] == "memory://"


def test_urls_select_postgres_and_redis(tmp_path) -> None:
    picked = _settings_with(
        tmp_path,
        DATABASE_URL="postgres://u:p@db.example:5432/laser",
        REDIS_URL="redis://cache.example:6379/0",
        CELERY_VISIBILITY_TIMEOUT="7200",
    )
    assert picked["db"] == "django.db.backends.postgresql"
    assert picked["layer"] == "channels_redis.core.RedisChannelLayer"
    assert picked["broker"] == picked["backend"] == "redis://cache.example:6379/0"
    assert picked["visibility"] == 7200


@pytest.mark.postgres
@pytest.mark.django_db
def test_postgres_is_reached_through_psycopg3() -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT version()")
        assert "PostgreSQL" in cursor.fetchone()[0]
    assert type(connection.connection).__module__.startswith("psycopg")


@pytest.mark.redis
@pytest.mark.asyncio
async def test_redis_channel_layer_round_trip(settings) -> None:
    from channels.layers import get_channel_layer

    settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [os.environ["REDIS_URL"]], "prefix": f"t{uuid.uuid4().hex[:8]}"},
        }
    }
    layer = get_channel_layer()
    channel = await layer.new_channel()
    await layer.send(channel, {"type": "probe", "n": 1})
    assert await layer.receive(channel) == {"type": "probe", "n": 1}
    await layer.flush()
