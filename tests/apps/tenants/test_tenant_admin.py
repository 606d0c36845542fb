"""Admin isolation: tenant admins see and edit only their tenant; platform staff see all."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from apps.tenants import keys
from apps.tenants.models import ApiKey
from apps.tenants.selectors import api_key_resolve

pytestmark = pytest.mark.django_db

KEYS_URL = "/admin/tenants/apikey/"


@pytest.fixture
def world(tenant_factory, user_factory, api_key_factory):
    a, b = tenant_factory(name="Alpha", slug="alpha"), tenant_factory(name="Beta", slug="beta")
    key_a, _ = api_key_factory(tenant=a, name="alpha-key")
    key_b, _ = api_key_factory(tenant=b, name="beta-key")
    return {
        "a": a,
        "b": b,
        "key_a": key_a,
        "key_b": key_b,
        "a_admin": user_factory(tenant=a, role="admin", is_staff=True),
        "a_member_staff": user_factory(tenant=a, role="member", is_staff=True),
        "a_member": user_factory(tenant=a, role="member"),
        "platform": user_factory(is_staff=True, is_superuser=True),
    }


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_tenant_admin_changelist_shows_only_their_keys(world) -> None:
    page = _client(world["a_admin"]).get(KEYS_URL)
    assert page.status_code == 200
    html = page.content.decode()
    assert world["key_a"].prefix in html
    assert world["key_b"].prefix not in html
    assert "Beta" not in html  # not even the other tenant's name (e.g. in a list filter)


def test_tenant_admin_cannot_open_or_edit_another_tenants_key(world) -> None:
    client, key_b = _client(world["a_admin"]), world["key_b"]
    url = f"{KEYS_URL}{key_b.pk}/change/"
    assert client.get(url).status_code in (302, 404)
    response = client.post(url, {"name": "hijacked", "default_tier": "cold", "expires_at": ""})
    assert response.status_code in (302, 403, 404)
    key_b.refresh_from_db()
    assert key_b.name == "beta-key" and key_b.default_tier == "hot"
    # Nor revoke it through the bulk action, nor delete it.
    client.post(KEYS_URL, {"action": "revoke_selected", "_selected_action": [key_b.pk]})
    assert client.post(f"{KEYS_URL}{key_b.pk}/delete/", {"post": "yes"}).status_code in (302, 404)
    key_b.refresh_from_db()
    assert key_b.revoked_at is None


def test_tenant_admin_can_edit_and_revoke_their_own_key(world) -> None:
    client, key_a = _client(world["a_admin"]), world["key_a"]
    response = client.post(
        f"{KEYS_URL}{key_a.pk}/change/", {"name": "renamed", "default_tier": "warm"}
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    client.post(KEYS_URL, {"action": "revoke_selected", "_selected_action": [key_a.pk]})
    key_a.refresh_from_db()
    assert key_a.name == "renamed" and key_a.default_tier == "warm"
    assert key_a.revoked_at is not None


def test_creating_a_key_in_admin_shows_it_once_and_pins_the_tenant(world) -> None:
    client, a, b = _client(world["a_admin"]), world["a"], world["b"]
    # Posting another tenant is refused by the form (not one of the available choices).
    refused = client.post(f"{KEYS_URL}add/", {"tenant": b.pk, "name": "x", "default_tier": "hot"})
    assert refused.status_code == 200 and not ApiKey.objects.filter(name="x").exists()

    page = client.post(f"{KEYS_URL}add/", {"tenant": a.pk, "name": "new", "default_tier": "cold"})
    assert page.status_code == 200
    assert "no-store" in page["Cache-Control"]
    plaintext = re.search(r'value="(lsr_[^"]+)"', page.content.decode()).group(1)
    created = api_key_resolve(plaintext, touch=False)
    assert created.tenant == a and created.name == "new" and created.default_tier == "cold"
    assert created.created_by == world["a_admin"]

    # Never again: neither the change page nor the list shows the secret or its hash.
    _, secret = keys.parse_key(plaintext)
    for url in (f"{KEYS_URL}{created.pk}/change/", KEYS_URL, f"{KEYS_URL}{created.pk}/history/"):
        html = client.get(url).content.decode()
        assert secret not in html and created.secret_hash not in html


def test_members_without_the_admin_role_get_no_admin(world) -> None:
    assert _client(world["a_member_staff"]).get(KEYS_URL).status_code == 403
    response = _client(world["a_member"]).get(KEYS_URL)
    assert response.status_code == 302 and "/admin/login/" in response["Location"]


def test_tenant_admin_sees_only_their_tenant_and_members(world) -> None:
    client = _client(world["a_admin"])
    tenants = client.get("/admin/tenants/tenant/").content.decode()
    assert "Alpha" in tenants and "Beta" not in tenants
    assert client.get(f"/admin/tenants/tenant/{world['b'].pk}/change/").status_code in (302, 404)
    members = client.get("/admin/tenants/membership/").content.decode()
    assert world["a_member"].username in members


def test_tenant_admins_plan_filter_lists_their_plan_only(world, plan_for) -> None:
    mine, theirs = plan_for(world["a"]), plan_for(world["b"])
    page = _client(world["a_admin"]).get("/admin/tenants/tenant/").content.decode()
    assert f"plan__id__exact={mine.pk}" in page and f"plan__id__exact={theirs.pk}" not in page
    staff = _client(world["platform"]).get("/admin/tenants/tenant/").content.decode()
    assert f"plan__id__exact={mine.pk}" in staff and f"plan__id__exact={theirs.pk}" in staff


def test_platform_staff_see_everything(world) -> None:
    html = _client(world["platform"]).get(KEYS_URL).content.decode()
    assert world["key_a"].prefix in html and world["key_b"].prefix in html


def test_api_lists_only_the_callers_tenant(world, api_key_factory) -> None:
    from rest_framework.test import APIClient

    _, plaintext_a = api_key_factory(tenant=world["a"])
    data = APIClient().get("/api/keys", HTTP_AUTHORIZATION=f"Bearer {plaintext_a}").json()["data"]
    prefixes = {row["prefix"] for row in data}
    assert world["key_a"].prefix in prefixes and world["key_b"].prefix not in prefixes
    assert all("secret_hash" not in row for row in data)
    # A logged-in member (session) sees their tenant's keys too, and nothing else.
    session = APIClient()
    session.force_login(world["a_member"])
    data = session.get("/api/keys").json()["data"]
    assert {row["prefix"] for row in data} == prefixes
    # Platform staff without a tenant have no tenant API.
    staff = APIClient()
    staff.force_login(world["platform"])
    assert staff.get("/api/keys").status_code == 403
