"""New tenants work at once: whichever way a tenant is created (``tenant_create``, the admin,
``Tenant.objects.create`` in any service), it is on a plan (the default one unless given) and
gets its plan's default contracts in the same transaction; and whichever way it moves to
another plan, or its plan's bounds change, its contracts are clamped to the bounds. Receivers,
because ``apps.tenants`` must not import ``apps.slo``."""

from __future__ import annotations

from typing import Any

from django.db.models.signals import post_save, pre_save

from apps.tenants.models import PlanTier, Tenant


def _tenant_saved(sender: type, instance: Tenant, created: bool, raw: bool = False,
                  **kwargs: Any) -> None:
    # ``skip_default_contracts``: ``tenant_create(default_contracts=False)``, for tests that
    # need a tenant holding only the contracts they make. ``raw``: loading fixtures.
    if not created or raw:
        return
    if instance.plan_id is None:  # created without a plan: the default plan, as tenant_create
        from apps.tenants.services import plan_ensure_default

        instance.plan = plan_ensure_default()
        Tenant.objects.filter(pk=instance.pk).update(plan=instance.plan)
    if getattr(instance, "skip_default_contracts", False):
        return
    from apps.slo.services import contracts_ensure_defaults

    contracts_ensure_defaults(tenant=instance)


def _plan_before(sender: type, instance: Tenant, raw: bool = False,
                 update_fields: Any = None, **kwargs: Any) -> None:
    """Remember the plan a saved tenant was on (``_plan_moved`` compares)."""
    if raw or instance.pk is None or (update_fields is not None and "plan" not in update_fields):
        return
    instance._plan_was = (Tenant.objects.filter(pk=instance.pk)
                          .values_list("plan_id", flat=True).first())


def _plan_moved(sender: type, instance: Tenant, created: bool, raw: bool = False,
                **kwargs: Any) -> None:
    """A tenant moved to another plan (``tenant_plan_change``, the admin, any save): its
    contracts are clamped to the new plan's bounds, each change a version of its own."""
    was = instance.__dict__.pop("_plan_was", None)
    if created or raw or was is None or was == instance.plan_id:
        return
    from apps.slo.services import contracts_clamp_to_plan
    from apps.tenants.models import Plan

    names = dict(Plan.objects.filter(pk__in=[was, instance.plan_id]).values_list("pk", "name"))
    contracts_clamp_to_plan(tenant=instance, created_by=(
        f"plan change: {names.get(was, was)} -> {names.get(instance.plan_id, '')}"))


def _bounds_changed(sender: type, instance: PlanTier, raw: bool = False, **kwargs: Any) -> None:
    """A plan's bounds for a tier changed: every tenant on the plan is clamped to them."""
    if raw:
        return
    from apps.slo.services import contracts_clamp_to_plan

    for tenant_id in Tenant.objects.filter(plan_id=instance.plan_id).values_list("pk", flat=True):
        contracts_clamp_to_plan(tenant=tenant_id, tiers=(instance.tier,),
                                created_by=f"plan '{instance.plan.name}' bounds changed")


def install() -> None:
    post_save.connect(_tenant_saved, sender=Tenant, dispatch_uid="slo-tenant-default-contracts")
    pre_save.connect(_plan_before, sender=Tenant, dispatch_uid="slo-tenant-plan-before")
    post_save.connect(_plan_moved, sender=Tenant, dispatch_uid="slo-tenant-plan-moved")
    post_save.connect(_bounds_changed, sender=PlanTier, dispatch_uid="slo-plan-bounds-changed")
