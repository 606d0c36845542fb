"""Fixtures for the SLO tests: reports are flushed by hand (no writer thread), and records are
built from plain numbers so every expected value can be worked out on paper."""

from __future__ import annotations

import datetime as dt
import itertools
from collections.abc import Callable
from typing import Any

import pytest

_ids = itertools.count(1)
T0 = dt.datetime(2026, 1, 5, 10, 0, tzinfo=dt.UTC)  # a Monday, on an hour boundary


@pytest.fixture(autouse=True)
def _manual_flush(settings: Any) -> None:
    settings.LASER_SLO_AUTOFLUSH = False


@pytest.fixture
def make_report() -> Callable[..., Any]:
    """``make_report(tenant, at=seconds after T0, ttft=..., tier="hot", **fields)``."""
    from apps.slo.report_types import RequestReport

    def make(
        tenant: Any,
        *,
        at: float = 0.0,
        ttft: float | None = 0.1,
        tier: str = "hot",
        outcome: str = "ok",
        duration: float = 1.0,
        **fields: Any,
    ) -> RequestReport:
        arrival = (T0 + dt.timedelta(seconds=at)).timestamp()
        first = None if ttft is None else arrival + ttft
        values: dict[str, Any] = {
            "request_id": f"req-{next(_ids)}", "tenant_id": tenant.pk, "tier_asked": tier,
            "outcome": outcome, "arrival": arrival, "first_token_at": first, "ttft_s": ttft,
            "finished_at": arrival + duration, "streamed": tier == "hot",
            "prompt_tokens": 10, "completion_tokens": 20,
        }
        return RequestReport(**{**values, **fields})

    return make


@pytest.fixture
def eager_celery() -> Any:
    """Celery tasks run in the caller (``.delay`` included), retries too, without a broker."""
    from laser_platform.celery import app

    old = app.conf.task_always_eager
    app.conf.task_always_eager = True
    yield app
    app.conf.task_always_eager = old
