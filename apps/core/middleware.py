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

import logging
from typing import Any

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.core.exceptions import BadRequest, PermissionDenied, SuspiciousOperation
from django.http import Http404, HttpRequest, HttpResponse
from django.http.multipartparser import MultiPartParserError

from apps.core.errors import handler500
from apps.core.request_id import HEADER, request_id_for

logger = logging.getLogger("laser.errors")

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
        logger.error("unhandled %s in %s %s (request %s)", type(exception).__name__,
                     request.method, request.path, rid, exc_info=exception)
        return handler500(request)
