"""Gateway fixtures: a tenant with contracts, its key, and a fresh in-process rate limiter."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest


@pytest.fixture(autouse=True)
def _fresh_limiter(settings: Any) -> Any:
    """Each test starts with empty rate-limit windows (in-process unless a test asks for Redis)."""
    from apps.gateway import ratelimit

    settings.LASER_RATELIMIT_REDIS_URL = ""
    ratelimit.get_limiter.cache_clear()
    yield
    ratelimit.get_limiter.cache_clear()


@pytest.fixture(autouse=True)
def _nothing_left_in_flight() -> Any:
    """Every request released what it held, once: no slot and no process count left over."""
    yield
    from apps.gateway.admission import inflight
    from apps.gateway.slots import slots
    from tests.apps.gateway.live import wait_until

    assert wait_until(lambda: not slots._requests and inflight.count == 0, timeout=5), (
        dict(slots._requests), inflight.count)


@pytest.fixture(autouse=True)
def _reports_flushed_per_test(request: Any, settings: Any) -> Any:
    """Reports are written synchronously at the end of each DB test (not by the writer thread
    after the test database is gone)."""
    settings.LASER_SLO_AUTOFLUSH = False
    yield
    if request.node.get_closest_marker("django_db"):
        from apps.slo.services import flush_reports

        flush_reports()


@pytest.fixture
def contracted(tenant_factory: Callable[..., Any], api_key_factory: Callable[..., Any]):
    """``contracted(tiers=("hot", "warm", "cold"), default_tier="hot", **terms)`` ->
    (tenant, api_key, plaintext) with a contract per tier (terms apply to every tier)."""
    from apps.slo.services import contract_create

    def make(*, tiers: tuple[str, ...] = ("hot", "warm", "cold"), default_tier: str = "hot",
             **terms: Any) -> tuple[Any, Any, str]:
        tenant = tenant_factory()
        for tier in tiers:
            contract_create(tenant=tenant, tier=tier, **terms)
        api_key, plaintext = api_key_factory(tenant=tenant, default_tier=default_tier)
        return tenant, api_key, plaintext

    return make


@pytest.fixture
def fake() -> Any:
    """A scripted engine (``fakes.FakeEngine``) installed as the process's engine client."""
    from apps.gateway import engine_client
    from tests.apps.gateway.fakes import FakeEngine

    fake = FakeEngine()
    old = engine_client.set_engine_client(fake)
    yield fake
    engine_client.set_engine_client(old)


@pytest.fixture
def key(contracted: Callable[..., Any]) -> str:
    """The plaintext of a key whose tenant holds hot, warm and cold contracts."""
    return contracted()[2]


# ---- live server (tests/apps/gateway/live.py) ------------------------------------------------


@pytest.fixture(scope="session")
def tiny_model_path(tmp_path_factory: Any) -> Any:
    from tests.apps.gateway.live import write_tiny_model

    return write_tiny_model(tmp_path_factory.mktemp("tiny-model") / "tiny.gguf")


@pytest.fixture(scope="session")
def laser_server(django_db_setup: Any, django_db_blocker: Any) -> Any:
    """uvicorn serving Laser on a free port (a thread of this process; see ``live.py``)."""
    from tests.apps.gateway.live import LiveServer, close_server_connections

    server = LiveServer()
    server.start()
    yield server
    server.stop()
    with django_db_blocker.unblock():
        close_server_connections()


@pytest.fixture(scope="session")
def _tiny_engine(tiny_model_path: Any) -> Any:
    from tests.apps.gateway.live import start_engine

    engine = start_engine(str(tiny_model_path))
    yield engine
    engine.stop()


def _installed(engine: Any) -> Any:
    from apps.gateway.engine_client import set_engine_client

    old = set_engine_client(engine)
    yield engine
    set_engine_client(old)


@pytest.fixture
def tiny_engine(_tiny_engine: Any) -> Any:
    """The process's engine client (so the live server's) is the tiny model's AsyncEngine."""
    yield from _installed(_tiny_engine)


@pytest.fixture(scope="module")
def _smollm2_engine() -> Any:
    from tests.apps.gateway.live import start_engine

    engine = start_engine(None)
    yield engine
    engine.stop()


@pytest.fixture
def smollm2_engine(_smollm2_engine: Any) -> Any:
    """The process's engine client is an AsyncEngine over the bundled SmolLM2."""
    yield from _installed(_smollm2_engine)
