"""Fixtures of the fault tests: the gateway's live-server fixtures, and Redis / PostgreSQL
servers of their own (``servers.py``) that a test may stop and start at will."""

from __future__ import annotations

from tests.apps.gateway.conftest import (  # noqa: F401 - fixtures, found by name
    _fresh_limiter,
    _nothing_left_in_flight,
    _reports_flushed_per_test,
    contracted,
    laser_server,
    tiny_model_path,
)
