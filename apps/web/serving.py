"""The web chat's one call into the gateway: ``serve_turn`` runs a turn through
``apps.gateway.serving.serve`` (the path every transport takes) as the signed-in user of the
tenant, and turns its deltas into the socket's messages."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.conf import settings

from apps.core.errors import APIError
from apps.gateway.serving import CHAT, Caller, Completion, serve
from apps.slo.services import tbt_stats
from inference.request import Delta

Emit = Callable[[dict[str, Any]], None]
ENDPOINT = "/ws/app/chat/"  # the label of the turn's SLO record


def browser_caller(*, user: Any, tenant: Any, default_tier: str) -> Caller:
    return Caller.for_user(user, tenant, default_tier)


def _done(result: Completion) -> dict[str, Any]:
    p50, p99, tmax = tbt_stats([c.token_times for c in result.choices if c.token_times] or [[]])
    return {
        "type": "done", "request_id": result.request_id,
        "finish_reason": result.choices[0].finish_reason, "tier": str(result.tier_served),
        "usage": {"prompt_tokens": result.prompt_tokens,
                  "completion_tokens": result.completion_tokens,
                  "total_tokens": result.total_tokens, "cached_tokens": result.cached_tokens},
        "ttft_s": result.ttft_s, "tbt": {"p50_s": p50, "p99_s": p99, "max_s": tmax},
    }


async def serve_turn(*, caller: Caller, conversation_id: str, history: list[dict],
                     params: dict[str, Any], emit: Emit, system: str = ""
                     ) -> list[dict] | APIError:
    """Stream one turn over ``history`` (ending in the user's message), after ``system`` as
    the system message when given, through ``emit``: ``delta``..., ``tier_changed``, then
    ``done``. Returns the history with the answer appended, or the ``APIError`` that ended the
    turn (not emitted: the consumer decides)."""
    messages = [{"role": "system", "content": system}, *history] if system else history
    body = {**params, "model": settings.LASER_SERVED_MODEL_ID, "messages": messages,
            "stream": True}
    try:
        served = await serve(caller=caller, kind=CHAT, body=body, endpoint=ENDPOINT,
                             session_id=f"{caller.tenant.pk}:web:{conversation_id}")
    except APIError as exc:
        return exc

    def relay(delta: Delta) -> None:
        change = delta.tier_change
        if change is not None:
            emit({"type": "tier_changed", "from": str(change.from_tier),
                  "to": str(change.to_tier), "reason": change.reason})
        if delta.text:
            emit({"type": "delta", "request_id": served.request_id, "text": delta.text})

    try:
        result = await served.complete(relay)
    except APIError as exc:
        return exc
    emit(_done(result))
    return [*history, {"role": "assistant", "content": result.text}]
