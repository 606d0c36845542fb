"""``/v1/responses`` (create, retrieve) and ``/v1/embeddings`` (refused in the OpenAI error
shape). A response is served by ``serving.serve`` as a chat request (``responses_api``) and,
with ``store`` (the default), kept for its tenant so a later ``previous_response_id``
continues the conversation; another tenant's id is not found."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

from django.http import HttpRequest, JsonResponse, StreamingHttpResponse
from django.http.response import HttpResponseBase
from django.views.decorators.csrf import csrf_exempt

from apps.core.errors import APIError, BadRequestError, MethodNotAllowedError, NotFoundError
from apps.core.jsonbody import printable
from apps.gateway import admission, http, serving
from apps.gateway import responses_api as api
from apps.gateway.engine_errors import api_error, ended_early
from apps.gateway.models import StoredResponse
from apps.gateway.params import CHAT
from apps.gateway.pipeline import error_response
from apps.gateway.responses import reads_calls
from apps.gateway.responses_stream import EventWriter
from apps.gateway.slots import Caller
from apps.gateway.trace import CANCELLED, INTERRUPTED, OK, error_code

logger = logging.getLogger(__name__)
ENDPOINT = "/v1/responses"


async def _caller(request: HttpRequest, method: str) -> Caller:
    if request.method != method:
        raise MethodNotAllowedError(f"Method {request.method} is not allowed; use {method}.")
    admission.check_accepting()
    return Caller.for_key(await http.authenticate(request))


async def _history(caller: Caller, previous: object) -> list[dict]:
    if previous is None:
        return []
    if not isinstance(previous, str):
        raise BadRequestError("'previous_response_id' must be a string.",
                              param="previous_response_id", code="invalid_type")
    stored = await StoredResponse.objects.filter(tenant=caller.tenant, id=previous).afirst()
    if stored is None:
        raise NotFoundError(f"Previous response with id '{previous}' not found.",
                            param="previous_response_id", code="response_not_found")
    return list(stored.messages)


@csrf_exempt
async def responses(request: HttpRequest) -> HttpResponseBase:
    """``POST /v1/responses``."""
    try:
        caller = await _caller(request, "POST")
    except APIError as exc:
        return error_response(exc)
    try:
        body = http.read_json_object(request, nul_ok=False)  # stored unless store is false
        chat, conversation = api.chat_body(body, await _history(caller, body.get(
            "previous_response_id")))
    except APIError as exc:
        return error_response(serving.refuse(caller, ENDPOINT, api.renamed(exc)))
    try:
        served = await serving.serve(caller=caller, kind=CHAT, body=chat, endpoint=ENDPOINT)
    except APIError as exc:
        return error_response(api.renamed(exc))
    assert served.parsed is not None
    run = _Run(caller, served, body, chat, conversation)
    if served.parsed.stream:
        response = StreamingHttpResponse(run.events(), content_type="text/event-stream")
        response["Cache-Control"] = "no-cache"
        response["X-Accel-Buffering"] = "no"
        return response
    try:
        result = await served.complete()
    except APIError as exc:
        return error_response(exc)
    output, answer = api.output_items(result.text, reads_calls(served.parsed))
    obj = api.response_object(run.response_id, body, chat, output=output, result=result)
    await run.store(obj, answer)
    return JsonResponse(obj, headers={"X-Laser-Tier": str(result.tier_served)})


class _Run:
    """One admitted response: its id, what to store, and the stream."""

    def __init__(self, caller: Caller, served: serving.Served, body: dict, chat: dict,
                 conversation: list[dict]) -> None:
        self.caller, self.served, self.body, self.chat = caller, served, body, chat
        self.conversation = conversation
        self.response_id = api.new_id("resp")

    async def store(self, obj: dict, answer: list[dict]) -> None:
        if self.body.get("store") is False:
            return
        await StoredResponse.objects.acreate(  # the model's text may hold a NUL: jsonb refuses it
            id=self.response_id, tenant=self.caller.tenant, body=_storable(obj),
            messages=_storable([*self.conversation, *answer]))

    async def events(self) -> AsyncIterator[bytes]:
        served = self.served
        assert served.parsed is not None and served.collector is not None
        writer = EventWriter(self.response_id, self.body, self.chat, reads_calls(served.parsed))
        outcome, code = INTERRUPTED, "stream_ended_early"
        try:
            for event in writer.created():
                yield event
            async for delta in served.deltas():
                if delta.finish_reason == "abort":
                    raise ended_early(delta.refusal)
                for event in writer.piece(delta.text):
                    yield event
            events, obj = writer.finish(served.collector.result)
            for event in events:
                yield event
            outcome, code = OK, ""
            _, answer = api.output_items(served.collector.result.text,
                                         reads_calls(served.parsed))
            await self.store(obj, answer)
        except (asyncio.CancelledError, GeneratorExit):
            outcome, code = CANCELLED, "client_disconnected"
            raise
        except Exception as exc:
            mapped = api_error(exc)
            code = error_code(mapped)
            logger.warning("response stream %s interrupted: %s", self.response_id, exc)
            yield writer.error(mapped.body())
        finally:
            await served.close(outcome, code=code)


async def retrieve(request: HttpRequest, response_id: str) -> HttpResponseBase:
    """``GET /v1/responses/{id}``: a stored response of the caller's tenant."""
    try:
        caller = await _caller(request, "GET")
        stored = await StoredResponse.objects.filter(tenant=caller.tenant,
                                                     id=response_id).afirst()
        if stored is None:
            raise NotFoundError(f"Response with id '{response_id}' not found.",
                                param="response_id", code="response_not_found")
    except APIError as exc:
        return error_response(exc)
    return JsonResponse(stored.body)


@csrf_exempt
async def embeddings(request: HttpRequest) -> HttpResponseBase:
    """``POST /v1/embeddings``: not served (a chat model only), in the OpenAI error shape."""
    try:
        await _caller(request, "POST")
        raise NotFoundError("Embeddings are not served: this server serves one chat model; "
                            "use /v1/chat/completions or /v1/responses.", param="model",
                            code="unsupported_endpoint")
    except APIError as exc:
        return error_response(exc)


def _storable(value: Any) -> Any:
    """``value`` with every string made storable (``apps.core.jsonbody.printable``)."""
    if isinstance(value, str):
        return printable(value)
    if isinstance(value, list):
        return [_storable(v) for v in value]
    if isinstance(value, dict):
        return {printable(k): _storable(v) for k, v in value.items()}
    return value
