"""Liveness and readiness probes."""

from __future__ import annotations

from asgiref.sync import sync_to_async
from django.db import connection
from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_GET

from apps.core.errors import APIError, json_error_response
from apps.core.lifecycle import lifecycle


@require_GET
async def health(request: HttpRequest) -> JsonResponse:
    """Liveness: the process answers. Always 200 (even while draining)."""
    return JsonResponse({"status": "ok"})


def _database_ok() -> bool:
    try:
        connection.ensure_connection()
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        return True
    except Exception:
        return False


@require_GET
async def ready(request: HttpRequest) -> JsonResponse:
    """Readiness: 200 when the database answers, every component is ready and we are not
    draining; else 503 in the OpenAI error shape naming what is not ready."""
    reasons = lifecycle.not_ready()
    if not await sync_to_async(_database_ok, thread_sensitive=True)():
        reasons.insert(0, "database")
    if not reasons:
        return JsonResponse({"status": "ready"})
    error = APIError(
        f"Not ready: {', '.join(reasons)}.",
        status=503,
        type="server_error",
        code="not_ready",
        headers={"Retry-After": "5"},
    )
    return json_error_response(error)
