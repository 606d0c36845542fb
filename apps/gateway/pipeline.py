"""The REST request path: key -> body -> tier and contract -> capacity -> limits -> engine.

Cheap refusals come first (draining, auth, body, tier, engine saturation) so a saturated engine
answers 503 before anything is tokenised. From admission on, ``Served`` owns the request's
resources (the in-flight slot, the token reservation, the SLO trace) and releases each exactly
once however the request ends: finished, refused by the engine, failed, or cancelled by a
client that went away (Django cancels the view / the streaming iterator on disconnect, which
closes the engine stream and aborts the request).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
import uuid
from typing import TYPE_CHECKING, Any

from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.http.response import HttpResponseBase

from apps.gateway import admission, engine, http, sse
from apps.gateway.collect import Collector, Completion
from apps.gateway.errors import api_error
from apps.gateway.params import CHAT, ParsedRequest, parse_chat_request, parse_completion_request
from apps.gateway.reporting import (
    CANCELLED,
    ERROR,
    INTERRUPTED,
    OK,
    Trace,
    error_code,
    outcome_for_error,
)
from apps.gateway.responses import completion_body
from inference.errors import PromptTooLong
from laser_platform.errors import APIError, json_error_response

if TYPE_CHECKING:
    from inference.engine.client import DeltaStreamProtocol, EngineClient

logger = logging.getLogger(__name__)

PARSERS = {CHAT: parse_chat_request, "completions": parse_completion_request}
_STATS_TTL_S = 0.1
_stats_cache: dict[str, Any] = {"at": 0.0, "stats": None}


@dataclasses.dataclass(slots=True)
class Served:
    """An admitted request and what it holds until it ends."""

    parsed: ParsedRequest
    trace: Trace
    client: EngineClient
    admission: admission.Admission | None = None
    stream: Any = None
    collector: Collector | None = None
    closed: bool = False

    async def close(self, outcome: str, *, code: str = "") -> Completion | None:
        if self.closed:
            return None
        self.closed = True
        admission.inflight.release()
        if self.stream is not None:
            try:
                await self.stream.aclose()  # aborts the engine request unless it finished
            except Exception:
                logger.exception("closing the engine stream failed")
        result = self.collector.close() if self.collector is not None else None
        if self.admission is not None:
            try:
                await self.admission.asettle(result.total_tokens if result else 0)
            except Exception:
                logger.exception("could not settle token reservation")
        self.trace.finish(outcome, result, code=code)
        return result


def error_response(exc: BaseException) -> HttpResponse:
    if not isinstance(exc, APIError):
        logger.exception("unexpected error in the gateway", exc_info=exc)
    return json_error_response(api_error(exc))


async def _check_engine(client: EngineClient) -> None:
    now = time.monotonic()
    if now - _stats_cache["at"] > _STATS_TTL_S:
        _stats_cache["stats"] = await client.stats()
        _stats_cache["at"] = now
    admission.check_engine_capacity(_stats_cache["stats"])


async def _open(parsed: ParsedRequest, client: EngineClient) -> DeltaStreamProtocol:
    """Start the engine request; a prompt that leaves less room than the default length gets
    the room it has instead of a 400 (only when the client did not ask for a length)."""
    request = parsed.engine_request
    try:
        return await engine.open_stream(request, client)
    except PromptTooLong as exc:
        room = exc.max_model_len - exc.prompt_tokens
        if parsed.max_tokens_given or exc.param not in ("max_tokens",) or room < 1:
            raise
        request.sampling = dataclasses.replace(request.sampling, max_tokens=room)
        return await engine.open_stream(request, client)


async def _admit(request: HttpRequest, endpoint: str) -> Served | HttpResponse:
    http.require_post(request)
    admission.check_accepting()
    api_key = await http.authenticate(request)
    tenant = api_key.tenant
    trace = Trace(request_id=f"req-{uuid.uuid4().hex}", tenant_id=tenant.pk,
                  api_key_id=api_key.pk, tier_asked=str(api_key.default_tier),
                  endpoint=f"/v1/{endpoint.replace('.', '/')}")
    served: Served | None = None
    body: dict = {}
    try:
        body = http.read_json_object(request)
        tier, contract = await admission.aresolve_tier(body.get("service_tier"), api_key, tenant)
        trace.tier_asked, trace.contract_version_id = tier, contract.version_id
        parsed = PARSERS[endpoint](body, tenant=tenant, api_key=api_key, contract=contract)
        trace.request_id, trace.streamed = parsed.request_id, parsed.stream
        client = engine.get_engine_client()
        await _check_engine(client)
        admission.inflight.acquire()
        served = Served(parsed, trace, client)
        served.admission = await admission.aadmit(
            tenant=tenant, tier=tier, contract=contract,
            estimated_tokens=admission.estimate_tokens(parsed.engine_request))
        served.stream = await _open(parsed, client)
    except Exception as exc:
        mapped = api_error(exc, max_tokens_param=_max_key(body))
        if served is not None:
            await served.close(outcome_for_error(mapped), code=error_code(mapped))
        else:
            trace.finish(outcome_for_error(mapped), code=error_code(mapped))
        return error_response(exc if isinstance(exc, APIError) else mapped)
    served.collector = Collector(parsed.request_id, parsed.tier, parsed.engine_request.sampling.n,
                                 parsed.engine_request.arrival_time)
    return served


def _max_key(body: dict) -> str:
    return "max_completion_tokens" if body.get("max_completion_tokens") is not None \
        else "max_tokens"


async def handle(request: HttpRequest, endpoint: str) -> HttpResponseBase:
    """Serve one `/v1/chat/completions` or `/v1/completions` request."""
    try:
        served = await _admit(request, endpoint)
    except APIError as exc:  # before a tenant is known: nothing to report
        return error_response(exc)
    if isinstance(served, HttpResponse):
        return served
    if served.parsed.stream:
        return _streaming_response(served)
    return await _whole_response(served)


def _headers(served: Served, tier: str) -> dict[str, str]:
    return {"X-Laser-Tier": tier, "X-Request-Id": served.parsed.request_id}


def _streaming_response(served: Served) -> StreamingHttpResponse:
    text = served.client.token_text
    response = StreamingHttpResponse(sse.events(served, text), content_type="text/event-stream")
    for name, value in _headers(served, str(served.parsed.tier)).items():
        response[name] = value
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # proxies must not buffer token-by-token output
    return response


async def _whole_response(served: Served) -> HttpResponse:
    collector = served.collector
    assert collector is not None and served.stream is not None
    try:
        async for delta in served.stream:
            collector.fold(delta)
    except asyncio.CancelledError:
        await served.close(CANCELLED, code="client_disconnected")
        raise
    except Exception as exc:
        mapped = api_error(exc)
        started = collector.result.first_token_at is not None
        await served.close(INTERRUPTED if started else ERROR, code=error_code(mapped))
        return error_response(mapped)
    if any(c.finish_reason == "abort" for c in collector.result.choices):
        await served.close(INTERRUPTED, code="aborted")
        return error_response(APIError("The request was aborted by the server.", status=503,
                                       type="server_error", code="aborted",
                                       headers={"Retry-After": "1"}))
    result = await served.close(OK)
    assert result is not None
    body = completion_body(served.parsed, result, served.client.token_text)
    return JsonResponse(body, headers=_headers(served, str(result.tier_served)))
