from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync
from django.core.exceptions import ValidationError

from apps.slo.models import ContractVersion, SLOContract
from apps.slo.selectors import acontract_for, contract_for, contracts_for_tenant
from apps.slo.services import contract_create, contract_update, contracts_ensure_defaults
from inference.request import ContractTargets

pytestmark = pytest.mark.django_db


def test_defaults_cover_every_tier_with_the_design_table(tenant_factory):
    tenant = tenant_factory()
    contracts_ensure_defaults(tenant=tenant)
    contracts_ensure_defaults(tenant=tenant)  # idempotent
    snaps = contracts_for_tenant(tenant=tenant)
    assert [s.tier for s in snaps] == ["hot", "warm", "cold"]
    hot, warm, cold = snaps
    assert (hot.targets.ttft_p99_s, hot.targets.tbt_p99_s) == (0.2, 0.1)
    assert hot.targets.interruption_budget == 0.001
    assert (warm.targets.warm_band, warm.targets.warm_mean_ttft_s) == (0.05, 2.0)
    assert (cold.cold_deadline_s, cold.targets.cold_percentile) == (4 * 3600.0, 99.0)
    assert SLOContract.objects.filter(tenant=tenant).count() == 3
    assert all(s.version == 1 and s.version_id for s in snaps)


def test_a_change_creates_a_new_version_and_keeps_history(tenant_factory):
    tenant = tenant_factory()
    contract = contract_create(tenant=tenant, tier="hot", ttft_p99_s=0.3)
    first = contract_for(tenant=tenant, tier="hot")
    contract_update(contract=contract, ttft_p99_s=0.25, created_by="alice")
    second = contract_for(tenant=tenant, tier="hot")
    assert (first.version, second.version) == (1, 2)
    assert first.version_id != second.version_id
    assert second.targets.ttft_p99_s == 0.25
    old = ContractVersion.objects.get(pk=first.version_id)
    assert old.ttft_p99_s == 0.3  # the old version is untouched
    contract_update(contract=contract, ttft_p99_s=0.25)  # no change, no new version
    assert contract.versions.count() == 2


def test_snapshot_is_plain_values_for_the_engine(tenant_factory):
    tenant = tenant_factory()
    contract_create(tenant=tenant, tier="warm", warm_rate_tps=33.0, daily_token_budget=1000)
    snap = contract_for(tenant=tenant.pk, tier="warm")
    assert isinstance(snap.targets, ContractTargets)
    assert snap.targets.warm_rate_tps == 33.0 and snap.daily_token_budget == 1000
    assert snap.targets.version == 1
    assert contract_for(tenant=tenant, tier="cold") is None
    assert async_to_sync(acontract_for)(tenant=tenant, tier="warm") == snap


def test_tenants_see_only_their_contracts(tenant_factory):
    a, b = tenant_factory(), tenant_factory()
    contract_create(tenant=a, tier="hot")
    assert contract_for(tenant=b, tier="hot") is None
    assert contracts_for_tenant(tenant=b) == []


@pytest.mark.parametrize(
    ("terms", "field", "words"),
    [
        ({"ttft_p99_s": 0}, "ttft_p99_s", "greater than zero"),
        ({"tbt_p99_s": -0.1}, "tbt_p99_s", "greater than zero"),
        ({"cold_percentile": 0}, "cold_percentile", "(0, 100]"),
        ({"cold_percentile": 100.5}, "cold_percentile", "(0, 100]"),
        ({"cold_deadline_s": 10}, "cold_deadline_s", "cannot honour"),
        ({"interruption_budget": 0}, "interruption_budget", "more than 0"),
        ({"warm_band": 1.0}, "warm_band", "less than 1"),
        ({"daily_token_budget": 0}, "daily_token_budget", "greater than zero"),
    ],
)
def test_invalid_terms_are_refused_with_a_clear_message(tenant_factory, terms, field, words):
    with pytest.raises(ValidationError) as info:
        contract_create(tenant=tenant_factory(), tier="hot", **terms)
    assert words in " ".join(info.value.message_dict[field])


def test_percentile_100_and_unlimited_budget_for_staff_are_fine(tenant_factory):
    contract = contract_create(tenant=tenant_factory(), tier="cold", cold_percentile=100.0,
                               daily_token_budget=None, beyond_plan=True)
    assert contract.daily_token_budget is None and contract.cold_percentile == 100.0
