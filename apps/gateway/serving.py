"""The one serving path: REST JSON, SSE, WebSocket turns and batch lines all call ``serve``.

``serve`` takes a parsed-enough request (the body), the caller (an API key or a signed-in user
of the tenant) and, for batch lines, the tier, and owns in this order:

1. the process draining (503), the caller's validity at this turn (401: a key revoked or
   expired since it was last checked), the tier and contract (400), the body's parameters (400);
2. the caller's and its tenant's concurrency slots (429 ``rate_limit_exceeded``), the
   process's in-flight cap and the engine's saturation (503: ``admission.overload_decision``,
   the one place that decides it);
3. a byte-size check that refuses, without tokenising, a prompt longer than the context could
   ever hold (400 on ``messages``/``prompt``), then the chat template and tokenisation off the
   event loop (``EngineClient.encode``), shrinking an open ``max_tokens`` to the room the
   context leaves;
4. requests/min, tokens/min and the daily budget with the prompt's real token count, reserving
   its tokens while it runs: up to the contract's rates the request is in contract, above them
   excess (``EngineRequest.in_contract`` False: the scheduler serves, demotes and refuses it
   after in-contract work), above the burst ceiling (the plan's ``burst_factor`` × the rates;
   1 for batch lines, which are paced instead) 429; an open ``max_tokens`` is clipped to the
   budget left, a set one over it is 429 ``insufficient_quota``;
5. the engine stream, folded into a ``Collector``.

The database work ends before tokenisation: on a database server the sessions it opened in
this request's thread are closed while the prompt is tokenised, so no stream holds one (200
streams held 200 PostgreSQL sessions, past the server's 100); the SLO record is written by the
reporting thread, not by the request.

The ``Served`` it returns holds all of that, and ``Served.close`` releases it exactly once
whatever the exit (finished, refused, failed, client gone, cancelled, engine worker died):
slots, in-flight count, the engine request (aborted unless finished), the reservation settled to
the real usage, and the SLO record with the served tier and tier changes. A refusal inside
``serve`` closes it before raising the API error (the engine's own error as its ``__cause__``).

This is the only gateway module other apps import: it re-exports what they need.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

from asgiref.sync import sync_to_async

from apps.core.errors import APIError, BadRequestError
from apps.gateway import admission, ratelimit
from apps.gateway.collect import Collector, Completion
from apps.gateway.engine_client import (
    complete_sync,
    current_engine_client,
    engine_config,
    get_engine_client,
    set_engine_client,
    stop_engine_client,
)
from apps.gateway.engine_errors import AbortedByServer, api_error, ended_early
from apps.gateway.params import (
    CHAT,
    COMPLETIONS,
    ParsedRequest,
    parse_chat_request,
    parse_completion_request,
)
from apps.gateway.responses import completion_body
from apps.gateway.slots import Caller, caller_check, caps_for, slots
from apps.gateway.trace import (
    CANCELLED,
    INTERRUPTED,
    OK,
    Trace,
    error_code,
    outcome_for_error,
)
from inference.errors import PromptTooLong
from inference.request import Delta

if TYPE_CHECKING:
    from inference.engine.client import DeltaStreamProtocol, EngineClient
    from inference.engine.stats import EngineStats

logger = logging.getLogger(__name__)

PARSERS = {CHAT: parse_chat_request, COMPLETIONS: parse_completion_request}
_STATS_TTL_S = 0.1
_stats_cache: dict[str, Any] = {"at": 0.0, "stats": None}


@dataclasses.dataclass(slots=True)
class Served:
    """An admitted request and what it holds until ``close``."""

    caller: Caller
    trace: Trace
    client: EngineClient
    parsed: ParsedRequest | None = None
    slot: bool = False
    inflight: bool = False
    admitted: admission.Admission | None = None
    stream: DeltaStreamProtocol | None = None
    collector: Collector | None = None
    closed: bool = False
    head: Delta | None = None  # the first delta, read ahead by ``first``
    ended: bool = False  # the engine stream ended while read ahead

    @property
    def request_id(self) -> str:
        return self.trace.request_id

    async def first(self) -> None:
        """Read the engine's first delta ahead (``deltas`` yields it first), so a stream's
        headers can say the tier it starts at, a demotion before the first token included; an
        engine error now closes it and raises its ``APIError`` (the status can still say it)."""
        assert self.stream is not None
        try:
            self.head = await self.stream.__anext__()
        except StopAsyncIteration:
            self.ended = True
        except asyncio.CancelledError:
            await self.close(CANCELLED, code="client_disconnected")
            raise
        except Exception as exc:
            raise await self.close_for(exc) from exc

    @property
    def tier_now(self) -> str:
        """The tier serving the request as far as read: the read-ahead delta's, else asked."""
        assert self.parsed is not None
        return str(self.head.tier if self.head is not None else self.parsed.tier)

    async def deltas(self) -> AsyncIterator[Delta]:
        """The engine's deltas, each folded into ``collector`` before it is yielded."""
        assert self.stream is not None and self.collector is not None
        if self.head is not None:
            head, self.head = self.head, None
            self.collector.fold(head)
            yield head
        if self.ended:
            return
        async for delta in self.stream:
            self.collector.fold(delta)
            yield delta

    async def complete(self, on_delta: Callable[[Delta], None] | None = None) -> Completion:
        """Run to the end and close, handing each delta to ``on_delta`` (a transport's frame
        writer); an ``abort`` from the engine is a 503 ``aborted``; an engine error closes it as
        refused or interrupted and raises its ``APIError``."""
        try:
            async for delta in self.deltas():
                if delta.finish_reason == "abort":
                    raise ended_early(delta.refusal)
                if on_delta is not None:
                    on_delta(delta)
        except asyncio.CancelledError:
            await self.close(CANCELLED, code="client_disconnected")
            raise
        except Exception as exc:
            raise await self.close_for(exc) from exc
        result = await self.close(OK)
        assert result is not None
        return result

    @property
    def started(self) -> bool:
        return self.collector is not None and self.collector.result.first_token_at is not None

    async def close_for(self, exc: BaseException, *, book: bool = True) -> APIError:
        """Close for an error: refused before the first token, interrupted after it (and
        whenever the engine aborted it)."""
        mapped = api_error(exc)
        late = self.started or isinstance(mapped, AbortedByServer)
        await self.close(INTERRUPTED if late else outcome_for_error(mapped),
                         code=error_code(mapped), book=book)
        return mapped

    async def close(self, outcome: str, *, code: str = "", book: bool = True) -> Completion | None:
        """Release everything once; the SLO record is booked unless ``book`` is False.

        The release runs as its own task, shielded: a caller cancelled meanwhile (Django
        cancels a streaming view as soon as the client hangs up, which SDKs do right after
        ``[DONE]``) still gets its record booked and its slots back, however long Redis takes.
        """
        if self.closed:
            return None
        self.closed = True
        task = asyncio.ensure_future(self._release(outcome, code, book))
        _releasing.add(task)
        task.add_done_callback(_releasing.discard)
        return await asyncio.shield(task)

    async def _release(self, outcome: str, code: str, book: bool) -> Completion | None:
        """``close``'s work: the record first (it needs no Redis), then what Redis holds, each
        step whatever the one before it raised (a lease left behind runs out by its TTL)."""
        result = None
        try:
            if self.inflight:
                admission.inflight.release()
            if self.stream is not None:
                await _logged(self.stream.aclose(), "closing the engine stream failed")
            result = self.collector.close() if self.collector is not None else None
            if book:
                self.trace.finish(outcome, result, code=code)
            else:
                self.trace.discard()
            if self.admitted is not None:
                await _logged(self.admitted.asettle(result.total_tokens if result else 0),
                              "could not settle token reservation")
        except Exception:
            logger.exception("releasing request %s failed", self.request_id)
        finally:
            if self.slot:
                await _logged(slots.arelease(self.caller), "could not release a slot")
        return result


_releasing: set[asyncio.Task] = set()  # ``close`` tasks in progress (held: never collected)


async def _logged(step: Awaitable[Any], message: str) -> None:
    """Await ``step``; an exception is logged with its traceback, not raised."""
    try:
        await step
    except Exception:
        logger.exception(message)


async def engine_stats(client: EngineClient) -> EngineStats:
    """The engine's stats, read at most every ``_STATS_TTL_S`` (cheap refusals stay cheap)."""
    now = time.monotonic()
    if _stats_cache["stats"] is None or now - _stats_cache["at"] > _STATS_TTL_S:
        _stats_cache["stats"] = await client.stats()
        _stats_cache["at"] = now
    return _stats_cache["stats"]


def _prompt_chars(parsed: ParsedRequest) -> tuple[int, str]:
    request = parsed.engine_request
    if request.messages is not None:
        chars = sum(len(m["content"]) if isinstance(m.get("content"), str)
                    else len(str(m.get("content", ""))) for m in request.messages)
        return chars, "messages"
    return len(request.prompt or ""), "prompt"


def check_prompt_size(parsed: ParsedRequest, stats: EngineStats) -> None:
    """400 without tokenising when the prompt can never fit: every token holds at most the
    longest vocabulary entry's bytes and every character at least one byte."""
    if parsed.engine_request.prompt_token_ids is not None or not stats.max_prompt_bytes:
        return
    chars, param = _prompt_chars(parsed)
    if chars > stats.max_prompt_bytes:
        raise BadRequestError(
            f"'{param}' is {chars} characters long: more than the model's context of "
            f"{stats.max_model_len} tokens can hold.", param=param,
            code="context_length_exceeded")


async def encode(parsed: ParsedRequest, client: EngineClient) -> list[int]:
    """The prompt's token ids (template and tokeniser off the loop); an open ``max_tokens`` is
    shrunk to the room the context leaves instead of a 400."""
    request = parsed.engine_request
    try:
        return await client.encode(request)
    except PromptTooLong as exc:
        room = exc.max_model_len - exc.prompt_tokens
        if parsed.max_tokens_given or exc.param != "max_tokens" or room < 1:
            raise
        request.sampling = dataclasses.replace(request.sampling, max_tokens=room)
        return await client.encode(request)


def _trace(caller: Caller, endpoint: str, *, streamed: bool, batch_id: str | None,
           deadline: float | None) -> Trace:
    return Trace(request_id=f"req-{uuid.uuid4().hex}", tenant_id=caller.tenant.pk,
                 api_key_id=caller.api_key_id, tier_asked=caller.default_tier,
                 user_id=getattr(caller.user, "pk", None),
                 endpoint=endpoint, streamed=streamed, batch_id=batch_id, deadline=deadline)


async def serve(*, caller: Caller, kind: str, body: dict, endpoint: str,
                tier: str | None = None, request_id: str | None = None,
                session_id: str | None = None, deadline: float | None = None,
                key_max_age_s: float = 0.0, batch_id: str | None = None,
                book_retryable: bool = True, client: EngineClient | None = None) -> Served:
    """Admit and start one request (see the module docstring); raise ``APIError`` when refused.

    ``kind``: ``CHAT`` or ``COMPLETIONS``; ``endpoint``: the label of its SLO record; ``tier``
    forces the tier (batch lines: cold); ``key_max_age_s``: trust a key check this recent;
    ``book_retryable=False``: a refusal worth retrying (429 rate limit, 503) books no record;
    ``client``: the engine client (default: the process's).
    """
    streamed = body.get("stream") is True
    trace = _trace(caller, endpoint, streamed=streamed, batch_id=batch_id, deadline=deadline)
    served = Served(caller, trace, client if client is not None else get_engine_client())
    try:
        admission.check_accepting()
        await caller_check(caller, max_age_s=key_max_age_s)
        asked = tier if tier is not None else body.get("service_tier")
        tier, contract = await admission.aresolve_tier(asked, caller.default_tier, caller.tenant)
        trace.tier_asked, trace.contract_version_id = tier, contract.version_id
        parsed = served.parsed = PARSERS[kind](
            body, tenant=caller.tenant, contract=contract,
            request_id=request_id, session_id=session_id, deadline=deadline)
        trace.request_id = parsed.request_id
        trace.constraint = getattr(parsed.engine_request.constraint, "kind", "")
        await slots.aacquire(caller)
        served.slot = True
        admission.inflight.acquire()
        served.inflight = True
        stats = await engine_stats(served.client)
        refusal = admission.overload_decision(stats, tier)
        if refusal is not None:
            raise refusal
        check_prompt_size(parsed, stats)
        # batch lines are paced at the contract's rates (a 429 retries later), never excess
        burst = 1.0 if batch_id is not None else await admission.aburst_factor(caller.tenant)
        # the request's database work is done until its end: its sessions go back meanwhile
        prompt_ids = (await asyncio.gather(encode(parsed, served.client),
                                           release_connections()))[0]
        request = parsed.engine_request
        ask = ratelimit.Ask(len(prompt_ids), request.sampling.max_tokens, request.sampling.n,
                            clip=not parsed.max_tokens_given)
        served.admitted = await admission.aadmit(tenant=caller.tenant, tier=tier,
                                                 contract=contract, ask=ask, burst_factor=burst)
        request.in_contract = served.trace.in_contract = served.admitted.in_contract
        if served.admitted.output != request.sampling.max_tokens:
            request.sampling = dataclasses.replace(request.sampling,
                                                   max_tokens=served.admitted.output)
        served.collector = Collector(parsed.request_id, parsed.tier, request.sampling.n,
                                     request.arrival_time)
        served.stream = await served.client.generate(request, prompt_ids)
    except asyncio.CancelledError:
        await served.close(CANCELLED, code="client_disconnected")
        raise
    except Exception as exc:
        mapped = api_error(exc, max_tokens_param=_max_key(body))
        # a key that is no longer valid sends nobody's request: booked on no tenant (as REST
        # refuses it before a tenant is known); a retryable refusal of a batch line runs again
        book = mapped.status != 401 and (book_retryable or not retryable(mapped))
        await served.close(outcome_for_error(mapped), code=error_code(mapped), book=book)
        raise mapped from exc
    return served


def _close_connections() -> None:
    from django.db import connections

    for conn in connections.all(initialized_only=True):
        if not conn.in_atomic_block:  # a caller's transaction (a test's, a task's) stays
            conn.close()


def _server_sessions() -> bool:
    from django.conf import settings

    return any(not db["ENGINE"].endswith("sqlite3") for db in settings.DATABASES.values())


async def release_connections() -> None:
    """Close the database connections of this request's thread (the one its ORM calls ran
    on); the next ORM call opens one again. Only for a database server, whose sessions are
    counted: SQLite's are files, and reopening one costs its pragmas again."""
    if _server_sessions():
        await sync_to_async(_close_connections)()


def refuse(caller: Caller, endpoint: str, exc: APIError) -> APIError:
    """Book a request the transport refused before ``serve`` (its body was unreadable)."""
    trace = _trace(caller, endpoint, streamed=False, batch_id=None, deadline=None)
    trace.finish(outcome_for_error(exc), code=error_code(exc))
    return exc


def retryable(error: APIError) -> bool:
    """A refusal for now (rate limit, slots, saturation, engine gone), not for good."""
    return error.status == 503 or (error.status == 429 and error.code == "rate_limit_exceeded")


def _max_key(body: dict) -> str:
    return "max_completion_tokens" if body.get("max_completion_tokens") is not None \
        else "max_tokens"


__all__ = [
    "CHAT", "COMPLETIONS", "AbortedByServer", "Caller", "Completion", "ParsedRequest", "Served",
    "api_error", "refuse",
    "caller_check", "caps_for", "complete_sync", "completion_body", "current_engine_client",
    "engine_config", "get_engine_client", "parse_chat_request", "parse_completion_request",
    "retryable", "serve", "set_engine_client", "slots", "stop_engine_client",
]
