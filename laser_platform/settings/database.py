"""Database and cache: PostgreSQL (psycopg 3) from ``DATABASE_URL``, else SQLite under var/."""

from __future__ import annotations

import dj_database_url

from laser_platform.settings._env import VAR_DIR, env

DATABASE_URL: str = env("DATABASE_URL", "")
# PostgreSQL sessions one process opens at most (psycopg's pool, Django 5.1+); 0 (the default)
# = no pool, a connection per request thread. Opt-in: a thread that keeps its session for its
# whole life (a worker thread that never closes it) keeps a pooled one too, so size the pool
# above the process's long-lived threads. Each request runs its ORM calls on a thread of its own, so
# without a bound a burst of arrivals opens a session each (200 at once opened 79, against the
# server's max_connections of 100). A request gives its connection back before tokenising
# (apps/gateway/serving.py), so streams hold none; past the pool, a thread waits up to
# DB_POOL_TIMEOUT_S. Size it so that web processes x this + Celery workers + the engine
# workers' stay under the server's max_connections.
DB_POOL_MAX_SIZE: int = env("DB_POOL_MAX_SIZE", 0, int)
DB_POOL_TIMEOUT_S: float = env("DB_POOL_TIMEOUT_S", 30.0, float)

if DATABASE_URL:
    DATABASES = {
        "default": dj_database_url.parse(
            DATABASE_URL,
            # 0: under ASGI each request runs its database work in a thread context of its own,
            # so a persistent connection is never reused, only left open until garbage-collected
            # (bench/soak.py: 12-42 open at ~30 requests/min with 60, 5-8 with 0; Django's docs
            # say to disable persistent connections under ASGI). The pool needs 0.
            conn_max_age=env("DB_CONN_MAX_AGE", 0, int),
            # A pooled connection that died (failover, idle timeout) is replaced, not reused.
            conn_health_checks=True,
        )
    }
    if DB_POOL_MAX_SIZE > 0:
        DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
            "min_size": 0, "max_size": DB_POOL_MAX_SIZE, "timeout": DB_POOL_TIMEOUT_S}
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
