"""Strict priority and earliest-deadline-first: the FCFS loop with another order (baselines
the ``laser`` policy is measured against in the simulator)."""

from __future__ import annotations

import math

from inference.request import Tier
from inference.scheduler.fcfs import FCFSScheduler
from inference.sequence import Sequence


class PriorityScheduler(FCFSScheduler):
    """Strict static priority by tier (hot, then warm, then cold), FCFS within a tier."""

    name = "priority"

    def sort_key(self, seq: Sequence) -> tuple:
        return (seq.tier.rank, seq.arrival_time, seq.seq_id)


class EDFScheduler(FCFSScheduler):
    """Earliest deadline first over the same loop: hot by its TTFT deadline (arrival + TTFT
    target), warm by arrival + its mean-TTFT target, cold by its deadline."""

    name = "edf"

    def sort_key(self, seq: Sequence) -> tuple:
        t = seq.targets
        if seq.asked_tier is Tier.HOT:
            due = seq.arrival_time + t.ttft_p99_s
        elif seq.asked_tier is Tier.WARM:
            due = seq.arrival_time + t.warm_mean_ttft_s
        else:
            due = seq.deadline if seq.deadline is not None else math.inf
        return (due, seq.seq_id)
