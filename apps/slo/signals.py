"""New tenants work at once: whichever way a tenant is created (``tenant_create``, the admin,
``Tenant.objects.create`` in any service), it is on a plan (the default one unless given) and
gets its plan's default contracts in the same transaction. A receiver, because
``apps.tenants`` must not import ``apps.slo``."""

from __future__ import annotations

from typing import Any

from django.db.models.signals import post_save

from apps.tenants.models import Tenant


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


def install() -> None:
    post_save.connect(_tenant_saved, sender=Tenant, dispatch_uid="slo-tenant-default-contracts")
