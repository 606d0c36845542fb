"""Web app fixtures: two tenants with contracts, members with and without the admin role."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from django.test import Client

# Each test starts with empty in-process rate-limit windows (not Redis counters of earlier runs).
from tests.apps.gateway.conftest import _fresh_limiter  # noqa: F401


@pytest.fixture(autouse=True)
def _manual_slo_flush(request: Any, settings: Any) -> Any:
    settings.LASER_SLO_AUTOFLUSH = False
    yield
    if request.node.get_closest_marker("django_db"):
        from apps.slo.services import flush_reports

        flush_reports()


@pytest.fixture
def fake() -> Any:
    """A scripted engine behind the engine client (answers "Hello world!")."""
    from apps.gateway import engine_client
    from tests.apps.gateway.fakes import FakeEngine

    engine = FakeEngine()
    old = engine_client.set_engine_client(engine)
    yield engine
    engine_client.set_engine_client(old)


def session_cookie(user: Any) -> bytes:
    """A ``Cookie`` header value for a session of ``user`` (for WebSocket tests)."""
    return f"sessionid={logged_in(user).cookies['sessionid'].value}".encode()


def logged_in(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def world(tenant_factory, user_factory, settings) -> SimpleNamespace:
    """Tenants ``a`` (hot/warm/cold contracts, cold promises 1 h) and ``b`` (defaults); clients
    for a's admin, a's member, b's admin and platform staff."""
    from apps.slo.services import contract_create, contracts_ensure_defaults

    settings.LASER_COLD_MIN_DEADLINE_S = 1
    a = tenant_factory(name="Alpha", slug="alpha")
    b = tenant_factory(name="Beta", slug="beta")
    for tier in ("hot", "warm"):
        contract_create(tenant=a, tier=tier)
    contract_create(tenant=a, tier="cold", cold_deadline_s=3600)
    contracts_ensure_defaults(tenant=b)
    return SimpleNamespace(
        a=a, b=b,
        admin=logged_in(user_factory(tenant=a, role="admin")),
        member=logged_in(user_factory(tenant=a)),
        b_admin=logged_in(user_factory(tenant=b, role="admin")),
        staff=logged_in(user_factory(is_staff=True)),
    )


@pytest.fixture
def world_sync(tenant_factory, user_factory) -> SimpleNamespace:
    """Session cookies for the socket tests: ``member`` of ``alpha`` (hot, warm, cold), a member
    of a warm-only tenant, and platform staff who have not picked a tenant."""
    from apps.slo.services import contract_create

    alpha = tenant_factory(name="Alpha", slug="alpha")
    for tier in ("hot", "warm", "cold"):
        contract_create(tenant=alpha, tier=tier)
    warm_only = tenant_factory(slug="warm-only")
    contract_create(tenant=warm_only, tier="warm")
    staff_in_alpha = logged_in(user_factory(is_staff=True))
    staff_in_alpha.post("/tenants/", {"tenant": "alpha"})
    member = user_factory(tenant=alpha)
    return SimpleNamespace(
        alpha=alpha, member=member, member_cookie=session_cookie(member),
        staff_in_alpha_cookie=f"sessionid={staff_in_alpha.cookies['sessionid'].value}".encode(),
        warm_only_cookie=session_cookie(user_factory(tenant=warm_only)),
        staff_cookie=session_cookie(user_factory(is_staff=True)),
    )
