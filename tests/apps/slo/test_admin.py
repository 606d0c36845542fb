"""Contract admin: validation messages, versioning on save, tenant admins confined to theirs."""

from __future__ import annotations

import pytest
from django.test import Client

from apps.slo.models import SLOContract
from apps.slo.services import contract_create

pytestmark = pytest.mark.django_db

URL = "/admin/slo/slocontract/"


def _form(contract: SLOContract | None = None, **changes) -> dict:
    base = SLOContract() if contract is None else contract
    data = {name: getattr(base, name) for name in SLOContract.TERM_FIELDS}
    data["daily_token_budget"] = data["daily_token_budget"] or 1_000_000  # the plan bounds it
    data.update(changes)
    data.update({"versions-TOTAL_FORMS": "0", "versions-INITIAL_FORMS": "0"})
    if not data["demotable"]:
        data.pop("demotable")
    return data


@pytest.fixture
def world(tenant_factory, user_factory):
    a, b = tenant_factory(name="Alpha"), tenant_factory(name="Beta")
    admin_a = user_factory(tenant=a, role="admin", is_staff=True)
    client = Client()
    client.force_login(admin_a)
    return {"a": a, "b": b, "client": client, "admin": admin_a,
            "hot_b": contract_create(tenant=b, tier="hot")}


def test_tenant_admin_adds_a_contract_pinned_to_their_tenant(world):
    response = world["client"].post(
        f"{URL}add/", _form(tenant=world["b"].pk, tier="hot")
    )
    # Another tenant is not among the choices...
    assert response.status_code == 200 and "Select a valid choice" in response.content.decode()
    response = world["client"].post(f"{URL}add/", _form(tenant=world["a"].pk, tier="hot"))
    assert response.status_code == 302, response.content.decode()[:3000]
    contract = SLOContract.objects.get(tenant=world["a"])
    assert contract.current_version.number == 1


def test_validation_messages_show_in_the_form(world):
    response = world["client"].post(
        f"{URL}add/", _form(tenant=world["a"].pk, tier="cold", ttft_p99_s=0,
                            cold_percentile=150, cold_deadline_s=30),
    )
    html = response.content.decode()
    assert response.status_code == 200
    assert "P99 TTFT must be greater than zero" in html
    assert "Completion percentile must lie in (0, 100]" in html
    assert "cannot honour a deadline shorter than" in html
    assert not SLOContract.objects.filter(tenant=world["a"]).exists()


def test_editing_creates_a_version_and_shows_history(world):
    contract = contract_create(tenant=world["a"], tier="hot")
    url = f"{URL}{contract.pk}/change/"
    response = world["client"].post(url, _form(contract, ttft_p99_s=0.15))
    assert response.status_code == 302, response.content.decode()[:3000]
    contract.refresh_from_db()
    assert contract.current_version.number == 2 and contract.current_version.ttft_p99_s == 0.15
    assert contract.current_version.created_by == world["admin"].username
    page = world["client"].get(url).content.decode()
    assert "History" in page and "0.15" in page


def test_tenant_admin_cannot_see_or_edit_another_tenants_contract(world):
    client, hot_b = world["client"], world["hot_b"]
    assert "Beta" not in client.get(URL).content.decode()
    assert client.get(f"{URL}{hot_b.pk}/change/").status_code in (302, 404)
    client.post(f"{URL}{hot_b.pk}/change/", _form(hot_b, ttft_p99_s=9.0))
    hot_b.refresh_from_db()
    assert hot_b.ttft_p99_s == 0.2 and hot_b.versions.count() == 1


def test_plain_member_has_no_admin_access(world, user_factory):
    client = Client()
    client.force_login(user_factory(tenant=world["a"], role="member", is_staff=True))
    assert client.get(URL).status_code == 403
