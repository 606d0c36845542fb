"""First-come-first-served continuous batching (vLLM's default policy), the plain fallback.

Running sequences advance first (decodes and unfinished prefill chunks), in arrival order;
when KV blocks run out the latest arrival is preempted; then waiting sequences join in arrival
order while the token budget and the sequence cap allow. The engine serves it where an operator
sets ``LASER_POLICY=fcfs``: one tier-blind order with no per-tier pacing, for a deployment that
serves one tier or to take the tier-aware policy out of the way while a fault is isolated. The
simulator's ``priority`` and ``edf`` baselines (``sim.policies``) reuse its loop.
"""

from __future__ import annotations

from inference.kv.block_manager import BlockCopy
from inference.scheduler.base import Scheduler
from inference.scheduler.plan import ScheduledSeq, StepPlan
from inference.sequence import Sequence


class FCFSScheduler(Scheduler):
    name = "fcfs"

    def sort_key(self, seq: Sequence) -> tuple:
        """Smaller runs first and is preempted last."""
        return (seq.arrival_time, seq.seq_id)

    def schedule(self, now: float) -> StepPlan:
        budget = self.config.max_num_batched_tokens
        items: list[tuple[ScheduledSeq, list[BlockCopy]]] = []
        preempted: list[str] = []
        self.running.sort(key=self.sort_key)
        queue = list(self.running)
        while queue and budget > 0:
            seq = queue.pop(0)
            got = self.try_schedule(seq, budget)
            while got is None and queue:
                victim = queue.pop()  # the least urgent running sequence not yet scheduled
                self.preempt(victim)
                preempted.append(victim.seq_id)
                got = self.try_schedule(seq, budget)
            if got is None:
                self.preempt(seq)
                preempted.append(seq.seq_id)
                break
            items.append(got)
            budget -= got[0].num_tokens
        if not preempted:
            budget = self._admit_waiting(items, budget, now)
        return self.make_plan(items, preempted)

    def _admit_waiting(self, items: list, budget: int, now: float) -> int:
        self.waiting.sort(key=self.sort_key)
        for seq in list(self.waiting):
            if budget <= 0 or len(self.running) >= self.config.max_num_seqs:
                break
            got = self.try_schedule(seq, budget)
            if got is None:
                self.release_unscheduled(seq)
                break  # head-of-line: later arrivals do not jump the queue
            self.start_running(seq, now)
            items.append(got)
            budget -= got[0].num_tokens
        return budget
