"""Who may read whose fulfilment: a tenant's keys and members see that tenant only; platform
staff (superusers, staff without a membership) see every tenant and may pick one."""

from __future__ import annotations

from typing import Any

from apps.core.errors import NotFoundError, PermissionDeniedError
from apps.tenants.models import Tenant
from apps.tenants.selectors import membership_for_user, tenant_for_user


def is_platform_staff(user: Any) -> bool:
    if getattr(user, "api_key", None) is not None or not getattr(user, "is_authenticated", False):
        return False
    return bool(user.is_superuser or (user.is_staff and membership_for_user(user) is None))


def tenant_scope(user: Any, requested: str | None = None) -> list[Tenant] | None:
    """The tenants ``user`` reads: one tenant, or None meaning all (staff without a choice).

    ``requested`` is a tenant slug; staff may pass any, others only their own. Raises
    ``PermissionDeniedError`` / ``NotFoundError`` (OpenAI-shaped) otherwise.
    """
    if is_platform_staff(user):
        if not requested:
            return None
        tenant = Tenant.objects.filter(slug=requested).first()
        if tenant is None:
            raise NotFoundError(f"No tenant '{requested}'.", param="tenant")
        return [tenant]
    tenant = tenant_for_user(user)
    if tenant is None:
        raise PermissionDeniedError("This account does not belong to a tenant.")
    if requested and requested != tenant.slug:
        raise PermissionDeniedError("Only platform staff may read another tenant.",
                                    param="tenant")
    return [tenant]


def tenant_ids(scope: list[Tenant] | None) -> list[int] | None:
    return None if scope is None else [t.pk for t in scope]
