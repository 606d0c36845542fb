"""Schedulers: one interface; the product serves ``laser`` (tier-aware) and keeps ``fcfs`` as
the plain fallback (``fcfs.py`` says when an operator wants it). The simulator's baselines
(``priority``, ``edf``, ``partitioned``) live in ``sim.policies``."""

from __future__ import annotations

from collections.abc import Mapping

from inference.kv.block_manager import BlockManager
from inference.scheduler.base import Scheduler
from inference.scheduler.config import SchedulerConfig
from inference.scheduler.cost import CostEstimator, EwmaCostEstimator, LinearCost
from inference.scheduler.fcfs import FCFSScheduler
from inference.scheduler.interface import (
    NEVER_PAUSES,
    LayerPausing,
    SchedulingPolicy,
    layer_pausing,
)
from inference.scheduler.laser import LaserParts, LaserPolicyConfig, LaserScheduler
from inference.scheduler.plan import ScheduledSeq, StepPlan, StepResult

POLICIES: dict[str, type[Scheduler]] = {
    FCFSScheduler.name: FCFSScheduler,
    LaserScheduler.name: LaserScheduler,
}


def make_scheduler(policy: str, config: SchedulerConfig, kv: BlockManager, *,
                   registry: Mapping[str, type[Scheduler]] = POLICIES, **options) -> Scheduler:
    """Build a policy of ``registry`` by name. ``options`` go to its constructor:
    ``policy_config=``, ``cost=``, ``pause_layers=`` and ``parts=`` for ``laser``; ``fcfs``
    takes none."""
    try:
        cls = registry[policy]
    except KeyError:
        raise ValueError(f"unknown scheduling policy {policy!r}; known: {sorted(registry)}")
    return cls(config, kv, **options)


__all__ = ["NEVER_PAUSES", "POLICIES", "CostEstimator", "EwmaCostEstimator", "LaserParts",
           "LaserPolicyConfig", "LayerPausing", "LinearCost", "Scheduler", "SchedulerConfig",
           "ScheduledSeq", "SchedulingPolicy", "StepPlan", "StepResult", "layer_pausing",
           "make_scheduler"]
