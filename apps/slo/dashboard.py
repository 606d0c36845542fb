"""Dashboard pages: login, the live fulfilment page, the JSON it polls and the requests behind
a window (where a violation links).

A member sees its own tenant; platform staff see every tenant and switch with ``?tenant=``.
"""

from __future__ import annotations

from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.utils.dateparse import parse_datetime
from django.views.decorators.cache import never_cache

from apps.core import tiers
from apps.slo import dashboard_data, windows
from apps.slo.access import is_platform_staff
from apps.slo.models import SLOContract
from apps.slo.selectors import contract_for, records_in_window
from apps.tenants.models import Tenant
from apps.tenants.selectors import tenant_for_user

LOGIN_URL = "/dashboard/login/"


class LoginView(auth_views.LoginView):
    template_name = "slo/login.html"
    redirect_authenticated_user = True
    next_page = "/dashboard/"


class LogoutView(auth_views.LogoutView):
    next_page = LOGIN_URL


def _tenant_for(request: HttpRequest) -> tuple[Tenant | None, list[Tenant]]:
    """(tenant shown, tenants the user may switch between)."""
    if is_platform_staff(request.user):
        tenants = list(Tenant.objects.filter(is_active=True).order_by("name"))
        wanted = request.GET.get("tenant")
        chosen = next((t for t in tenants if t.slug == wanted), None)
        if chosen is None and not wanted:
            with_contracts = set(SLOContract.objects.values_list("tenant_id", flat=True))
            chosen = next((t for t in tenants if t.pk in with_contracts), None) or (
                tenants[0] if tenants else None)
        return chosen, tenants
    tenant = tenant_for_user(request.user)
    if tenant is None:
        raise PermissionDenied("This account does not belong to a tenant.")
    if request.GET.get("tenant") not in (None, "", tenant.slug):
        raise PermissionDenied("Only platform staff may view another tenant.")
    return tenant, [tenant]


@never_cache
@login_required(login_url=LOGIN_URL)
def dashboard_page(request: HttpRequest) -> HttpResponse:
    tenant, tenants = _tenant_for(request)
    context = {"tenant": tenant, "tenants": tenants, "staff": is_platform_staff(request.user),
               "tier_names": tiers.NAMES}
    return render(request, "slo/dashboard.html", context)


@never_cache
@login_required(login_url=LOGIN_URL)
def dashboard_data_view(request: HttpRequest) -> JsonResponse:
    tenant, _ = _tenant_for(request)
    if tenant is None:
        return JsonResponse({"tenant": None, "cards": [], "batches": [], "violations": []})
    return JsonResponse(dashboard_data.payload(tenant))


@never_cache
@login_required(login_url=LOGIN_URL)
def window_requests(request: HttpRequest) -> HttpResponse:
    """``?tier=&window=&start=`` (ISO, UTC) and optionally ``term=``: the tenant's requests of
    that tier in that window, each marked where it missed the contract's latency targets."""
    tenant, _ = _tenant_for(request)
    tier, window = request.GET.get("tier", ""), request.GET.get("window", "")
    start = parse_datetime(request.GET.get("start", "").replace(" ", "+"))
    if tenant is None or tier not in tiers.TIERS or window not in windows.LENGTH or (
            start is None or start.tzinfo is None):
        return render(request, "slo/requests.html", {"error": True, "tenant": tenant},
                      status=400)
    start = windows.floor(start, window)
    end = start + windows.LENGTH[window]
    snap = contract_for(tenant=tenant, tier=tier)
    records = records_in_window(tenant=tenant, tier=tier, start=start, end=end)
    term = request.GET.get("term", "")
    context = {"tenant": tenant, "tier": tier, "window": window, "start": start, "end": end,
               "term": dashboard_data.TERM_LABELS.get(term, ""), "records": records,
               "ttft_target": _ttft_target(snap, tier), "ttft_is_p99": tier == tiers.Tier.HOT,
               "tbt_target": snap.targets.tbt_p99_s if snap and tier == tiers.Tier.HOT else None}
    return render(request, "slo/requests.html", context)


def _ttft_target(snap: object, tier: str) -> float | None:
    if snap is None or tier == tiers.Tier.COLD:
        return None
    targets = snap.targets  # type: ignore[attr-defined]
    return targets.ttft_p99_s if tier == tiers.Tier.HOT else targets.warm_mean_ttft_s
