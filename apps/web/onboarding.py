"""The pages a newcomer meets: the front page for a visitor, getting started (base URL, models,
a first call with the user's key prefix), the guides of ``docs/`` and the favicon."""

from __future__ import annotations

from django.http import FileResponse, Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.cache import cache_control, never_cache
from django.views.decorators.http import require_GET

from apps.tenants.selectors import api_keys_for_tenant
from apps.web import docs
from apps.web.access import tenant_for_session, tenant_page
from apps.web.chat import chat_setup

FAVICON = b"""<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 32 32">
<defs><linearGradient id="g" x1="0" y1="0" x2="1" y2="1"><stop offset="0" stop-color="#ff6a3d"/>
<stop offset="1" stop-color="#7a5cff"/></linearGradient></defs>
<circle cx="16" cy="16" r="14" fill="url(#g)"/></svg>"""
START_GUIDES = ("api", "gateway", "batches", "slo")


@never_cache
@require_GET
def home(request: HttpRequest) -> HttpResponse:
    """A visitor sees what Laser is and where to sign in; a member goes to the chat (staff who
    have not picked a tenant yet, to the picker)."""
    if not request.user.is_authenticated:
        return render(request, "web/landing.html", {"guides": docs.guides()})
    if tenant_for_session(request.user, request.session) is None:
        return redirect("web-tenants")
    return redirect("web-chat")


@never_cache
@require_GET
@tenant_page
def start(request: HttpRequest) -> HttpResponse:
    setup = chat_setup(request.tenant)
    usable = [k for k in api_keys_for_tenant(tenant=request.tenant) if k.status == "active"]
    mine = [k for k in usable if k.created_by_id == request.user.pk] or usable
    context = {
        "section": "start", "base_url": request.build_absolute_uri("/v1"),
        "models": setup.models, "model": setup.models[0], "tiers": setup.tiers,
        "key": mine[0] if mine else None,
        "guides": [g for g in docs.guides() if g.name in START_GUIDES],
    }
    return render(request, "web/start.html", context)


def _with_tenant(request: HttpRequest) -> None:
    """The guides are public; a signed-in user still gets the app's navigation."""
    if request.user.is_authenticated:
        request.tenant = tenant_for_session(request.user, request.session)


@require_GET
def docs_index(request: HttpRequest) -> HttpResponse:
    _with_tenant(request)
    return render(request, "web/docs_index.html", {"guides": docs.guides(), "section": "docs"})


@require_GET
def guide(request: HttpRequest, name: str) -> HttpResponse:
    path = docs.guide_path(name)
    if path is None:
        raise Http404("No such guide.")
    _with_tenant(request)
    title, body = docs.rendered(path)
    return render(request, "web/guide.html", {"title": title, "body": body, "name": name,
                                              "section": "docs"})


@require_GET
@cache_control(max_age=3600)
def guide_image(request: HttpRequest, name: str) -> FileResponse:
    path = docs.image_path(name)
    if path is None:
        raise Http404("No such image.")
    return FileResponse(path.open("rb"), content_type="image/png")


@require_GET
@cache_control(max_age=86400)
def favicon(request: HttpRequest) -> HttpResponse:
    return HttpResponse(FAVICON, content_type="image/svg+xml")
