"""Clamp every contract outside its tenant's plan to the plan's bound.

Each clamped contract gets a new ``ContractVersion`` authored by this migration, so the
history shows what was signed before, what it became and why; unclamped contracts are left
alone. Written against the historical models (never the app's code), so it keeps working
when the code changes.
"""

from django.db import migrations

AUTHOR = "migration slo.0003_clamp_contracts_to_plans"
# term -> (plan bound, "min" or "max"); None in a bound = no bound.
BOUNDS = {
    "ttft_p99_s": ("min_ttft_p99_s", "min"),
    "tbt_p99_s": ("min_tbt_p99_s", "min"),
    "warm_mean_ttft_s": ("min_warm_mean_ttft_s", "min"),
    "cold_deadline_s": ("min_cold_deadline_s", "min"),
    "priority_weight": ("max_priority_weight", "max"),
    "warm_rate_tps": ("max_warm_rate_tps", "max"),
    "requests_per_min": ("max_requests_per_min", "max"),
    "tokens_per_min": ("max_tokens_per_min", "max"),
    "daily_token_budget": ("max_daily_token_budget", "max"),
}
TERMS = (
    "ttft_p99_s", "tbt_p99_s", "interruption_budget", "demotable", "demotion_budget",
    "priority_weight", "warm_rate_tps", "warm_band", "warm_mean_ttft_s", "cold_deadline_s",
    "cold_percentile", "requests_per_min", "tokens_per_min", "daily_token_budget",
)


def _clamped(contract, bounds) -> dict:
    changed = {}
    for term, (bound_name, kind) in BOUNDS.items():
        bound, value = getattr(bounds, bound_name), getattr(contract, term)
        if bound is None:
            continue
        if value is None:
            outside = kind == "max"  # an unlimited budget exceeds any maximum
        else:
            outside = value < bound if kind == "min" else value > bound
        if outside:
            changed[term] = bound
    return changed


def clamp(apps, schema_editor):
    Plan = apps.get_model("tenants", "Plan")
    PlanTier = apps.get_model("tenants", "PlanTier")
    SLOContract = apps.get_model("slo", "SLOContract")
    ContractVersion = apps.get_model("slo", "ContractVersion")
    default = Plan.objects.filter(is_default=True).first()
    tiers = {(t.plan_id, t.tier): t for t in PlanTier.objects.all()}
    for contract in SLOContract.objects.select_related("tenant").order_by("pk"):
        plan_id = contract.tenant.plan_id or (default.pk if default else None)
        bounds = tiers.get((plan_id, contract.tier))
        changed = _clamped(contract, bounds) if bounds is not None else {}
        if not changed:
            continue
        for term, value in changed.items():
            setattr(contract, term, value)
        last = (ContractVersion.objects.filter(contract=contract).order_by("-number")
                .values_list("number", flat=True).first())
        version = ContractVersion.objects.create(
            contract=contract, number=(last or 0) + 1, created_by=AUTHOR,
            **{name: getattr(contract, name) for name in TERMS},
        )
        contract.current_version = version
        contract.save()


class Migration(migrations.Migration):

    dependencies = [
        ("slo", "0002_aggregationmark"),
        ("tenants", "0002_plans"),
    ]

    operations = [
        migrations.RunPython(clamp, migrations.RunPython.noop),
    ]
