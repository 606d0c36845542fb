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
from typing import TYPE_CHECKING, Any

from apps.gateway.engine_errors import AbortedByServer, RefusedByServer, api_error, ended_early
from apps.gateway.responses import ChunkMaker
from apps.gateway.trace import CANCELLED, INTERRUPTED, OK, error_code, outcome_for_error
from inference.request import TierChange

if TYPE_CHECKING:
    from apps.gateway.serving import Served

logger = logging.getLogger(__name__)

DONE = b"data: [DONE]\n\n"


def frame(obj: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


def tier_comment(change: TierChange) -> bytes:
    reason = " ".join(change.reason.split())  # one line, whatever the engine wrote
    return (f": tier_changed from={change.from_tier} to={change.to_tier} "
            f"reason={reason}\n\n").encode()


async def events(served: Served) -> AsyncIterator[bytes]:
    """The SSE body of a served streaming request; closes ``served`` exactly once."""
    parsed, collector = served.parsed, served.collector
    assert parsed is not None and collector is not None
    maker = ChunkMaker(parsed, served.client.token_text)
    outcome, code = INTERRUPTED, "stream_ended_early"
    try:
        async for delta in served.deltas():
            if delta.tier_change is not None:
                yield tier_comment(delta.tier_change)
            if delta.finish_reason == "abort":
                raise ended_early(delta.refusal)
            yield frame(maker.delta(delta))
        if parsed.include_usage:
            yield frame(maker.usage_chunk(collector.result))
        yield DONE
        outcome, code = OK, ""
    except (asyncio.CancelledError, GeneratorExit):
        outcome, code = CANCELLED, "client_disconnected"
        raise
    except Exception as exc:
        mapped = api_error(exc)
        refused = isinstance(exc, RefusedByServer) and not served.started  # not interrupted
        outcome = outcome_for_error(mapped) if refused else INTERRUPTED
        code = error_code(mapped)
        if not isinstance(exc, AbortedByServer):
            logger.warning("stream %s interrupted: %s", parsed.request_id, exc)
        yield frame(mapped.body())
        yield DONE
    finally:
        await served.close(outcome, code=code)
