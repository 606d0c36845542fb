"""A tenant moved to a tighter plan, or whose plan's bounds tighten, has its contracts clamped
to the new bounds, each change a contract version authored by it (issue 41: contracts signed
under a generous plan outlived the move)."""

from __future__ import annotations

import pytest

from apps.slo.models import SLOContract
from apps.slo.selectors import contract_for
from apps.slo.services import contract_create
from apps.tenants.models import Plan, PlanTier
from apps.tenants.services import tenant_plan_change

pytestmark = pytest.mark.django_db
# signed by staff beyond any plan: rates, weight, an unlimited budget, a tight TTFT
GENEROUS = {"requests_per_min": 50_000, "tokens_per_min": 5_000_000, "priority_weight": 8.0,
            "daily_token_budget": None, "ttft_p99_s": 0.15}
SMALL = {"max_requests_per_min": 100, "max_tokens_per_min": 20_000, "max_priority_weight": 2.0,
         "max_daily_token_budget": 1_000_000, "min_ttft_p99_s": 0.5}


@pytest.fixture
def tenant(tenant_factory):
    tenant = tenant_factory(name="Alpha")
    for tier in ("hot", "warm"):
        contract_create(tenant=tenant, tier=tier, beyond_plan=True, created_by="staff",
                        **GENEROUS)
    return tenant


def _small(**bounds) -> Plan:
    plan = Plan.objects.create(name="Small")
    PlanTier.objects.create(plan=plan, tier="hot", **{**SMALL, **bounds})
    return plan


def _hot(tenant) -> SLOContract:
    return SLOContract.objects.select_related("current_version").get(tenant=tenant, tier="hot")


def test_moving_to_a_tighter_plan_clamps_the_contracts_as_a_version_of_the_change(tenant):
    tenant_plan_change(tenant=tenant, plan=_small())
    hot = _hot(tenant)
    version = hot.current_version
    assert version.number == 2 and version.created_by == "plan change: Standard -> Small"
    assert (version.requests_per_min, version.tokens_per_min, version.priority_weight,
            version.daily_token_budget, version.ttft_p99_s) == (100, 20_000, 2.0, 1_000_000, 0.5)
    assert version.tbt_p99_s == hot.versions.get(number=1).tbt_p99_s  # within: untouched
    # the request path reads the clamped terms
    snapshot = contract_for(tenant=tenant, tier="hot")
    assert snapshot.requests_per_min == 100 and snapshot.version_id == version.pk
    # Small bounds no warm contract: it keeps its terms and its version
    assert SLOContract.objects.get(tenant=tenant, tier="warm").current_version.number == 1


def test_a_contract_within_the_new_plan_gets_no_version(tenant_factory):
    tenant = tenant_factory()
    contract_create(tenant=tenant, tier="hot", requests_per_min=60, tokens_per_min=10_000,
                    daily_token_budget=1000, ttft_p99_s=1.0)
    tenant_plan_change(tenant=tenant, plan=_small())
    assert _hot(tenant).current_version.number == 1


def test_a_plan_change_in_the_admin_or_any_save_clamps_too(tenant):
    tenant.plan = _small()
    tenant.save()
    assert _hot(tenant).current_version.requests_per_min == 100
    tenant.name = "Alpha 2"
    tenant.save()  # no move: nothing new
    assert _hot(tenant).current_version.number == 2


def test_tightening_a_plans_bounds_clamps_its_tenants(tenant, tenant_factory):
    plan = _small(max_requests_per_min=None)
    tenant_plan_change(tenant=tenant, plan=plan)
    assert _hot(tenant).current_version.requests_per_min == 50_000  # not bounded yet
    row = plan.tiers.get(tier="hot")
    row.max_requests_per_min = 30
    row.save()
    version = _hot(tenant).current_version
    assert version.requests_per_min == 30 and version.created_by == \
        "plan 'Small' bounds changed"
    assert version.number == 3
