"""Request ids, and every 500 logged with its traceback and that id.

``RequestIdMiddleware`` gives each request an id (the client's ``X-Request-Id`` when it is a
short token, else ``req_<hex>``), returns it in the ``X-Request-Id`` header unless the view set
its own (the gateway answers with the completion id), and answers an exception that escaped a
view: logged once with traceback, method, path and the id, then the OpenAI 500 body naming the
id for ``/v1/`` and ``/api/`` paths, Django's 500 page elsewhere.

Works for sync and async views alike (the streaming completions views are async), so it adds
no thread hop. Errors a view turns into a response itself (the gateway's pipeline) or that
happen while a streaming body is sent never reach it; those paths log on their own.
"""

from __future__ import annotations

from typing import Any

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.core.exceptions import BadRequest, PermissionDenied, SuspiciousOperation
from django.http import Http404, HttpRequest, HttpResponse
from django.http.multipartparser import MultiPartParserError
from django.middleware import clickjacking, common, security

from apps.core.errors import fault_logger, handler500
from apps.core.request_id import HEADER, request_id_for

# Django answers these itself with a 400, 403 or 404: not a fault of ours.
CLIENT_FAULTS = (Http404, PermissionDenied, BadRequest, SuspiciousOperation, MultiPartParserError)


class RequestIdMiddleware:
    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Any) -> None:
        self.get_response = get_response
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> Any:
        if self.is_async:
            return self._acall(request)
        request_id_for(request)
        return self._tag(request, self.get_response(request))

    async def _acall(self, request: HttpRequest) -> HttpResponse:
        request_id_for(request)
        return self._tag(request, await self.get_response(request))

    @staticmethod
    def _tag(request: HttpRequest, response: HttpResponse) -> HttpResponse:
        if HEADER not in response:
            response[HEADER] = request_id_for(request)
        return response

    def process_exception(self, request: HttpRequest,
                          exception: Exception) -> HttpResponse | None:
        if isinstance(exception, CLIENT_FAULTS):
            return None
        rid = request_id_for(request)
        fault_logger.error("unhandled %s in %s %s (request %s)", type(exception).__name__,
                           request.method, request.path, rid, exc_info=exception)
        return handler500(request)


class InlineHooks:
    """Runs a ``MiddlewareMixin`` middleware's hooks on the event loop in async requests.

    Django's ``MiddlewareMixin.__acall__`` runs ``process_request`` and ``process_response`` in
    a worker thread each (``sync_to_async``), in case they touch the database: two thread hops
    per middleware per request, for hooks that here only read the request and set headers.
    With the seven stock middlewares an API request made twelve such hops, and on a 2-core
    machine the server's CPU for them comes out of the engine's steps (docs/benchmarks.md,
    "Gateway"). Only for hooks that do no I/O (no database, no files, no
    session): SecurityMiddleware, CommonMiddleware, XFrameOptionsMiddleware, which
    ``apps.core.handler.ASGIHandler`` puts in their places (``INLINE``).
    """

    get_response: Any

    async def __acall__(self, request: HttpRequest) -> HttpResponse:
        response = None
        if hasattr(self, "process_request"):
            response = self.process_request(request)
        response = response or await self.get_response(request)
        if hasattr(self, "process_response"):
            response = self.process_response(request, response)
        return response


class SecurityMiddleware(InlineHooks, security.SecurityMiddleware):
    """Django's, its header hooks inline (``InlineHooks``)."""


class CommonMiddleware(InlineHooks, common.CommonMiddleware):
    """Django's, its hooks inline (``InlineHooks``): the slash redirect resolves URLs only."""


class XFrameOptionsMiddleware(InlineHooks, clickjacking.XFrameOptionsMiddleware):
    """Django's, its header hook inline (``InlineHooks``)."""


# Django's middlewares whose hooks ``apps.core.handler.ASGIHandler`` runs inline
INLINE = {
    "django.middleware.security.SecurityMiddleware": "apps.core.middleware.SecurityMiddleware",
    "django.middleware.common.CommonMiddleware": "apps.core.middleware.CommonMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware":
        "apps.core.middleware.XFrameOptionsMiddleware",
}
