"""The async front: an ``LLMEngine`` stepping on a background thread, deltas to asyncio.

The step loop sleeps on a condition when there is nothing to do (no busy loop). Deltas reach
each request's ``asyncio.Queue`` through ``loop.call_soon_threadsafe``, one call per event loop
and step. Admission runs in the caller's ``await generate(...)``, so every refusal is raised before
any work; closing, cancelling or dropping a stream aborts its request.

A step loop that raises is restarted with backoff (``restart_backoff_s``): every open stream
ends with ``EngineUnavailable`` (an error frame, booked as an interruption), every request is
dropped with its KV blocks, and ``ready`` is False, with ``not_ready_reason`` saying why, until
the loop runs again (docs/faults.md).
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import logging
import threading
import time
import weakref
from collections import deque
from collections.abc import Sequence
from typing import Any

from inference.errors import EngineUnavailable, InvalidParameter
from inference.request import Delta, EngineRequest

from .config import EngineConfig
from .llm_engine import LLMEngine
from .stats import EngineStats, max_token_bytes

_IDLE_POLL_S = 0.005  # an empty plan with work queued (a policy holding work back): re-check
_HEALTHY_S = 60.0  # a step loop that ran this long before failing starts the backoff afresh

logger = logging.getLogger(__name__)


def _freeze_long_lived() -> None:
    """Move every object alive now (the model's metadata, the tokenizer's tables, the loaded
    modules: 176,000 for the bundled model's engine alone, none of them garbage) out of the
    cyclic collector's generations. A full collection walked them all (94 ms for the engine
    alone, 146-185 ms in the server), holding the GIL, in whichever thread allocated at the
    time, a request's thread included: the engine thread waited for the GIL between two
    layers and a hot stream's gap grew by that much (docs/engine.md). Collections now walk
    only what was allocated since."""
    gc.collect()
    gc.freeze()


class DeltaStream:
    """One request's deltas, in order, until every choice finished (see ``EngineClient``)."""

    def __init__(self, engine: AsyncEngine, request_id: str, num_choices: int,
                 loop: asyncio.AbstractEventLoop) -> None:
        self.request_id = request_id
        self._engine = engine
        self._loop = loop
        self._queue: asyncio.Queue[Delta | BaseException] = asyncio.Queue()
        self._open_choices = num_choices
        self._finished = False
        # Dropped without aclose(): abort from whichever thread collects it.
        self._finalizer = weakref.finalize(self, engine._defer_abort, request_id)

    def __aiter__(self) -> DeltaStream:
        return self

    async def __anext__(self) -> Delta:
        if self._finished:
            raise StopAsyncIteration
        try:
            item = await self._queue.get()
        except asyncio.CancelledError:  # the consumer went away (client disconnect, timeout)
            self._close()
            raise
        if isinstance(item, BaseException):
            self._finished = True
            self._finalizer.detach()
            raise item
        if item.finish_reason is not None:
            self._open_choices -= 1
            if self._open_choices == 0:
                self._finished = True
                self._finalizer.detach()
        return item

    async def aclose(self) -> None:
        self._close()

    async def __aenter__(self) -> DeltaStream:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        self._close()

    @property
    def finished(self) -> bool:
        return self._finished

    def _close(self) -> None:
        if not self._finished:
            self._finished = True
            self._finalizer.detach()
            self._engine._abort_now(self.request_id)

    def _push(self, items: Sequence[Delta | BaseException]) -> None:  # on the loop's thread
        for item in items:
            self._queue.put_nowait(item)


def _push_all(batch: list[tuple[DeltaStream, list[Delta]]]) -> None:  # on the loop's thread
    for stream, items in batch:
        stream._push(items)


class AsyncEngine:
    """Runs an ``LLMEngine`` off the event loop; implements ``EngineClient``.

    Args:
        config: used to build (load) the engine on the step thread when ``engine`` is None.
        engine: an existing engine (tests, benchmarks).
    """

    #: (first, longest) wait before restarting a failed step loop; the wait doubles while the
    #: loop keeps failing within ``_HEALTHY_S`` of its restart.
    restart_backoff_s: tuple[float, float] = (0.5, 30.0)

    def __init__(self, config: EngineConfig | None = None, engine: LLMEngine | None = None):
        self.config = config or (engine.config if engine is not None else EngineConfig())
        self.engine = engine
        self._cond = threading.Condition()
        self._streams: weakref.WeakValueDictionary[str, DeltaStream] = (
            weakref.WeakValueDictionary())
        self._deferred_aborts: deque[str] = deque()
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._loaded = threading.Event()
        self.error: BaseException | None = None
        self.restarts = 0  # step-loop failures survived
        self.not_ready_reason: str | None = None  # set while a failed loop waits to restart
        self._prompt_bytes: int | None = None

    # ---- lifecycle -----------------------------------------------------------------------
    def start(self, wait: bool = True, timeout: float | None = None) -> None:
        """Start the step thread (loading the model there if needed); with ``wait``, block
        until it is ready and re-raise a load failure."""
        if self._thread is not None:
            return
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="laser-engine", daemon=True)
        self._thread.start()
        if wait:
            self._loaded.wait(timeout)
            if self.error is not None:
                raise self.error

    async def wait_ready(self, timeout: float | None = None) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self._loaded.wait, timeout)
        if self.error is not None:
            raise EngineUnavailable(f"the engine failed to start: {self.error}")

    def stop(self, timeout: float | None = 10.0) -> None:
        """Stop the loop; streams still open end with ``EngineUnavailable``."""
        thread = self._thread
        if thread is None:
            return
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        thread.join(timeout)
        self._thread = None
        self._fail_all(EngineUnavailable("the engine stopped"))

    @property
    def ready(self) -> bool:
        return (self._loaded.is_set() and self.error is None and not self._stopping
                and self.not_ready_reason is None
                and self._thread is not None and self._thread.is_alive())

    # ---- EngineClient --------------------------------------------------------------------
    async def encode(self, request: EngineRequest) -> list[int]:
        """The prompt's token ids, rendered and tokenised on an executor thread, not the loop."""
        engine = self._ready_engine()
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, engine.encode, request)

    async def generate(self, request: EngineRequest,
                       prompt_ids: list[int] | None = None) -> DeltaStream:
        engine = self._ready_engine()
        if prompt_ids is None:
            prompt_ids = await self.encode(request)  # InvalidParameter / PromptTooLong
        stream = DeltaStream(self, request.request_id, request.sampling.n,
                             asyncio.get_running_loop())
        with self._cond:
            if request.request_id in self._streams:
                stream._finalizer.detach()
                raise InvalidParameter("request_id",
                                       f"request {request.request_id!r} is in flight.")
            self._streams[request.request_id] = stream
            try:
                engine.add_request(request, prompt_ids)  # AdmissionRefused, EngineOverloaded
            except BaseException:
                del self._streams[request.request_id]
                stream._finalizer.detach()
                raise
            self._cond.notify()
        return stream

    async def abort(self, request_id: str) -> None:
        if self.engine is None:
            return
        deltas = self.engine.abort(request_id)
        stream = self._streams.pop(request_id, None)
        if stream is not None and deltas:
            stream._push(list(deltas))

    async def stats(self) -> EngineStats:
        return self.stats_now()

    def stats_now(self) -> EngineStats:
        """``stats()`` for synchronous callers (any thread)."""
        engine = self.engine
        if engine is None or not self._loaded.is_set():
            return EngineStats(ready=False)
        return dataclasses.replace(engine.stats(), ready=self.ready,
                                   max_model_len=engine.max_model_len,
                                   max_prompt_bytes=self._max_prompt_bytes(engine))

    def token_text(self, token_id: int) -> str:
        tokenizer = self.engine.tokenizer if self.engine is not None else None
        if tokenizer is None:
            return ""
        return tokenizer.decode([token_id], skip_special_tokens=False)

    # ---- internals -----------------------------------------------------------------------
    def _ready_engine(self) -> LLMEngine:
        engine = self.engine
        if not self.ready or engine is None:
            raise EngineUnavailable("the engine is not ready")
        return engine

    def _max_prompt_bytes(self, engine: LLMEngine) -> int:
        """Bytes past which a prompt can never fit the context: every token holds at most the
        longest vocabulary entry's bytes. 0 (no bound) without a tokenizer."""
        if self._prompt_bytes is None:
            longest = max_token_bytes(engine.tokenizer)
            self._prompt_bytes = engine.max_model_len * longest if longest else 0
        return self._prompt_bytes

    def _abort_now(self, request_id: str) -> None:
        self._streams.pop(request_id, None)
        if self.engine is not None:
            self.engine.abort(request_id)

    def _defer_abort(self, request_id: str) -> None:
        # May run inside the step thread (garbage collection), even mid-step: only queue it.
        self._deferred_aborts.append(request_id)

    def _run(self) -> None:
        try:
            if self.engine is None:
                self.engine = LLMEngine(self.config)
            _freeze_long_lived()
            self._loaded.set()
            self._run_restarting()
        except BaseException as exc:  # noqa: BLE001 - reported to every open stream
            self.error = exc
            self._loaded.set()
            self._fail_all(EngineUnavailable(f"the engine failed: {exc!r}"))

    def _run_restarting(self) -> None:
        """Run the step loop until ``stop``; restart it with backoff whenever it raises."""
        delay = 0.0
        while True:
            started = time.monotonic()
            try:
                self._loop()
                return
            except Exception as exc:
                first, longest = self.restart_backoff_s
                healthy = time.monotonic() - started >= _HEALTHY_S
                delay = first if healthy or not delay else min(2 * delay, longest)
                logger.exception("the engine's step loop failed; restarting in %.1f s", delay)
                self.not_ready_reason = f"the step loop failed ({exc!r}); restarting"
                self._recover(EngineUnavailable(f"the engine failed: {exc!r}"))
            with self._cond:
                if self._cond.wait_for(lambda: self._stopping, timeout=delay):
                    return
            self.restarts += 1
            self.not_ready_reason = None
            logger.warning("the engine's step loop restarted (%d so far)", self.restarts)

    def _recover(self, error: BaseException) -> None:
        """After a failed step: end every open stream with ``error`` and drop every request
        (a step that raised midway leaves them in no state worth resuming). Under ``_cond``,
        so a request ``generate`` adds meanwhile is either failed here or kept whole."""
        with self._cond:
            self._fail_all(error)
            self._deferred_aborts.clear()
            if self.engine is not None:
                self.engine.abort_all()

    def _loop(self) -> None:
        engine = self.engine
        assert engine is not None  # _run built it
        while True:
            with self._cond:
                while not self._stopping and not self._has_work():
                    self._cond.wait()
                if self._stopping:
                    return
            while self._deferred_aborts:
                engine.abort(self._deferred_aborts.popleft())
            deltas = engine.step()
            self._deliver(deltas)
            if not self._has_work():  # idle now: a good moment to give free memory back
                engine.release_idle_memory()
            if not deltas and engine.last_step_empty:
                with self._cond:
                    self._cond.wait(_IDLE_POLL_S)

    def _has_work(self) -> bool:
        engine = self.engine
        return bool(self._deferred_aborts) or (engine is not None and engine.has_unfinished())

    def _deliver(self, deltas: list[Delta]) -> None:
        by_request: dict[str, list[Delta]] = {}
        for d in deltas:
            by_request.setdefault(d.request_id, []).append(d)
        # one wake-up per event loop and step, however many of its streams got deltas
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[DeltaStream, list[Delta]]]] = {}
        for request_id, items in by_request.items():
            stream = self._streams.get(request_id)
            if stream is None:
                continue
            if self.engine is None or not self.engine.is_active(request_id):
                self._streams.pop(request_id, None)
            by_loop.setdefault(stream._loop, []).append((stream, items))
        for loop, batch in by_loop.items():
            try:
                loop.call_soon_threadsafe(_push_all, batch)
            except RuntimeError:  # its event loop is closed: nobody is listening
                for stream, _ in batch:
                    self._abort_now(stream.request_id)

    def _fail_all(self, error: BaseException) -> None:
        for request_id in list(self._streams.keys()):
            stream = self._streams.pop(request_id, None)
            if stream is None:
                continue
            if self.engine is not None:
                self.engine.abort(request_id)
            try:
                stream._loop.call_soon_threadsafe(stream._push, (error,))
            except RuntimeError:
                pass


__all__ = ["AsyncEngine", "DeltaStream"]
