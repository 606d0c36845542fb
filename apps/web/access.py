"""Who works in which tenant in the web app.

A member of a tenant works in that tenant; platform staff (``apps.slo.access``) pick any active
tenant first. The choice lives in the session under ``TENANT_KEY`` and is checked again on every
request, so a stale or forged choice never reaches another tenant's data.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect

from apps.slo.access import is_platform_staff
from apps.tenants.models import Membership, Tenant
from apps.tenants.selectors import membership_for_user

TENANT_KEY = "web_tenant"


def tenant_choices(user: Any) -> list[Tenant]:
    """The tenants ``user`` may work in: every active one for platform staff, else its own."""
    if is_platform_staff(user):
        return list(Tenant.objects.filter(is_active=True).order_by("name"))
    membership = membership_for_user(user)
    if membership is None or not membership.tenant.is_active:
        return []
    return [membership.tenant]


def tenant_for_session(user: Any, session: Any) -> Tenant | None:
    """The tenant chosen in ``session`` if ``user`` may use it; the only one if there is one."""
    choices = tenant_choices(user)
    wanted = session.get(TENANT_KEY)
    chosen = next((t for t in choices if t.slug == wanted), None)
    if chosen is None and len(choices) == 1 and not is_platform_staff(user):
        chosen = choices[0]
    return chosen


def is_member(user: Any, tenant: Tenant) -> bool:
    """Whether ``user`` belongs to ``tenant`` (the chat runs as a member of the tenant)."""
    membership = membership_for_user(user)
    return membership is not None and membership.tenant_id == tenant.pk


def can_manage_keys(user: Any, tenant: Tenant) -> bool:
    """Tenant admins (membership role ``admin``) and platform staff create and revoke keys."""
    if is_platform_staff(user):
        return True
    return is_member(user, tenant) and membership_for_user(user).role == Membership.Role.ADMIN


def tenant_page(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """Log-in required; sets ``request.tenant`` or sends the user to the tenant picker."""

    @login_required
    @wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        tenant = tenant_for_session(request.user, request.session)
        if tenant is None:
            return redirect("web-tenants")
        request.tenant = tenant
        return view(request, *args, **kwargs)

    return wrapper
