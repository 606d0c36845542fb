"""Plans: the default plan, the caps the request path reads, and new tenants that work at once."""

from __future__ import annotations

import dataclasses
import io

import pytest
from asgiref.sync import async_to_sync
from django.core.management import call_command
from django.test import Client

from apps.slo.models import SLOContract
from apps.slo.selectors import contracts_for_tenant
from apps.tenants.models import Plan, PlanTier, Tenant
from apps.tenants.plans import (
    DEFAULT_BOUNDS,
    TenantLimits,
    atenant_limits,
    plan_of,
    tenant_limits,
    tier_bounds,
)
from apps.tenants.services import plan_ensure_default, tenant_create

pytestmark = pytest.mark.django_db


def test_the_migration_made_one_default_plan_with_bounds_for_every_tier():
    plan = Plan.objects.get(is_default=True)
    assert plan_ensure_default() == plan
    assert sorted(plan.tiers.values_list("tier", flat=True)) == ["cold", "hot", "warm"]
    hot = plan.tiers.get(tier="hot")
    assert {name: getattr(hot, name) for name in DEFAULT_BOUNDS} == DEFAULT_BOUNDS
    assert hot.default_terms == {"daily_token_budget": 10_000_000}


def test_tenant_limits_are_the_plans_and_default_to_the_default_plan(tenant_factory):
    tenant = tenant_factory()
    assert tenant.plan.is_default
    limits = tenant_limits(tenant)
    assert limits == TenantLimits(plan="Standard", burst_factor=2.0, max_inflight_per_key=128,
                                  max_inflight_per_tenant=256, max_sockets_per_key=32,
                                  max_storage_bytes=1024**3)
    assert dataclasses.is_dataclass(limits) and limits.__dataclass_params__.frozen
    gold = Plan.objects.create(name="Gold", burst_factor=3.0, max_inflight_per_key=512,
                               max_inflight_per_tenant=1024, max_sockets_per_key=64,
                               max_storage_bytes=100)
    Tenant.objects.filter(pk=tenant.pk).update(plan=gold)
    assert tenant_limits(tenant.pk).max_inflight_per_key == 512
    assert async_to_sync(atenant_limits)(tenant.pk).burst_factor == 3.0
    # A tenant without a plan (staff cleared it) is on the default plan.
    Tenant.objects.filter(pk=tenant.pk).update(plan=None)
    assert plan_of(tenant.pk).is_default and tenant_limits(tenant).max_sockets_per_key == 32


def test_tenant_limits_need_no_query_once_the_key_resolved_the_tenant(
        api_key_factory, django_assert_num_queries):
    from apps.tenants.selectors import api_key_resolve

    _, raw = api_key_factory()
    tenant = api_key_resolve(raw, touch=False).tenant
    with django_assert_num_queries(0):
        assert tenant_limits(tenant).max_inflight_per_key == 128


def test_tier_bounds_per_plan(tenant_factory):
    gold = Plan.objects.create(name="Gold")
    PlanTier.objects.create(plan=gold, tier="hot", min_ttft_p99_s=0.05)
    tenant = tenant_factory(plan=gold)
    bounds = tier_bounds(tenant, "hot")
    assert (bounds.plan, bounds.tier, bounds.min_ttft_p99_s) == ("Gold", "hot", 0.05)
    assert bounds.max_priority_weight is None  # empty = no bound from the plan
    assert tier_bounds(tenant, "warm") is None  # the plan says nothing about warm


def _tiers(tenant) -> list[tuple[str, int, str]]:
    return [(c.tier, c.current_version.number, c.current_version.created_by)
            for c in SLOContract.objects.filter(tenant=tenant).select_related("current_version")
            .order_by("tier")]


EXPECTED = [("cold", 1, "plan defaults"), ("hot", 1, "plan defaults"),
            ("warm", 1, "plan defaults")]


def test_tenant_create_gives_the_plans_default_contracts():
    tenant = tenant_create(name="Acme", slug="acme")
    assert _tiers(tenant) == EXPECTED
    hot = contracts_for_tenant(tenant=tenant)[0]
    assert hot.daily_token_budget == 10_000_000 and hot.targets.ttft_p99_s == 0.2


def test_any_creation_path_gives_default_contracts(user_factory):
    call_command("create_tenant", "--name", "Cmd", "--slug", "cmd", stdout=io.StringIO())
    assert _tiers(Tenant.objects.get(slug="cmd")) == EXPECTED
    raw = Tenant.objects.create(name="Raw", slug="raw")  # a service skipping tenant_create
    assert _tiers(raw) == EXPECTED
    assert raw.plan.is_default and Tenant.objects.get(slug="raw").plan == raw.plan
    client = Client()
    client.force_login(user_factory(is_staff=True, is_superuser=True))
    page = client.get("/admin/tenants/tenant/add/").content.decode()
    assert f'value="{plan_ensure_default().pk}" selected' in page  # the default plan is preset
    response = client.post("/admin/tenants/tenant/add/", {
        "name": "Admin made", "slug": "admin-made", "is_active": "on",
        "plan": plan_ensure_default().pk,
    })
    assert response.status_code == 302
    assert _tiers(Tenant.objects.get(slug="admin-made")) == EXPECTED


def test_a_plans_own_default_contract_is_used():
    gold = Plan.objects.create(name="Gold")
    PlanTier.objects.create(plan=gold, tier="hot", default_terms={"ttft_p99_s": 0.5})
    tenant = tenant_create(name="G", slug="g", plan=gold)
    hot = SLOContract.objects.get(tenant=tenant, tier="hot")
    assert hot.ttft_p99_s == 0.5 and hot.daily_token_budget is None  # no plan override


def test_a_recreated_default_plan_takes_its_caps_from_the_settings(settings):
    settings.LASER_KEY_MAX_INFLIGHT, settings.LASER_KEY_MAX_SOCKETS = 7, 3
    settings.LASER_FILE_STORAGE_MB = 5
    Tenant.objects.update(plan=None)
    Plan.objects.all().delete()
    limits = tenant_limits(tenant_create(name="Z", slug="z", default_contracts=False))
    assert (limits.plan, limits.max_inflight_per_key, limits.max_sockets_per_key) == \
        ("Standard", 7, 3)
    assert limits.max_inflight_per_tenant == settings.LASER_TENANT_MAX_INFLIGHT
    assert limits.max_storage_bytes == 5 * 1024 * 1024
