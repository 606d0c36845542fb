"""The one way a finished request (any outcome) reaches the SLO books.

``report_request`` only appends to an in-process buffer, so it is cheap and safe on the hot
path, from async code (no ORM on the caller's thread) and from sync code. A daemon thread writes
the buffer in batches (``bulk_create``); the lifecycle stop hook and an ``atexit`` handler flush
what is left, so a clean shutdown loses nothing. ``flush_reports()`` writes synchronously (tests,
shutdown). Settings: ``LASER_SLO_AUTOFLUSH`` (start the thread), ``LASER_SLO_FLUSH_INTERVAL_S``,
``LASER_SLO_FLUSH_BATCH``, ``LASER_SLO_FLUSH_MAX_BACKOFF_S``, ``LASER_SLO_BUFFER_MAX``.
"""

from __future__ import annotations

import atexit
import logging
import threading
from collections import deque

from django.conf import settings
from django.db import InterfaceError, OperationalError

from apps.slo import writer
from apps.slo.report_types import BatchReport, RequestReport

logger = logging.getLogger(__name__)

# --- the buffer -----------------------------------------------------------------------------

# The database being unreachable (restart, failover, network): retry everything, with backoff.
_UNAVAILABLE = (OperationalError, InterfaceError)


class _Reporter:
    """A size-bounded buffer of reports and the one thread that writes it.

    Nothing is dropped for being retried: while the database is unreachable every report stays
    buffered and the thread retries with exponential backoff (``LASER_SLO_FLUSH_INTERVAL_S``
    doubled per failed flush, at most ``LASER_SLO_FLUSH_MAX_BACKOFF_S``). The buffer holds at most
    ``LASER_SLO_BUFFER_MAX`` reports; past it the *oldest* report is dropped and counted
    (``dropped()``, logged when dropping starts and once it is written again). A batch that fails
    for any other reason is split in halves until the report that breaks it is alone; that one
    report is dropped and logged, the rest written.
    """

    def __init__(self) -> None:
        self._buffer: deque[RequestReport | BatchReport] = deque()
        self._lock = threading.Lock()  # guards the buffer, the counters and the thread handle
        self._write_lock = threading.Lock()  # one writer at a time: flush() waits for the thread
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failures = 0  # consecutive flushes that found the database unreachable
        self._dropped = 0  # reports dropped by a full buffer since the last logged count
        self.dropped_total = 0

    def enqueue(self, item: RequestReport | BatchReport) -> None:
        with self._lock:
            self._buffer.append(item)
            self._trim_locked()
            size = len(self._buffer)
            if self._thread is None and getattr(settings, "LASER_SLO_AUTOFLUSH", True):
                self._start_locked()
        if size >= _setting("LASER_SLO_FLUSH_BATCH", 200):
            self._wake.set()

    def _trim_locked(self) -> None:
        excess = len(self._buffer) - _setting("LASER_SLO_BUFFER_MAX", 100_000)
        if excess <= 0:
            return
        if self._dropped == 0:
            logger.error("SLO report buffer full (%d): dropping the oldest reports",
                         len(self._buffer) - excess)
        for _ in range(excess):
            self._buffer.popleft()
        self._dropped += excess
        self.dropped_total += excess

    def pending(self) -> int:
        return len(self._buffer)

    def start(self) -> None:
        with self._lock:
            if self._thread is None:
                self._start_locked()

    def _start_locked(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="slo-reports", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the writer thread and write everything still buffered."""
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is not None:
            self._stop.set()
            self._wake.set()
            thread.join(timeout=30)
        self.flush()

    def backoff_s(self) -> float:
        """How long the thread waits before its next flush."""
        interval = _setting("LASER_SLO_FLUSH_INTERVAL_S", 1.0)
        if not self._failures:
            return interval
        return min(interval * 2 ** min(self._failures, 30),
                   _setting("LASER_SLO_FLUSH_MAX_BACKOFF_S", 30.0))

    def _run(self) -> None:
        from django.db import close_old_connections, connection

        while not self._stop.is_set():
            if self._failures:  # backing off: a full batch does not wake the thread early
                self._stop.wait(self.backoff_s())
            else:
                self._wake.wait(self.backoff_s())
            self._wake.clear()
            close_old_connections()
            try:
                self.flush(raise_errors=False)
            except Exception:  # the thread must survive anything
                logger.exception("SLO report writer failed")
        connection.close()

    def flush(self, *, raise_errors: bool = True) -> int:
        """Write every buffered report; returns how many were written."""
        written = 0
        with self._write_lock:
            while True:
                with self._lock:
                    batch = [self._buffer.popleft() for _ in range(min(len(self._buffer), 500))]
                if not batch:
                    self._note_recovered()
                    return written
                try:
                    written += _write_isolating(batch)
                except _Unwritten as unwritten:
                    with self._lock:
                        self._failures += 1
                        self._buffer.extendleft(reversed(unwritten.items))
                        self._trim_locked()
                    logger.warning("SLO reports not written, database unavailable (%d "
                                   "buffered, retry in %.1f s)", self.pending(),
                                   self.backoff_s(), exc_info=unwritten.__cause__)
                    if raise_errors:
                        raise unwritten.__cause__ from None
                    return written

    def _note_recovered(self) -> None:
        with self._lock:
            self._failures, dropped, self._dropped = 0, self._dropped, 0
        if dropped:
            logger.error("SLO report buffer full: %d reports were dropped", dropped)


class _Unwritten(Exception):
    def __init__(self, items: list) -> None:
        super().__init__(f"{len(items)} reports not written")
        self.items = items


def _write_isolating(items: list) -> int:
    """Write ``items``, isolating a report that cannot be written (``write_batch`` is atomic).

    Raises ``_Unwritten`` (caused by the database error) with every report not yet written when
    the database is unreachable.
    """
    chunks, written = deque([items]), 0
    while chunks:
        chunk = chunks.popleft()
        try:
            written += writer.write_batch(chunk)
        except _UNAVAILABLE as exc:
            raise _Unwritten([*chunk, *(item for rest in chunks for item in rest)]) from exc
        except Exception:
            if len(chunk) == 1:
                logger.exception("dropped SLO report %s: it cannot be written",
                                 getattr(chunk[0], "request_id", None) or chunk[0].batch_id)
                continue
            half = len(chunk) // 2
            chunks.extendleft([chunk[half:], chunk[:half]])
    return written


def _setting(name: str, default):
    return getattr(settings, name, default)


_reporter = _Reporter()


def report_request(report: RequestReport) -> None:
    """Record one finished request. Never blocks on the database; never raises for I/O."""
    _reporter.enqueue(report)


def report_batch(report: BatchReport) -> None:
    """Record a cold job's state (created, progressed, finished) through the same buffer."""
    _reporter.enqueue(report)


def flush_reports() -> int:
    """Write all buffered reports now (sync code only). Returns the number written."""
    return _reporter.flush()


def dropped_reports() -> int:
    """Reports dropped since the process started because the buffer was full."""
    return _reporter.dropped_total


def _flush_at_exit() -> None:
    try:
        _reporter.stop()
    except Exception:
        logger.exception("SLO reports could not be flushed at exit")


def install() -> None:
    """Hook the writer into the process (called once from ``AppConfig.ready``)."""
    atexit.register(_flush_at_exit)
    if getattr(settings, "LASER_EMBEDDED", False):
        from apps.core.lifecycle import register_component

        register_component("slo-reports", start=_reporter.start, stop=_reporter.stop)
