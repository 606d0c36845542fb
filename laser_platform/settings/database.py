"""Database and cache: PostgreSQL (psycopg 3) from ``DATABASE_URL``, else SQLite under var/."""

from __future__ import annotations

import dj_database_url

from laser_platform.settings._env import VAR_DIR, env

DATABASE_URL: str = env("DATABASE_URL", "")

if DATABASE_URL:
    DATABASES = {
        "default": dj_database_url.parse(
            DATABASE_URL,
            # 0: under ASGI each request runs its database work in a thread context of its own,
            # so a persistent connection is never reused, only left open until garbage-collected
            # (bench/soak.py: 12-42 open at ~30 requests/min with 60, 5-8 with 0; Django's docs
            # say to disable persistent connections under ASGI).
            conn_max_age=env("DB_CONN_MAX_AGE", 0, int),
            # A pooled connection that died (failover, idle timeout) is replaced, not reused.
            conn_health_checks=True,
        )
    }
else:
    VAR_DIR.mkdir(parents=True, exist_ok=True)
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": VAR_DIR / "laser.sqlite3",
            "OPTIONS": {
                # Embedded mode writes from the web threads and the Celery worker thread at once:
                # WAL lets readers proceed during a write, IMMEDIATE avoids upgrade deadlocks.
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
                "transaction_mode": "IMMEDIATE",
                "timeout": 20,
            },
        }
    }

REDIS_URL: str = env("REDIS_URL", "")

if REDIS_URL:
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": REDIS_URL,
            "KEY_PREFIX": "laser",
        }
    }
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
