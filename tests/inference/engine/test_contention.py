"""The CPU contention factor the engine measures (``inference.engine.contention``)."""

from __future__ import annotations

import threading

import pytest

from inference.engine.contention import MAX_FACTOR, CpuContention, read_schedstat

MS = 1_000_000  # ns


class Counts:
    """A scripted ``schedstat`` reader: per call, {tid: (run ns, wait ns)}."""

    def __init__(self, *reads: dict[int, tuple[int, int]] | None) -> None:
        self.reads = list(reads)

    def __call__(self) -> dict[int, tuple[int, int]] | None:
        return self.reads.pop(0)


def test_the_factor_is_runnable_time_over_run_time_smoothed():
    counts = Counts({1: (0, 0), 2: (0, 0)},
                    {1: (100 * MS, 300 * MS), 2: (100 * MS, 300 * MS)},  # 4x
                    {1: (200 * MS, 300 * MS), 2: (200 * MS, 300 * MS)})  # none
    c = CpuContention(interval_s=0.5, alpha=0.5, reader=counts)
    assert c.sample(0.0) is None and c.factor == 1.0  # the first read only sets the origin
    assert c.sample(0.6) == pytest.approx(2.5)  # 1 + 0.5 x (4 - 1)
    assert c.sample(1.2) == pytest.approx(1.75)


def test_reads_wait_their_interval_and_idle_intervals_keep_the_factor():
    counts = Counts({1: (0, 0)}, {1: (1 * MS, 9 * MS)}, {1: (40 * MS, 120 * MS)})
    c = CpuContention(interval_s=0.5, alpha=1.0, min_run_s=0.02, reader=counts)
    c.sample(0.0)
    assert c.sample(0.1) is None and len(counts.reads) == 2  # within the interval: no read
    assert c.sample(0.6) is None and c.factor == 1.0  # 1 ms run: too little to say
    # the idle interval's counts stay the origin: (40 + 120) / 40 over both
    assert c.sample(1.2) == pytest.approx(4.0)


def test_threads_that_come_and_go_count_only_while_both_reads_see_them():
    counts = Counts({1: (0, 0), 2: (0, 0)},
                    {1: (50 * MS, 50 * MS), 3: (10 * MS, 990 * MS)})
    c = CpuContention(alpha=1.0, reader=counts)
    c.sample(0.0)
    assert c.sample(1.0) == pytest.approx(2.0)  # thread 3 was born meanwhile: not counted


def test_the_factor_is_bounded_and_never_below_one():
    counts = Counts({1: (0, 0)}, {1: (30 * MS, 10_000 * MS)}, {1: (60 * MS, 10_000 * MS)})
    c = CpuContention(alpha=1.0, reader=counts)
    c.sample(0.0)
    assert c.sample(1.0) == MAX_FACTOR
    assert c.sample(2.0) == 1.0


def test_without_the_counts_the_factor_stays_one():
    c = CpuContention(reader=lambda: None)
    assert c.sample(0.0) is None and c.sample(1.0) is None and c.factor == 1.0


def test_the_real_counts_include_this_thread_which_ran():
    if read_schedstat() is None:
        pytest.skip("no /proc/self/task/*/schedstat here")
    sum(range(100_000))
    counts = read_schedstat()
    assert counts is not None and all(run >= 0 and wait >= 0 for run, wait in counts.values())
    assert counts[threading.get_native_id()][0] > 0
