"""API keys of the tenant: list (everyone), create and revoke (tenant admins and staff)."""

from __future__ import annotations

import datetime as dt

from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST

from apps.core.jsonbody import text_problem
from apps.core.tiers import CHOICES
from apps.slo.selectors import contracts_for_tenant
from apps.tenants.models import ApiKey
from apps.tenants.plans import tenant_limits
from apps.tenants.selectors import api_keys_for_tenant
from apps.tenants.services import api_key_create, api_key_revoke
from apps.web.access import can_manage_keys, tenant_page
from apps.web.chat import chat_setup

MAX_EXPIRY_DAYS = 3650


def _page(request: HttpRequest, *, created: ApiKey | None = None, secret: str = "",
          errors: dict[str, str] | None = None, status: int = 200) -> HttpResponse:
    tenant = request.tenant
    setup = chat_setup(tenant)
    base_url = request.build_absolute_uri("/v1")
    keys = api_keys_for_tenant(tenant=tenant)
    contracts = {c.tier: c for c in contracts_for_tenant(tenant=tenant)}
    for key in keys:  # the limits a key draws on: its default tier's contract
        key.limits = contracts.get(key.default_tier)
    context = {
        "section": "keys", "keys": keys,
        "can_manage": can_manage_keys(request.user, tenant),
        "tiers": [(t, label) for t, label in CHOICES if t in setup.tiers],
        "created": created, "secret": secret, "errors": errors or {},
        "base_url": base_url, "model": setup.models[0], "form": {} if created else request.POST,
        "plan": tenant_limits(tenant),
    }
    return render(request, "web/keys.html", context, status=status)


@never_cache
@require_GET
@tenant_page
def keys(request: HttpRequest) -> HttpResponse:
    return _page(request)


def _expiry(raw: str) -> dt.datetime | None:
    if not raw.strip():
        return None
    if not raw.strip().isdigit() or not 1 <= int(raw) <= MAX_EXPIRY_DAYS:
        raise ValueError(f"Expiry must be a whole number of days from 1 to {MAX_EXPIRY_DAYS}.")
    return timezone.now() + dt.timedelta(days=int(raw))


@never_cache
@require_POST
@tenant_page
def key_create(request: HttpRequest) -> HttpResponse:
    """Create a key and show its secret in this response only (never stored, never again)."""
    if not can_manage_keys(request.user, request.tenant):
        raise PermissionDenied("Only tenant admins can create API keys.")
    name = request.POST.get("name", "").strip()
    tier = request.POST.get("default_tier", "")
    errors: dict[str, str] = {}
    if len(name) > 100:
        errors["name"] = "At most 100 characters."
    elif (problem := text_problem(name)) is not None:  # PostgreSQL would refuse a NUL
        errors["name"] = f"The name {problem}."
    if tier not in chat_setup(request.tenant).tiers:
        errors["default_tier"] = "Choose a tier your tenant holds a contract for."
    try:
        expires_at = _expiry(request.POST.get("expires_days", ""))
    except ValueError as exc:
        errors["expires_days"] = str(exc)
    if errors:
        return _page(request, errors=errors, status=400)
    created, secret = api_key_create(tenant=request.tenant, name=name, default_tier=tier,
                                     expires_at=expires_at, created_by=request.user)
    return _page(request, created=created, secret=secret, status=201)


@require_POST
@tenant_page
def key_revoke(request: HttpRequest, key_id: int) -> HttpResponse:
    if not can_manage_keys(request.user, request.tenant):
        raise PermissionDenied("Only tenant admins can revoke API keys.")
    found = next((k for k in api_keys_for_tenant(tenant=request.tenant) if k.pk == key_id), None)
    if found is None:
        raise Http404("No such API key.")
    api_key_revoke(api_key=found)
    return redirect("web-keys")
