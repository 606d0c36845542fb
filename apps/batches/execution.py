"""Running one chunk of a batch through the engine.

A chunk sends its pending lines to the engine at cold tier with the batch's deadline (at most
``LASER_BATCH_CHUNK_CONCURRENCY`` at once), so the engine's scheduler paces them: in hot's gaps,
promoted as slack runs out. Each result is written once, by a conditional UPDATE from
``pending``: a redelivered chunk skips lines already written, and a line expired or cancelled
meanwhile keeps that state. While lines are in flight the chunk re-reads its batch every
``LASER_BATCH_POLL_S``; on cancel or at the deadline it aborts its engine requests. Past
``LASER_BATCH_CHUNK_SOFT_LIMIT_S`` it stops taking lines and hands the rest back, so every task
stays minutes long. A chunk marks its batch's ``progress_at`` when it starts and every
``HEARTBEAT_S`` while it runs, so the sweep leaves a live batch alone.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from asgiref.sync import async_to_sync, sync_to_async
from django.conf import settings
from django.utils import timezone

from apps.batches.models import RUNNING_STATUSES, Batch, BatchLine, LineStatus
from apps.batches.rendering import error_for, response_body, run_parsed
from apps.batches.reports import report_line
from apps.batches.services import batch_touch
from apps.batches.validation import ENDPOINTS
from apps.gateway.collect import Completion
from apps.gateway.params import ParsedRequest
from apps.slo.reporting import tbt_stats
from apps.slo.selectors import contract_for
from inference.errors import AdmissionRefused, EngineError, EngineUnavailable
from laser_platform.errors import APIError

if TYPE_CHECKING:
    from inference.engine.client import EngineClient

logger = logging.getLogger(__name__)

FINISHED = ("stop", "length")
_RETRY_S = 1.0  # wait before resending a line the engine refused without saying how long
HEARTBEAT_S = 60.0  # well under LASER_BATCH_STALL_S, and one UPDATE a minute per chunk


@dataclass(slots=True)
class ChunkResult:
    written: int = 0
    leftover: list[int] = field(default_factory=list)  # line numbers handed back (soft limit)
    stopped: str | None = None  # "cancelled", "expired", "gone" when the batch stopped running


class ChunkRunner:
    """Runs ``lines`` of ``batch`` through ``client`` (an ``EngineClient``)."""

    def __init__(self, batch: Batch, lines: list[BatchLine], client: EngineClient) -> None:
        self.batch, self.client = batch, client
        self.todo: deque[tuple[float, BatchLine]] = deque((0.0, x) for x in lines)
        self.inflight: dict[asyncio.Task, BatchLine] = {}
        self.result = ChunkResult()
        self.contract = contract_for(tenant=batch.tenant, tier="cold")
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
        for task in done:
            if not task.cancelled() and task.exception() is None:
                parsed, completion = task.result()
                if all(reason in FINISHED for reason in completion.finish_reasons):
                    await sync_to_async(self._write_success)(inflight[task], completion, parsed)

    async def _run(self) -> ChunkResult:
        limit = settings.LASER_BATCH_CHUNK_CONCURRENCY
        soft_limit = settings.LASER_BATCH_CHUNK_SOFT_LIMIT_S
        while (self.todo and self.result.stopped is None) or self.inflight:
            over_time = time.monotonic() - self.started > soft_limit
            if over_time and self.todo:
                self.result.leftover = sorted(x.line_no for _, x in self.todo)
                self.todo.clear()
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

    async def _fill(self, limit: int) -> None:
        now = time.time()
        for _ in range(len(self.todo)):
            if len(self.inflight) >= limit or self.result.stopped is not None:
                return
            not_before, line = self.todo.popleft()
            if not_before > now:
                self.todo.append((not_before, line))
                continue
            self.inflight[asyncio.ensure_future(self._complete(line))] = line

    async def _complete(self, line: BatchLine) -> tuple[ParsedRequest, Completion]:
        parse = ENDPOINTS[self.batch.endpoint]
        parsed = parse(line.body, tenant=self.batch.tenant, api_key=self.batch.api_key,
                       contract=self.contract, request_id=line.request_id,
                       deadline=self.deadline)
        return parsed, await run_parsed(parsed, self.client)

    async def _settle(self, line: BatchLine, task: asyncio.Task) -> None:
        exc = task.exception()
        if exc is None:
            parsed, completion = task.result()
            if all(reason in FINISHED for reason in completion.finish_reasons):
                await sync_to_async(self._write_success)(line, completion, parsed)
            elif self.result.stopped is None:
                self.todo.append((time.time() + _RETRY_S, line))  # aborted by someone else
            return
        if isinstance(exc, AdmissionRefused):
            wait = exc.retry_after_s if exc.retry_after_s is not None else _RETRY_S
            self.todo.append((time.time() + max(wait, 0.05), line))
        elif isinstance(exc, EngineUnavailable):
            raise exc  # the task retries the whole chunk later; this line stays pending
        else:
            if not isinstance(exc, (APIError, EngineError)):
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

    def _write_success(self, line: BatchLine, completion: Completion,
                       parsed: ParsedRequest) -> None:
        body = response_body(parsed, completion, self.client)
        response = {"status_code": 200, "request_id": line.request_id, "body": body}
        if self._write(line, status=LineStatus.SUCCEEDED, response=response,
                       prompt_tokens=completion.prompt_tokens,
                       completion_tokens=completion.completion_tokens):
            report_line(self.batch, line, outcome="ok", arrival=completion.arrival,
                        first_token_at=completion.first_token_at,
                        tbt=tbt_stats(completion.token_times),
                        tier_served=str(completion.tier_served), demoted=completion.demoted)

    def _write_refusal(self, line: BatchLine, error: APIError) -> None:
        response = {"status_code": error.status, "request_id": line.request_id,
                    "body": error.body()}
        if self._write(line, status=LineStatus.FAILED, response=response):
            outcome = "rejected_400" if error.status < 500 else "error"
            report_line(self.batch, line, outcome=outcome, error_code=str(error.code or ""))


def chunk_run(*, batch_id: int, first: int, last: int,
              client: EngineClient | None = None) -> ChunkResult:
    """Run the pending lines numbered ``first..last`` of a running batch (the chunk task)."""
    batch = Batch.objects.select_related("tenant", "api_key").filter(pk=batch_id).first()
    if batch is None or batch.status not in RUNNING_STATUSES:
        return ChunkResult(stopped="gone" if batch is None else batch.status)
    if batch.deadline_at <= timezone.now():
        return ChunkResult(stopped="expired")
    lines = list(batch.lines.filter(status=LineStatus.PENDING, line_no__gte=first,
                                    line_no__lte=last).order_by("line_no"))
    if not lines:
        return ChunkResult()
    batch_touch(batch_id=batch_id)
    if client is None:
        from apps.gateway.engine import get_engine_client

        client = get_engine_client()
    return ChunkRunner(batch, lines, client).run()
