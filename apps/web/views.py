"""Sign-in, the tenant picker and the chat page."""

from __future__ import annotations

from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods

from apps.core import tiers
from apps.web.access import (
    TENANT_KEY,
    is_member,
    tenant_choices,
    tenant_for_session,
    tenant_page,
)
from apps.web.chat import MAX_TOKENS_LIMIT, SYSTEM_MAX_CHARS, chat_setup
from apps.web.conversations import conversations_for


class LoginView(auth_views.LoginView):
    """The one sign-in page (app and dashboard); ``authenticate`` runs inside the form."""

    template_name = "web/login.html"
    redirect_authenticated_user = True
    next_page = "/"
    extra_context = {"default_next": "/"}


class DashboardLoginView(LoginView):
    """The same sign-in at the dashboard's address (where its pages send visitors)."""

    next_page = "/dashboard/"
    extra_context = {"default_next": "/dashboard/"}


class LogoutView(auth_views.LogoutView):
    next_page = "/login/"


@never_cache
@login_required
@require_http_methods(["GET", "POST"])
def tenants(request: HttpRequest) -> HttpResponse:
    """Platform staff pick the tenant they work in (members of one tenant skip this)."""
    choices = tenant_choices(request.user)
    if request.method == "POST":
        chosen = next((t for t in choices if t.slug == request.POST.get("tenant")), None)
        if chosen is not None:
            request.session[TENANT_KEY] = chosen.slug
            return redirect("web-chat")
    current = tenant_for_session(request.user, request.session)
    return render(request, "web/tenants.html", {"choices": choices, "tenant": current},
                  status=400 if request.method == "POST" else 200)


@never_cache
@tenant_page
def chat(request: HttpRequest) -> HttpResponse:
    setup = chat_setup(request.tenant)
    if not is_member(request.user, request.tenant):
        return render(request, "web/chat.html", {"setup": None, "section": "chat"})
    config = {"tiers": setup.tiers, "default_tier": setup.default_tier, "terms": setup.terms,
              "models": setup.models, "socket": "/ws/app/chat/", "tier_names": tiers.NAMES,
              "base_url": request.build_absolute_uri("/v1"), "max_tokens": MAX_TOKENS_LIMIT}
    return render(request, "web/chat.html", {
        "setup": setup, "config": config, "section": "chat", "max_tokens": MAX_TOKENS_LIMIT,
        "system_max": SYSTEM_MAX_CHARS,
        "conversations": conversations_for(tenant=request.tenant, user=request.user)})
