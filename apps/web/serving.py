"""The web chat's one call into the gateway's serving path.

Everything the browser chat needs from the gateway goes through ``serve_turn`` so that moving to
another serving entry point changes this module only. A browser turn runs as the logged-in user
of the tenant, never as an API key: ``BrowserCaller`` carries the tenant, the user and the tier
used when the page asks for none.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from apps.gateway.turns import Session, run_turn

Emit = Callable[[dict[str, Any]], None]


@dataclass(frozen=True, slots=True)
class BrowserCaller:
    """A logged-in user of ``tenant``; ``pk`` is None because no API key is involved."""

    tenant: Any
    user_id: int
    username: str
    default_tier: str
    pk: None = None


async def serve_turn(*, caller: BrowserCaller, conversation_id: str, history: list[dict],
                     params: dict[str, Any], emit: Emit) -> list[dict] | None:
    """Stream one turn over ``history`` (ending in the user's message) through ``emit``.

    Emits ``delta``, ``tier_changed`` and then ``done`` or ``error``; returns the history with
    the answer appended, or None when the turn failed (the error was emitted).
    """
    session = Session(conversation_id, history=list(history))

    async def on_error(message: dict[str, Any]) -> None:
        emit(message)

    ok = await run_turn(session, params, api_key=caller, emit=emit, on_error=on_error)
    return session.history if ok else None
