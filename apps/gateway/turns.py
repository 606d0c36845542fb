"""One chat turn of a WebSocket session: the same admission and parsing as REST, then deltas.

A session keeps its message history server-side (per connection), so turn 2 renders turn 1's
prompt and answer as its prefix: the engine's prefix cache (salted by tenant) serves those
blocks again, which the ``done`` message shows as ``usage.cached_tokens``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from apps.gateway import admission, engine
from apps.gateway.collect import Collector
from apps.gateway.errors import api_error
from apps.gateway.params import parse_chat_request, served_model_id
from apps.gateway.reporting import CANCELLED, INTERRUPTED, OK, Trace, error_code, outcome_for_error
from apps.gateway.responses import tier_change_info
from apps.gateway.sse import AbortedByServer
from apps.slo.services import tbt_stats
from laser_platform.errors import BadRequestError

Emit = Callable[[dict[str, Any]], None]


@dataclass(slots=True)
class Session:
    session_id: str
    history: list[dict] = field(default_factory=list)
    task: asyncio.Task | None = None


def apply_turn_messages(session: Session, content: dict[str, Any], max_history: int) -> None:
    """``messages`` replaces the history; ``content`` appends one user message."""
    if content.get("messages") is not None:
        if not isinstance(content["messages"], list):
            raise BadRequestError("'messages' must be an array.", param="messages")
        session.history = list(content["messages"])
    elif isinstance(content.get("content"), str):
        session.history.append({"role": "user", "content": content["content"]})
    else:
        raise BadRequestError("A chat message needs 'messages' or a string 'content'.",
                              param="content")
    if len(session.history) > max_history:
        raise BadRequestError(f"A session keeps at most {max_history} messages; start a new "
                              "session.", param="messages", code="session_too_long")


def _done_message(session: Session, result: Any) -> dict[str, Any]:
    p50, p99, tmax = tbt_stats([c.token_times for c in result.choices if c.token_times] or [[]])
    return {
        "type": "done", "session_id": session.session_id, "request_id": result.request_id,
        "finish_reason": result.choices[0].finish_reason, "tier": str(result.tier_served),
        "usage": {"prompt_tokens": result.prompt_tokens,
                  "completion_tokens": result.completion_tokens,
                  "total_tokens": result.total_tokens, "cached_tokens": result.cached_tokens},
        "ttft_s": result.ttft_s, "tbt": {"p50_s": p50, "p99_s": p99, "max_s": tmax},
    }


async def run_turn(session: Session, params: dict[str, Any], *, api_key: Any,
                   emit: Emit, on_error: Callable[[dict], Awaitable[None]]) -> bool:
    """Admit, stream and book one turn; every outcome ends in ``done`` or ``error``.

    Returns True when the turn finished normally (its answer joined the history)."""
    tenant = api_key.tenant
    trace = Trace(request_id="ws-pending", tenant_id=tenant.pk, api_key_id=api_key.pk,
                  tier_asked=str(api_key.default_tier), endpoint="/ws/chat/", streamed=True)
    collector: Collector | None = None
    acquired = False
    admitted = None
    try:
        admission.check_accepting()
        tier, contract = await admission.aresolve_tier(params.get("service_tier"), api_key,
                                                       tenant)
        trace.tier_asked, trace.contract_version_id = tier, contract.version_id
        body = {**params, "model": served_model_id(), "messages": session.history,
                "stream": True}
        parsed = parse_chat_request(body, tenant=tenant, api_key=api_key, contract=contract,
                                    session_id=f"{tenant.pk}:{session.session_id}")
        trace.request_id = parsed.request_id
        client = engine.get_engine_client()
        admission.inflight.acquire()
        acquired = True
        admitted = await admission.aadmit(
            tenant=tenant, tier=tier, contract=contract,
            estimated_tokens=admission.estimate_tokens(parsed.engine_request))
        collector = Collector(parsed.request_id, parsed.tier, parsed.engine_request.sampling.n,
                              parsed.engine_request.arrival_time)
        stream = await engine.open_stream(parsed.engine_request, client)
        try:
            async for delta in stream:
                collector.fold(delta)
                if delta.tier_change is not None:
                    emit({"type": "tier_changed", "session_id": session.session_id,
                          **tier_change_info(delta.tier_change)})
                if delta.finish_reason == "abort":
                    raise AbortedByServer()
                if delta.text or delta.index == 0:
                    emit({"type": "delta", "session_id": session.session_id,
                          "request_id": parsed.request_id, "index": delta.index,
                          "text": delta.text})
        finally:
            await stream.aclose()
        result = collector.close()
        session.history.append({"role": "assistant", "content": result.text})
        emit(_done_message(session, result))
        trace.finish(OK, result)
        return True
    except asyncio.CancelledError:
        trace.finish(CANCELLED, collector.close() if collector else None,
                     code="client_disconnected")
        raise
    except Exception as exc:
        mapped = api_error(exc)
        started = collector is not None and collector.result.first_token_at is not None
        outcome = INTERRUPTED if started else outcome_for_error(mapped)
        trace.finish(outcome, collector.close() if collector else None, code=error_code(mapped))
        await on_error({"type": "error", "session_id": session.session_id, **mapped.body()})
        return False
    finally:
        if acquired:
            admission.inflight.release()
        if admitted is not None:
            used = collector.result.total_tokens if collector else 0
            await admitted.asettle(used)
