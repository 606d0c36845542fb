"""Every policy the simulator compares: the product's (``laser`` and the plain ``fcfs``,
``inference.scheduler.POLICIES``) and the baselines that live here only: ``priority`` and
``edf`` (the FCFS loop in another order) and ``partitioned`` (static per-tier pools, what
operators do today)."""

from __future__ import annotations

from inference.kv.block_manager import BlockManager
from inference.scheduler import POLICIES as PRODUCT
from inference.scheduler import Scheduler, SchedulerConfig, make_scheduler
from sim.policies.baselines import EDFScheduler, PriorityScheduler
from sim.policies.partitioned import PartitionedScheduler

POLICIES: dict[str, type[Scheduler]] = {
    **PRODUCT,
    PriorityScheduler.name: PriorityScheduler,
    EDFScheduler.name: EDFScheduler,
    PartitionedScheduler.name: PartitionedScheduler,
}


def make_policy(policy: str, config: SchedulerConfig, kv: BlockManager,
                **options) -> Scheduler:
    """Build any policy by name (``make_scheduler``'s options; ``shares=`` for
    ``partitioned``)."""
    return make_scheduler(policy, config, kv, registry=POLICIES, **options)


__all__ = ["POLICIES", "EDFScheduler", "PartitionedScheduler", "PriorityScheduler",
           "make_policy"]
