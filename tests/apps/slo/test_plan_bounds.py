"""A tenant signs within its plan (model, service, admin form, API); platform staff may not be
bounded. The messages name the bound, so a tenant admin knows what the plan allows."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.test import Client

from apps.slo.models import SLOContract
from apps.slo.services import contract_create, contract_update
from apps.tenants.models import Plan, PlanTier
from tests.apps.slo.test_admin import _form

pytestmark = pytest.mark.django_db
URL = "/admin/slo/slocontract/"
# The values: each would let one tenant jump every other tenant's queue or quota.
ABUSE = {"ttft_p99_s": 1e-6, "priority_weight": 1e6, "requests_per_min": 2**31 - 1,
         "tokens_per_min": 2**31 - 1}
BOUND_NAMED = {"ttft_p99_s": "'min_ttft_p99_s' for hot contracts is at least 0.1 s",
               "priority_weight": "'max_priority_weight' for hot contracts is at most 4",
               "requests_per_min": "'max_requests_per_min' for hot contracts is at most 6000",
               "tokens_per_min": "'max_tokens_per_min' for hot contracts is at most 1000000"}


@pytest.fixture
def world(tenant_factory, user_factory):
    tenant = tenant_factory(name="Alpha", default_contracts=True)
    admin_user = user_factory(tenant=tenant, role="admin", is_staff=True)
    staff = user_factory(is_staff=True, is_superuser=True)
    hot = SLOContract.objects.get(tenant=tenant, tier="hot")
    return {"tenant": tenant, "admin": admin_user, "staff": staff, "hot": hot}


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_the_model_refuses_out_of_bounds_terms_naming_the_bound(world):
    contract = world["hot"]
    for name, value in {**ABUSE, "daily_token_budget": None}.items():
        setattr(contract, name, value)
    with pytest.raises(ValidationError) as info:
        contract.full_clean()
    errors = info.value.message_dict
    for name, words in BOUND_NAMED.items():
        assert words in errors[name][0] and "plan 'Standard'" in errors[name][0]
    assert "Daily token budget unlimited" in errors["daily_token_budget"][0]
    contract.sign_beyond_plan = True  # what the admin sets for platform staff
    contract.full_clean()


def test_the_services_refuse_and_staff_may_sign_anything(world):
    with pytest.raises(ValidationError) as info:
        contract_update(contract=world["hot"], **ABUSE)
    assert set(info.value.message_dict) == set(ABUSE)
    world["hot"].refresh_from_db()
    assert world["hot"].current_version.number == 1
    contract_update(contract=world["hot"], beyond_plan=True, created_by="staff", **ABUSE)
    assert world["hot"].current_version.number == 2
    assert world["hot"].current_version.priority_weight == 1e6
    # Terms staff granted stay as signed while the tenant changes others within the bounds;
    # the platform's own rules still hold for staff.
    contract_update(contract=world["hot"], ttft_p99_s=0.1, priority_weight=4)
    assert world["hot"].current_version.requests_per_min == 2**31 - 1
    with pytest.raises(ValidationError):
        contract_update(contract=world["hot"], requests_per_min=2**31 - 2)
    with pytest.raises(ValidationError):
        contract_update(contract=world["hot"], beyond_plan=True, ttft_p99_s=0)


def test_admin_form_refuses_a_tenant_admin_and_accepts_staff(world):
    hot, url = world["hot"], f"{URL}{world['hot'].pk}/change/"
    page = _client(world["admin"]).get(url).content.decode()
    assert "Standard: min_ttft_p99_s 0.1" in page and "max_priority_weight 4" in page
    response = _client(world["admin"]).post(url, _form(hot, **ABUSE))
    html = response.content.decode().replace("&#x27;", "'")
    assert response.status_code == 200
    for words in BOUND_NAMED.values():
        assert words in html
    hot.refresh_from_db()
    assert hot.ttft_p99_s == 0.2 and hot.versions.count() == 1
    response = _client(world["staff"]).post(url, _form(hot, **ABUSE))
    assert response.status_code == 302, response.content.decode()[:2000]
    hot.refresh_from_db()
    assert hot.ttft_p99_s == 1e-6 and hot.current_version.created_by == world["staff"].username


def test_admin_add_form_starts_from_the_plans_default_contract(tenant_factory, user_factory):
    tenant = tenant_factory()
    client = _client(user_factory(tenant=tenant, role="admin", is_staff=True))
    page = client.get(f"{URL}add/?tier=hot").content.decode()
    assert 'name="daily_token_budget" value="10000000"' in page


def test_api_refuses_out_of_bounds_terms_with_an_openai_error(world, api_key_factory):
    url = "/api/slo/contracts/hot"
    admin_client = _client(world["admin"])
    response = admin_client.patch(url, {"priority_weight": 1e6}, content_type="application/json")
    error = response.json()["error"]
    assert response.status_code == 400 and error["param"] == "priority_weight"
    assert error["code"] == "contract_out_of_bounds"
    assert BOUND_NAMED["priority_weight"] in error["message"]
    response = admin_client.patch(url, {"priority_weight": 2.0}, content_type="application/json")
    assert response.status_code == 200 and response.json()["version"] == 2
    assert response.json()["targets"]["priority_weight"] == 2.0
    # Staff name the tenant and may exceed the plan; keys and plain members may not write.
    response = _client(world["staff"]).patch(
        url, {"tenant": world["tenant"].slug, "priority_weight": 1e6},
        content_type="application/json")
    assert response.status_code == 200 and response.json()["version"] == 3
    _, raw = api_key_factory(tenant=world["tenant"])
    response = Client().patch(url, {"priority_weight": 3}, content_type="application/json",
                              HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert response.status_code == 403
    bad = admin_client.patch(url, {"ttft_p99_s": "fast"}, content_type="application/json")
    assert bad.status_code == 400 and "error" in bad.json()


def test_plan_admin_refuses_default_contracts_outside_the_plan(user_factory):
    plan = Plan.objects.get(is_default=True)
    client = _client(user_factory(is_staff=True, is_superuser=True))
    data = {"name": plan.name, "burst_factor": 2, "max_inflight_per_key": 128,
            "max_inflight_per_tenant": 256, "max_sockets_per_key": 32,
            "max_storage_bytes": 1024, "tiers-TOTAL_FORMS": 3, "tiers-INITIAL_FORMS": 3,
            "is_default": "on"}
    for i, row in enumerate(PlanTier.objects.filter(plan=plan).order_by("pk")):
        data.update({f"tiers-{i}-id": row.pk, f"tiers-{i}-plan": plan.pk,
                     f"tiers-{i}-tier": row.tier, f"tiers-{i}-default_terms": "{}",
                     f"tiers-{i}-min_ttft_p99_s": 0.1, f"tiers-{i}-max_priority_weight": 4})
    # {} leaves the design's unlimited daily budget, which the plan no longer bounds: fine.
    response = client.post(f"/admin/tenants/plan/{plan.pk}/change/", data)
    assert response.status_code == 302, response.content.decode()[:3000]
    data["tiers-0-default_terms"] = '{"ttft_p99_s": 0.01}'
    response = client.post(f"/admin/tenants/plan/{plan.pk}/change/", data)
    assert response.status_code == 200
    assert "min_ttft_p99_s" in response.content.decode().replace("&#x27;", "'")


def test_contract_create_for_a_plan_without_bounds_is_unbounded(tenant_factory):
    tenant = tenant_factory(plan=Plan.objects.create(name="Custom"))
    contract = contract_create(tenant=tenant, tier="hot", priority_weight=50.0)
    assert contract.priority_weight == 50.0


def test_staff_add_form_starts_from_the_chosen_tenants_plan(tenant_factory, user_factory):
    tenant = tenant_factory()
    client = _client(user_factory(is_staff=True, is_superuser=True))
    page = client.get(f"{URL}add/?tier=hot&tenant={tenant.pk}").content.decode()
    assert 'name="daily_token_budget" value="10000000"' in page
    page = client.get(f"{URL}add/?tier=hot&tenant=x").content.decode()
    assert 'name="ttft_p99_s" value="0.2"' in page  # the design's table
