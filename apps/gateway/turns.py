"""One chat turn of a WebSocket session: ``serving.serve`` like every transport, then deltas.

A session keeps its message history server-side (per connection), so turn 2 renders turn 1's
prompt and answer as its prefix: the engine's prefix cache (salted by tenant) serves those
blocks again, which the ``done`` message shows as ``usage.cached_tokens``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from apps.core.errors import APIError, BadRequestError
from apps.gateway import serving, tool_calls
from apps.gateway.params import CHAT, served_model_id
from apps.gateway.responses import calls_finish, reads_calls, tier_change_info
from apps.gateway.slots import Caller
from apps.slo.services import tbt_stats
from inference.request import Delta

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


async def run_turn(session: Session, params: dict[str, Any], *, caller: Caller,
                   emit: Emit) -> APIError | None:
    """Serve one turn through ``serving.serve`` and stream it as messages; every outcome ends
    in ``done`` (returns None: the answer joined the history) or an error (returned, for the
    consumer to send; a 401 also closes the socket)."""
    body = {**params, "model": served_model_id(), "messages": session.history, "stream": True}
    try:
        served = await serving.serve(caller=caller, kind=CHAT, body=body, endpoint="/ws/chat/",
                                     session_id=f"{caller.tenant.pk}:{session.session_id}")
    except APIError as exc:
        return exc
    request_id = served.request_id

    def relay(delta: Delta) -> None:
        if delta.tier_change is not None:
            emit({"type": "tier_changed", "session_id": session.session_id,
                  **tier_change_info(delta.tier_change)})
        if delta.text or delta.index == 0:
            emit({"type": "delta", "session_id": session.session_id,
                  "request_id": request_id, "index": delta.index, "text": delta.text})

    try:
        result = await served.complete(relay)
    except APIError as exc:
        return exc
    done = _done_message(session, result)
    session.history.append(_answer(served, result, done))
    emit(done)
    return None


def _answer(served: serving.Served, result: Any, done: dict[str, Any]) -> dict[str, Any]:
    """The assistant turn for the history; its tool calls also go into ``done``."""
    if served.parsed is None or not reads_calls(served.parsed):
        return {"role": "assistant", "content": result.text}
    parsed = tool_calls.parse(result.text)
    if not parsed.calls:
        return {"role": "assistant", "content": result.text}
    calls = [c.openai() for c in parsed.calls]
    done.update(tool_calls=calls, finish_reason=calls_finish(done["finish_reason"]))
    return {"role": "assistant", "content": parsed.content.strip(), "tool_calls": calls}
