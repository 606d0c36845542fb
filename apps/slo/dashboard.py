"""Dashboard pages: login, the live fulfilment page and the JSON it polls.

A member sees its own tenant; platform staff see every tenant and switch with ``?tenant=``.
"""

from __future__ import annotations

from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.cache import never_cache

from apps.core import tiers
from apps.slo import dashboard_data
from apps.slo.access import is_platform_staff
from apps.slo.models import SLOContract
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
