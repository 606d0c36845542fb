"""Server-sent events exactly as OpenAI sends them.

``data: {chunk}`` per delta, the usage chunk (``choices: []``) when
``stream_options.include_usage``, then ``data: [DONE]``. A demotion adds a comment line
``: tier_changed from=hot to=warm reason=...`` (SDKs skip comments) before the chunk whose
``service_tier`` shows the new tier. An error after the first byte cannot change the status any
more: it goes out as an error frame followed by ``[DONE]`` and is booked as an interruption.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

from apps.gateway.errors import api_error
from apps.gateway.reporting import CANCELLED, INTERRUPTED, OK, error_code
from apps.gateway.responses import ChunkMaker
from inference.request import TierChange
from laser_platform.errors import APIError

logger = logging.getLogger(__name__)

DONE = b"data: [DONE]\n\n"


class AbortedByServer(APIError):
    """The engine ended a choice with ``abort``: not a natural finish."""

    status, type, code = 503, "server_error", "aborted"

    def __init__(self) -> None:
        super().__init__("The request was aborted by the server.")


def frame(obj: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


def tier_comment(change: TierChange) -> bytes:
    reason = " ".join(change.reason.split())  # one line, whatever the engine wrote
    return (f": tier_changed from={change.from_tier} to={change.to_tier} "
            f"reason={reason}\n\n").encode()


async def events(served: Any, token_text: Any) -> AsyncIterator[bytes]:
    """The SSE body of a served streaming request; closes ``served`` exactly once."""
    maker = ChunkMaker(served.parsed, token_text)
    collector = served.collector
    outcome, code = INTERRUPTED, "stream_ended_early"
    try:
        async for delta in served.stream:
            collector.fold(delta)
            if delta.tier_change is not None:
                yield tier_comment(delta.tier_change)
            if delta.finish_reason == "abort":
                raise AbortedByServer()
            yield frame(maker.delta(delta))
        if served.parsed.include_usage:
            yield frame(maker.usage_chunk(collector.result))
        yield DONE
        outcome, code = OK, ""
    except (asyncio.CancelledError, GeneratorExit):
        outcome, code = CANCELLED, "client_disconnected"
        raise
    except Exception as exc:
        mapped = api_error(exc)
        outcome, code = INTERRUPTED, error_code(mapped)
        if not isinstance(exc, AbortedByServer):
            logger.warning("stream %s interrupted: %s", served.parsed.request_id, exc)
        yield frame(mapped.body())
        yield DONE
    finally:
        await served.close(outcome, code=code)
