"""Web app fixtures: two tenants with contracts, members with and without the admin role."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from django.test import Client


@pytest.fixture(autouse=True)
def _manual_slo_flush(request: Any, settings: Any) -> Any:
    settings.LASER_SLO_AUTOFLUSH = False
    yield
    if request.node.get_closest_marker("django_db"):
        from apps.slo.services import flush_reports

        flush_reports()


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
