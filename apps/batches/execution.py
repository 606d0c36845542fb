"""Running one chunk of a batch through the serving path.

A chunk task is one *turn* of one batch: it takes the batch's first pending lines of its range
(``LASER_BATCH_CHUNK_LINES`` shared by the tenant's running batches: ``turn_lines``) and hands
the rest of the range back to the end of the queue. A batch has one chunk message queued at a
time (``batch_enqueue_chunks``), so a worker serves the running batches in turn, whatever their
sizes; each tenant gets about ``LASER_BATCH_CHUNK_LINES`` lines per round however many batches
it runs; and a new batch waits at most one turn of each batch ahead of it.

A chunk sends its lines through ``apps.gateway.serving.serve`` at cold tier with the batch's
deadline (at most ``LASER_BATCH_CHUNK_CONCURRENCY`` at once), as the key the batch was created
with: each line is admitted against the tenant's cold contract like any request. Over its
requests/min or tokens/min (or a concurrency cap, or a saturated engine) a line waits and is
sent again (``Retry-After``) ahead of the chunk's later lines, which wait as long, so the batch
is paced, keeps its line order and nothing fails. A wait longer than ``LASER_BATCH_YIELD_S``
ends the turn once the lines in flight are done: the rest goes back to the queue with that
countdown, so no task holds a worker while a tenant waits for its rate window. Once the daily
budget is spent each remaining line ends with ``insufficient_quota`` in the error file, and
once the key is revoked with ``invalid_api_key`` (the key is re-checked at most every
``LASER_BATCH_POLL_S``). The engine's scheduler then paces the lines it runs: in hot's gaps,
promoted as slack runs out. Each result is written once, by a conditional UPDATE from
``pending``: a redelivered chunk skips lines already written, and a line expired or cancelled
meanwhile keeps that state. While lines are in flight the chunk re-reads its batch every
``LASER_BATCH_POLL_S``; on cancel or at the deadline it aborts its engine requests. Past
``LASER_BATCH_CHUNK_SOFT_LIMIT_S`` it stops taking lines and hands the rest back. A chunk marks
its batch's ``progress_at`` when it starts and every ``HEARTBEAT_S`` while it runs, so the sweep
leaves a live batch alone.
"""


from __future__ import annotations

import asyncio
import bisect
import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from asgiref.sync import async_to_sync, sync_to_async
from django.conf import settings
from django.db import InterfaceError, OperationalError
from django.utils import timezone

from apps.batches.models import RUNNING_STATUSES, Batch, BatchLine, LineStatus
from apps.batches.rendering import error_for, response_body
from apps.batches.services import batch_touch
from apps.core.errors import APIError
from apps.core.request_id import bind
from apps.core.tiers import Tier
from apps.gateway.serving import CHAT, COMPLETIONS, Caller, Served, retryable, serve
from inference.errors import EngineUnavailable

if TYPE_CHECKING:
    from inference.engine.client import EngineClient

logger = logging.getLogger(__name__)

FINISHED = ("stop", "length")
KINDS = {"/v1/chat/completions": CHAT, "/v1/completions": COMPLETIONS}
_RETRY_S = 1.0  # wait before resending a line refused for now without saying how long
HEARTBEAT_S = 60.0  # well under LASER_BATCH_STALL_S, and one UPDATE a minute per chunk
DB_DOWN = (OperationalError, InterfaceError)  # the database went away: the chunk runs again


def _line_no(item: tuple[float, BatchLine]) -> int:
    return item[1].line_no


@dataclass(slots=True)
class ChunkResult:
    written: int = 0
    leftover: list[int] = field(default_factory=list)  # line numbers handed back
    stopped: str | None = None  # "cancelled", "expired", "gone" when the batch stopped running
    resume_in: float = 0.0  # seconds until the leftover may run (a tenant's rate window)
    next_first: int | None = None  # the turn to enqueue next: lines next_first..last


class ChunkRunner:
    """Runs ``lines`` of ``batch`` through ``client`` (an ``EngineClient``)."""

    def __init__(self, batch: Batch, lines: list[BatchLine], client: EngineClient) -> None:
        self.batch, self.client = batch, client
        # (not before, line), in line order: a line refused for now keeps its place
        self.todo: list[tuple[float, BatchLine]] = sorted(((0.0, x) for x in lines),
                                                          key=_line_no)
        self.inflight: dict[asyncio.Task, BatchLine] = {}
        self.result = ChunkResult()
        # the batch's key (or, started in the web app, its user), checked again before its
        # first line (checked_at 0)
        if batch.api_key_id is None and batch.created_by_id is not None:
            self.caller = Caller(batch.tenant, "user", user=batch.created_by,
                                 default_tier=Tier.COLD, checked_at=0.0)
        else:
            self.caller = Caller(batch.tenant, "api_key", api_key=batch.api_key,
                                 default_tier=Tier.COLD, checked_at=0.0)
        self.hold_until = 0.0  # epoch s: no new line before (a refusal's Retry-After)
        self.started = self.touched = time.monotonic()
        self.deadline = batch.deadline_at.timestamp()

    def run(self) -> ChunkResult:
        return async_to_sync(self._run_guarded)()

    async def _run_guarded(self) -> ChunkResult:
        try:
            return await self._run()
        finally:  # an error (engine gone) must not leave requests running for nobody
            await self._abort_inflight()

    async def _abort_inflight(self) -> None:
        """Abort every request in flight; keep those that finished before the abort landed."""
        inflight, self.inflight = self.inflight, {}
        for line in inflight.values():
            try:
                await self.client.abort(line.request_id)
            except Exception:
                logger.warning("abort of %s failed", line.request_id, exc_info=True)
        if not inflight:
            return
        done, running = await asyncio.wait(inflight, timeout=10 * settings.LASER_BATCH_POLL_S)
        for task in running:
            task.cancel()
        # let each cancelled line close its Served (slots, reservation) before the loop ends
        await asyncio.gather(*running, return_exceptions=True)
        failures: list[BaseException] = []
        for task in done:  # write what finished; close every Served even if a write fails
            if not task.cancelled() and task.exception() is None:
                try:
                    await self._finish(inflight[task], task.result(), requeue=False)
                except BaseException as exc:  # noqa: BLE001 - re-raised below
                    failures.append(exc)
                    await task.result().close("interrupted", book=False)
        if failures:
            raise failures[0]

    async def _run(self) -> ChunkResult:
        limit = settings.LASER_BATCH_CHUNK_CONCURRENCY
        soft_limit = settings.LASER_BATCH_CHUNK_SOFT_LIMIT_S
        while (self.todo and self.result.stopped is None) or self.inflight:
            over_time = time.monotonic() - self.started > soft_limit
            wait = self.hold_until - time.time()
            if self.todo and (over_time or (wait > settings.LASER_BATCH_YIELD_S
                                            and not self.inflight)):
                self._hand_back(max(0.0, wait))
                continue
            await self._fill(limit)
            if not self.inflight:
                await asyncio.sleep(min(_RETRY_S, settings.LASER_BATCH_POLL_S))
            else:
                done, _ = await asyncio.wait(self.inflight, timeout=settings.LASER_BATCH_POLL_S,
                                             return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    await self._settle(self.inflight.pop(task), task)
            if self.result.stopped is None:
                await self._check_batch()
        return self.result

    def _hand_back(self, resume_in: float) -> None:
        """End the turn: the lines not started go back to the queue, due in ``resume_in``."""
        self.result.leftover = sorted(x.line_no for _, x in self.todo)
        self.result.resume_in = resume_in
        self.todo.clear()

    async def _fill(self, limit: int) -> None:
        """Start the due lines, earliest line first, up to ``limit`` in flight. A line sent
        back for now (paced, or refused while the engine is saturated) holds the chunk's
        new lines for its wait and is then retried ahead of later lines: the engine is not
        sent more of what it just refused, and a batch's lines keep their order."""
        now, free = time.time(), limit - len(self.inflight)
        if self.result.stopped is not None or now < self.hold_until:
            return
        start = [i for i, (not_before, _) in enumerate(self.todo) if not_before <= now][:free]
        lines = [self.todo[i][1] for i in start]
        for i in reversed(start):
            del self.todo[i]
        for line in lines:
            self.inflight[asyncio.ensure_future(self._complete(line))] = line

    def _later(self, line: BatchLine, wait_s: float) -> None:
        bisect.insort(self.todo, (time.time() + wait_s, line), key=_line_no)

    async def _complete(self, line: BatchLine) -> Served:
        """Serve one line to its end; the caller writes it, then closes (books) the Served."""
        bind(line.request_id)  # this task's: a fault is logged and answered with the line's id
        served = await serve(
            caller=self.caller, kind=KINDS[self.batch.endpoint], body=line.body,
            endpoint=self.batch.endpoint, tier=Tier.COLD, request_id=line.request_id,
            deadline=self.deadline, key_max_age_s=settings.LASER_BATCH_POLL_S,
            batch_id=self.batch.uid, book_retryable=False, client=self.client)
        try:
            async for _ in served.deltas():
                pass
        except asyncio.CancelledError:
            await served.close("cancelled", book=False)  # the batch stopped: not this line's end
            raise
        except BaseException as exc:
            await served.close_for(exc, book=not isinstance(exc, EngineUnavailable))
            raise
        return served

    async def _finish(self, line: BatchLine, served: Served, *, requeue: bool) -> None:
        """Write a finished line once and book it when the write won; an aborted one goes back
        to the queue (``requeue``) or stays pending."""
        completion = served.collector.result if served.collector is not None else None
        if completion is not None and all(r in FINISHED for r in completion.finish_reasons):
            won = False
            try:
                won = await sync_to_async(self._write_success)(line, served)
            finally:
                await served.close("ok", book=won)
            return
        await served.close("interrupted", code="aborted", book=False)
        if requeue and self.result.stopped is None:
            self._later(line, _RETRY_S)  # aborted by someone else

    async def _settle(self, line: BatchLine, task: asyncio.Task) -> None:
        exc = task.exception()
        if exc is None:
            await self._finish(line, task.result(), requeue=True)
            return
        down = next((e for e in (exc, exc.__cause__)
                     if isinstance(e, (EngineUnavailable, *DB_DOWN))), None)
        if down is not None:  # the task retries the whole chunk later; this line stays
            raise down  # pending (the serving path may have wrapped it in a 500: unwrap)
        if isinstance(exc, APIError) and retryable(exc):  # paced: rpm/tpm, caps, saturation
            wait = float(exc.headers.get("Retry-After", _RETRY_S))
            wait = max(wait, 0.05)
            self.hold_until = max(self.hold_until, time.time() + wait)
            self._later(line, wait)
            return
        if not isinstance(exc, APIError):
            logger.error("line %s failed", line.request_id, exc_info=exc)
        await sync_to_async(self._write_refusal)(line, error_for(exc, line.body))

    async def _check_batch(self) -> None:
        status = await sync_to_async(self._current_status)()
        if status is None:
            self.result.stopped = "gone"
        elif status not in RUNNING_STATUSES:
            self.result.stopped = status
        elif time.time() >= self.deadline:
            self.result.stopped = "expired"
        if self.result.stopped is not None:
            self.todo.clear()
            await self._abort_inflight()

    def _current_status(self) -> str | None:
        if time.monotonic() - self.touched > HEARTBEAT_S:
            self.touched = time.monotonic()
            batch_touch(batch_id=self.batch.pk)
        return Batch.objects.filter(pk=self.batch.pk).values_list("status", flat=True).first()

    # --- writes (once per line) ----------------------------------------------------------

    def _write(self, line: BatchLine, **fields: Any) -> bool:
        fields["finished_at"] = timezone.now()
        won = BatchLine.objects.filter(pk=line.pk, status=LineStatus.PENDING).update(**fields)
        if won:
            for name, value in fields.items():
                setattr(line, name, value)
            self.result.written += 1
        return bool(won)

    def _write_success(self, line: BatchLine, served: Served) -> bool:
        assert served.parsed is not None and served.collector is not None
        completion = served.collector.result
        body = response_body(served.parsed, completion, self.client)
        response = {"status_code": 200, "request_id": line.request_id, "body": body}
        return self._write(line, status=LineStatus.SUCCEEDED, response=response,
                           prompt_tokens=completion.prompt_tokens,
                           completion_tokens=completion.completion_tokens)

    def _write_refusal(self, line: BatchLine, error: APIError) -> None:
        """A line refused for good (its SLO record was booked by the serving path)."""
        response = {"status_code": error.status, "request_id": line.request_id,
                    "body": error.body()}
        self._write(line, status=LineStatus.FAILED, response=response)


def turn_lines(batch: Batch) -> int:
    """Lines in one turn of ``batch``: ``LASER_BATCH_CHUNK_LINES`` shared by its tenant's
    running batches, so that every tenant gets about as many lines per round of turns however
    many batches it runs (a deficit order across tenants, in lines)."""
    running = Batch.objects.filter(tenant_id=batch.tenant_id,
                                   status__in=RUNNING_STATUSES).count()
    return max(1, settings.LASER_BATCH_CHUNK_LINES // max(1, running))


def chunk_run(*, batch_id: int, first: int, last: int,
              client: EngineClient | None = None) -> ChunkResult:
    """Run one turn of a running batch (the chunk task): its first ``turn_lines`` pending
    lines numbered ``first..last``. ``next_first`` of the result says where the next
    turn starts (None: the range is done)."""
    batch = (Batch.objects.select_related("tenant__plan", "api_key__tenant", "created_by")
             .filter(pk=batch_id).first())
    if batch is None or batch.status not in RUNNING_STATUSES:
        return ChunkResult(stopped="gone" if batch is None else batch.status)
    if batch.deadline_at <= timezone.now():
        return ChunkResult(stopped="expired")
    size = turn_lines(batch)
    lines = list(batch.lines.filter(status=LineStatus.PENDING, line_no__gte=first,
                                    line_no__lte=last).order_by("line_no")[: size + 1])
    beyond = lines[size].line_no if len(lines) > size else None
    lines = lines[:size]
    if not lines:
        return ChunkResult()
    batch_touch(batch_id=batch_id)
    if client is None:
        from apps.gateway.serving import get_engine_client

        client = get_engine_client()
    result = ChunkRunner(batch, lines, client).run()
    if result.stopped is None:
        result.next_first = result.leftover[0] if result.leftover else beyond
    return result
