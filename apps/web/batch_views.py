"""Batches of the tenant: upload a JSONL file and start it, live progress, cancel, downloads."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import csrf_exempt, csrf_protect
from django.views.decorators.http import require_GET, require_POST

from apps.batches import uploads
from apps.batches.files import file_content, file_create
from apps.batches.presenters import batch_object
from apps.batches.selectors import batches_list, request_counts_many
from apps.batches.services import CANCELLABLE, batch_cancel, batch_create
from apps.batches.storage import PART_BYTES
from apps.batches.validation import ENDPOINTS
from apps.core.downloads import attachment
from apps.core.errors import APIError, NotFoundError
from apps.web.access import is_member, tenant_page

LIST_LIMIT = 20
REASONS_SHOWN = 3  # a failed batch's first reasons in its row; all are in its error file
TERMINAL = ("completed", "failed", "expired", "cancelled")


def _time_left(seconds: float, finished: bool) -> str:
    if finished:
        return "ended"
    if seconds <= 0:
        return "passed"
    hours, minutes = divmod(int(seconds) // 60, 60)
    return f"in {hours} h {minutes:02d} min" if hours else f"in {max(minutes, 1)} min"


def _progress(tenant: Any) -> list[dict[str, Any]]:
    """The tenant's latest batches (the API's batch objects) with the share done and the
    seconds left to the deadline, newest first."""
    rows, _ = batches_list(tenant=tenant, limit=LIST_LIMIT)
    counts = request_counts_many(rows)
    now = time.time()
    shown = []
    for batch in rows:
        item = batch_object(batch, counts[batch.pk])
        done = item["request_counts"]["completed"] + item["request_counts"]["failed"]
        total = item["request_counts"]["total"]
        finished = item["status"] in TERMINAL
        item.update(percent=round(100 * done / total) if total else (100 if finished else 0),
                    deadline_text=_time_left(item["expires_at"] - now, finished),
                    finished=finished, cancellable=item["status"] in CANCELLABLE)
        item["reasons"] = _reasons(item)
        shown.append(item)
    return shown


def _reasons(item: dict[str, Any]) -> dict[str, Any] | None:
    """The first ``REASONS_SHOWN`` of a failed batch's errors and how many more there are."""
    errors = (item.get("errors") or {}).get("data") or []
    if not errors:
        return None
    return {"shown": errors[:REASONS_SHOWN], "more": max(0, len(errors) - REASONS_SHOWN)}


def _page(request: HttpRequest, *, error: APIError | None = None, status: int = 200,
          started: str = "", form: Any = None, failed: dict | None = None) -> HttpResponse:
    context = {"section": "batches", "batches": _progress(request.tenant),
               "can_start": is_member(request.user, request.tenant),
               "endpoints": sorted(ENDPOINTS), "error": error, "started": started,
               "failed": failed, "form": request.POST if form is None else form}
    return render(request, "web/batches.html", context, status=status)


@never_cache
@require_GET
@tenant_page
def batches(request: HttpRequest) -> HttpResponse:
    return _page(request, started=request.GET.get("started", ""))


@never_cache
@require_GET
@tenant_page
def batches_progress(request: HttpRequest) -> JsonResponse:
    """The list for the page's poll: the data and the rows rendered as on the page."""
    shown = _progress(request.tenant)
    rows = render_to_string("web/batch_rows.html", {"batches": shown}, request=request)
    return JsonResponse({"batches": shown, "html": rows})


@csrf_exempt  # checked by _start, once the upload handlers are in place
@require_POST
@tenant_page
def batch_start(request: HttpRequest) -> HttpResponse:
    """Upload the file (streamed to disk, capped like ``POST /v1/files``) and create the batch;
    a refused file or window re-renders the form. Its lines run as the signed-in user, so only
    members of the tenant start batches."""
    if not is_member(request.user, request.tenant):
        raise PermissionDenied("Batches run as a member of the tenant.")
    try:
        uploads.cap(SimpleNamespace(META=request.META, _request=request), tenant=request.tenant)
    except APIError as exc:  # refused by its declared size: the body stays unread
        return _page(request, error=exc, status=exc.status, form={})
    try:
        return _start(request)
    except APIError as exc:
        return _page(request, error=exc, status=exc.status)


@csrf_protect
def _start(request: HttpRequest) -> HttpResponse:
    upload = request.FILES.get("file")
    if upload is None:
        raise APIError("Choose a JSONL file to upload.", status=400, param="file",
                       code="missing_required_parameter")
    stored = file_create(tenant=request.tenant, filename=upload.name or "upload.jsonl",
                         content=upload.chunks(PART_BYTES), size=upload.size, purpose="batch")
    batch = batch_create(tenant=request.tenant, api_key=None, created_by=request.user,
                         input_file_id=stored.uid, endpoint=request.POST.get("endpoint"),
                         completion_window=request.POST.get("completion_window", ""),
                         validate_now=True)
    if batch.status == "failed":  # validated at upload: say why, line by line
        return _page(request, status=400, failed=batch_object(batch))
    return redirect(f"/batches/?started={batch.uid}")


@require_POST
@tenant_page
def batch_cancel_view(request: HttpRequest, batch_id: str) -> HttpResponse:
    try:
        batch_cancel(tenant=request.tenant, batch_id=batch_id)
    except NotFoundError as exc:
        raise Http404(exc.message) from exc
    except APIError as exc:
        return _page(request, error=exc, status=exc.status)
    return redirect("web-batches")


@require_GET
@tenant_page
def file_download(request: HttpRequest, file_id: str) -> HttpResponse:
    try:
        found, chunks = file_content(tenant=request.tenant, file_id=file_id)
    except NotFoundError as exc:
        raise Http404(exc.message) from exc
    response = StreamingHttpResponse(chunks, content_type="application/jsonl")
    response["Content-Length"] = str(found.bytes)
    response["Content-Disposition"] = attachment(found.filename)
    return response
