"""Schedulers: one interface, several policies (``fcfs`` and ``priority`` baselines here; the
tier policies register themselves in ``POLICIES``)."""

from __future__ import annotations

from inference.kv.block_manager import BlockManager
from inference.scheduler.base import Scheduler
from inference.scheduler.config import SchedulerConfig
from inference.scheduler.fcfs import FCFSScheduler, PriorityScheduler
from inference.scheduler.plan import ScheduledSeq, StepPlan, StepResult

POLICIES: dict[str, type[Scheduler]] = {
    FCFSScheduler.name: FCFSScheduler,
    PriorityScheduler.name: PriorityScheduler,
}


def make_scheduler(policy: str, config: SchedulerConfig, kv: BlockManager) -> Scheduler:
    try:
        cls = POLICIES[policy]
    except KeyError:
        raise ValueError(f"unknown scheduling policy {policy!r}; known: {sorted(POLICIES)}")
    return cls(config, kv)


__all__ = ["POLICIES", "Scheduler", "SchedulerConfig", "ScheduledSeq", "StepPlan", "StepResult",
           "make_scheduler"]
