"""Rename and delete a playground conversation (its owner only: another user's or tenant's id
answers 404, as if it did not exist)."""

from __future__ import annotations

from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from apps.web.access import tenant_page
from apps.web.conversations import conversation_delete, conversation_get, conversation_rename
from apps.web.models import Conversation


def _owned(request: HttpRequest, conversation_id: str) -> Conversation:
    found = conversation_get(tenant=request.tenant, user=request.user,
                             conversation_id=conversation_id)
    if found is None:
        raise Http404("No such conversation.")
    return found


def _answer(request: HttpRequest, body: dict) -> HttpResponse:
    """JSON for the page's fetch, a redirect back to the chat for a plain form."""
    if "application/json" in request.headers.get("Accept", ""):
        return JsonResponse(body)
    return redirect("web-chat")


@require_POST
@tenant_page
def rename(request: HttpRequest, conversation_id: str) -> HttpResponse:
    found = _owned(request, conversation_id)
    conversation_rename(conversation=found, title=request.POST.get("title", ""))
    return _answer(request, {"id": found.pk.hex, "title": found.title})


@require_POST
@tenant_page
def delete(request: HttpRequest, conversation_id: str) -> HttpResponse:
    found = _owned(request, conversation_id)
    conversation_delete(conversation=found)
    return _answer(request, {"id": conversation_id, "deleted": True})
