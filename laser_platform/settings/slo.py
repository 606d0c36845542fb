"""SLO accounting, reporting and dashboard settings (the ``apps.slo`` app)."""

from __future__ import annotations

from laser_platform.settings._env import env

# Shortest cold-tier deadline the platform promises to honour; admin flags anything shorter.
LASER_COLD_MIN_DEADLINE_S: float = env("LASER_COLD_MIN_DEADLINE_S", 300.0, float)
# Request records: a background thread writes them in batches of up to this many, this often.
LASER_SLO_AUTOFLUSH: bool = env("LASER_SLO_AUTOFLUSH", True, bool)
LASER_SLO_FLUSH_INTERVAL_S: float = env("LASER_SLO_FLUSH_INTERVAL_S", 1.0, float)
LASER_SLO_FLUSH_BATCH: int = env("LASER_SLO_FLUSH_BATCH", 200, int)
# While the database is unreachable: retry with backoff up to this, buffering at most BUFFER_MAX
# reports per process (past it the oldest are dropped and counted).
LASER_SLO_FLUSH_MAX_BACKOFF_S: float = env("LASER_SLO_FLUSH_MAX_BACKOFF_S", 30.0, float)
LASER_SLO_BUFFER_MAX: int = env("LASER_SLO_BUFFER_MAX", 100_000, int)
# Raw request records older than this are pruned (aggregates are kept). At least 2 days, so a
# day window is always materialised from complete data before its records go.
LASER_SLO_RETENTION_DAYS: float = env("LASER_SLO_RETENTION_DAYS", 7.0, float)
if LASER_SLO_RETENTION_DAYS < 2:
    from django.core.exceptions import ImproperlyConfigured

    raise ImproperlyConfigured("LASER_SLO_RETENTION_DAYS must be at least 2")
# Windows whose missed terms send alerts (webhook + email), at most once per term and window.
LASER_SLO_ALERT_WINDOWS: list[str] = env("LASER_SLO_ALERT_WINDOWS", ["hour", "day"], list)
LASER_SLO_ALERT_FROM: str = env("LASER_SLO_ALERT_FROM", "laser@localhost")
# Alert webhooks: per-attempt timeout, retries after the first attempt (timeouts, connection
# errors, 5xx, 429) with exponential backoff from BACKOFF_S, and the hosts platform staff admit
# although they resolve to private/reserved addresses (comma-separated names or IPs).
LASER_SLO_WEBHOOK_TIMEOUT_S: float = env("LASER_SLO_WEBHOOK_TIMEOUT_S", 5.0, float)
LASER_SLO_WEBHOOK_RETRIES: int = env("LASER_SLO_WEBHOOK_RETRIES", 3, int)
LASER_SLO_WEBHOOK_BACKOFF_S: float = env("LASER_SLO_WEBHOOK_BACKOFF_S", 30.0, float)
LASER_SLO_WEBHOOK_ALLOWED_HOSTS: list[str] = env("LASER_SLO_WEBHOOK_ALLOWED_HOSTS", [], list)
# Bearer token for /metrics; empty = staff session only.
LASER_METRICS_TOKEN: str = env("LASER_METRICS_TOKEN", "")
# How often the embedded process materialises closed windows (seconds).
LASER_SLO_AGGREGATE_INTERVAL_S: float = env("LASER_SLO_AGGREGATE_INTERVAL_S", 60.0, float)
