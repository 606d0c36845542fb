"""The data migrations on a database that predates plans: existing tenants go on the default
plan, contracts outside it are clamped with a new version the migration authored, and
contracts within it are left alone."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from apps.slo.models import SLOContract
from apps.tenants.models import Tenant

BEFORE = [("tenants", "0001_initial"), ("slo", "0002_aggregationmark")]
AUTHOR = "migration slo.0003_clamp_contracts_to_plans"


def _migrate(targets=None) -> MigrationExecutor:
    """Migrate to ``targets`` (default: the latest of every app)."""
    executor = MigrationExecutor(connection)
    executor.migrate(targets or executor.loader.graph.leaf_nodes())
    executor.loader.build_graph()
    return executor


def _old_contract(apps, tenant, tier: str, **terms):
    contract_model = apps.get_model("slo", "SLOContract")
    version_model = apps.get_model("slo", "ContractVersion")
    contract = contract_model.objects.create(tenant=tenant, tier=tier, **terms)
    version = version_model.objects.create(contract=contract, number=1, created_by="alice",
                                           **terms)
    contract.current_version = version
    contract.save()
    return contract


@pytest.mark.django_db(transaction=True)
def test_migration_assigns_the_default_plan_and_clamps_contracts_outside_it():
    executor = _migrate(BEFORE)
    try:
        apps = executor.loader.project_state(BEFORE).apps
        tenant = apps.get_model("tenants", "Tenant").objects.create(name="Old", slug="old")
        _old_contract(apps, tenant, "hot", ttft_p99_s=1e-6, priority_weight=1e6,
                      requests_per_min=2**31 - 1, tokens_per_min=2**31 - 1,
                      daily_token_budget=None, tbt_p99_s=0.1)
        _old_contract(apps, tenant, "warm", daily_token_budget=1000, warm_rate_tps=30.0)
    finally:
        _migrate()

    tenant = Tenant.objects.get(slug="old")
    assert tenant.plan is not None and tenant.plan.is_default
    hot = SLOContract.objects.select_related("current_version").get(tenant=tenant, tier="hot")
    version = hot.current_version
    assert (version.number, version.created_by) == (2, AUTHOR)
    assert (hot.ttft_p99_s, hot.priority_weight) == (0.1, 4.0)
    assert (hot.requests_per_min, hot.tokens_per_min) == (6000, 1_000_000)
    assert hot.daily_token_budget == 50_000_000  # unlimited is above any maximum
    assert hot.tbt_p99_s == 0.1 and version.terms() == hot.terms()
    first = hot.versions.get(number=1)
    assert (first.ttft_p99_s, first.created_by) == (1e-6, "alice")  # history kept as signed
    warm = SLOContract.objects.get(tenant=tenant, tier="warm")
    assert warm.current_version.number == 1 and warm.warm_rate_tps == 30.0
