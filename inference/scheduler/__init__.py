"""Schedulers: one interface, several policies. ``fcfs``, ``priority`` and ``edf`` (baselines),
``partitioned`` (static per-tier pools, what operators do today) and ``laser`` (tier-aware)."""

from __future__ import annotations

from inference.kv.block_manager import BlockManager
from inference.scheduler.base import Scheduler
from inference.scheduler.config import SchedulerConfig
from inference.scheduler.cost import CostEstimator, EwmaCostEstimator, LinearCost
from inference.scheduler.fcfs import EDFScheduler, FCFSScheduler, PriorityScheduler
from inference.scheduler.laser import LaserAblations, LaserPolicyConfig, LaserScheduler
from inference.scheduler.partitioned import PartitionedScheduler
from inference.scheduler.plan import ScheduledSeq, StepPlan, StepResult

POLICIES: dict[str, type[Scheduler]] = {
    FCFSScheduler.name: FCFSScheduler,
    PriorityScheduler.name: PriorityScheduler,
    EDFScheduler.name: EDFScheduler,
    PartitionedScheduler.name: PartitionedScheduler,
    LaserScheduler.name: LaserScheduler,
}


def make_scheduler(policy: str, config: SchedulerConfig, kv: BlockManager,
                   **options) -> Scheduler:
    """Build a policy by name. ``options`` go to its constructor: ``policy_config=``, ``cost=``,
    ``ablations=`` and ``pause_layers=`` for ``laser``, ``shares=`` for ``partitioned``; the
    baselines take none."""
    try:
        cls = POLICIES[policy]
    except KeyError:
        raise ValueError(f"unknown scheduling policy {policy!r}; known: {sorted(POLICIES)}")
    return cls(config, kv, **options)


__all__ = ["POLICIES", "CostEstimator", "EwmaCostEstimator", "LaserAblations",
           "LaserPolicyConfig", "LinearCost",
           "Scheduler", "SchedulerConfig", "ScheduledSeq", "StepPlan", "StepResult",
           "make_scheduler"]
