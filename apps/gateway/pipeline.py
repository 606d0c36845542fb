"""REST transport: `/v1/chat/completions` and `/v1/completions`, as JSON or as SSE.

It reads the key and the body, hands them to ``serving.serve`` (which owns everything from
the key's validity to the SLO record) and only formats the result: one JSON object, or the SSE
stream of ``sse.events``. A hot stream's headers wait for the engine's first delta, so
``X-Laser-Tier`` says warm when the engine demoted it before its first token, and an engine
refusal before it is still a status (warm and cold streams, which may queue long, send them at
once). Django cancels the view (or the streaming iterator) when the client
goes away, which closes the ``Served`` and aborts the engine request.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.http.response import HttpResponseBase

from apps.core.errors import APIError, json_error_response
from apps.core.request_id import request_id_set
from apps.core.tiers import Tier
from apps.gateway import admission, http, serving, sse
from apps.gateway.engine_errors import api_error
from apps.gateway.responses import completion_body
from apps.gateway.slots import Caller


def error_response(exc: BaseException) -> HttpResponse:
    return json_error_response(api_error(exc))  # a fault of ours is logged there


async def handle(request: HttpRequest, kind: str) -> HttpResponseBase:
    """Serve one `/v1/chat/completions` or `/v1/completions` request."""
    endpoint = f"/v1/{kind.replace('.', '/')}"
    try:
        http.require_post(request)
        admission.check_accepting()
        caller = Caller.for_key(await http.authenticate(request))
    except APIError as exc:  # before a tenant is known: nothing to book
        return error_response(exc)
    try:
        body = http.read_json_object(request)
    except APIError as exc:
        return error_response(serving.refuse(caller, endpoint, exc))
    try:
        served = await serving.serve(caller=caller, kind=kind, body=body, endpoint=endpoint)
    except APIError as exc:
        return error_response(exc)
    request_id_set(request, served.request_id)  # the id its header, errors and logs name
    if served.parsed is not None and served.parsed.stream:
        if served.parsed.tier == Tier.HOT:  # bounded: served, demoted or refused soon
            try:
                await served.first()
            except APIError as exc:
                return error_response(exc)
        return _streaming_response(served)
    return await _whole_response(served)


def _headers(served: serving.Served, tier: str) -> dict[str, str]:
    return {"X-Laser-Tier": tier, "X-Request-Id": served.request_id}


def _streaming_response(served: serving.Served) -> StreamingHttpResponse:
    assert served.parsed is not None
    response = StreamingHttpResponse(sse.events(served), content_type="text/event-stream")
    for name, value in _headers(served, served.tier_now).items():
        response[name] = value
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # proxies must not buffer token-by-token output
    return response


async def _whole_response(served: serving.Served) -> HttpResponse:
    try:
        result = await served.complete()
    except APIError as exc:
        return error_response(exc)
    assert served.parsed is not None
    body = completion_body(served.parsed, result, served.client.token_text)
    return JsonResponse(body, headers=_headers(served, str(result.tier_served)))
