"""CPU contention: how much longer this process's threads wait for a core than they run.

On a shared host another process's work slows every step, and the cost model, which learns
wall-clock step times, prices the queue in slowed seconds. The overload decision must not read
that as overload (a busy-loop neighbour turned 32 short chats into 503s): it prices the queue
at the machine's own speed, the learned price divided by this factor. Linux counts, per
thread, the nanoseconds run on a CPU and those spent runnable in a run queue
(``/proc/self/task/<tid>/schedstat``); over an interval, (run + wait) / run is how many
times longer the threads took than with the cores to themselves. The count is the whole
process's (the engine's pool workers cannot be told from the others), so the serving
threads' own share of the cores counts as contention too; elsewhere the factor stays 1.
"""

from __future__ import annotations

import os
from collections.abc import Callable

_TASKS = "/proc/self/task"
MAX_FACTOR = 16.0

Reader = Callable[[], dict[int, tuple[int, int]] | None]


def read_schedstat() -> dict[int, tuple[int, int]] | None:
    """Per thread id: (ns run on a CPU, ns waited in a run queue); None without the counts."""
    try:
        tids = os.listdir(_TASKS)
    except OSError:
        return None
    counts = {}
    for tid in tids:
        try:
            with open(f"{_TASKS}/{tid}/schedstat", "rb") as f:
                run, wait, _ = f.read().split()
        except (OSError, ValueError):
            continue  # a thread that ended meanwhile
        counts[int(tid)] = (int(run), int(wait))
    return counts or None


class CpuContention:
    """The contention factor (≥ 1), sampled at most every ``interval_s`` (a read costs about
    a millisecond with 30 threads on a busy host) and smoothed with ``alpha``; an interval in
    which the threads ran less than ``min_run_s`` (an idle engine) keeps the last value."""

    def __init__(self, interval_s: float = 0.5, alpha: float = 0.5, min_run_s: float = 0.02,
                 reader: Reader = read_schedstat) -> None:
        self.interval_s, self.alpha, self.min_run_s = interval_s, alpha, min_run_s
        self.factor = 1.0
        self._read = reader
        self._last: dict[int, tuple[int, int]] | None = None
        self._at = -float("inf")

    def sample(self, now: float) -> float | None:
        """The updated factor when an interval ended at ``now`` (monotonic seconds) with
        enough run time in it, else None."""
        if now - self._at < self.interval_s:
            return None
        counts = self._read()
        if counts is None:
            return None
        self._at = now
        last, self._last = self._last, counts
        if last is None:
            return None
        # threads present at both reads (pool threads come and go)
        run = sum(c[0] - last[t][0] for t, c in counts.items() if t in last)
        wait = sum(c[1] - last[t][1] for t, c in counts.items() if t in last)
        if run < self.min_run_s * 1e9:
            self._last = last  # too little ran: extend the interval instead
            return None
        step = min(MAX_FACTOR, max(1.0, (run + max(0, wait)) / run))
        self.factor += self.alpha * (step - self.factor)
        return self.factor
