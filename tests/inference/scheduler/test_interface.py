"""The policy interface and the layer-pause hooks the engine asks for once."""

from __future__ import annotations

import math

import pytest

from inference.request import Tier
from inference.scheduler import (
    NEVER_PAUSES,
    POLICIES,
    LayerPausing,
    SchedulingPolicy,
    layer_pausing,
)
from sim.policies import POLICIES as EVERY_POLICY
from tests.inference.factories import make_request, make_scheduler, step


@pytest.mark.parametrize("name", sorted(EVERY_POLICY))
def test_every_policy_is_a_scheduling_policy(name):
    sched = make_scheduler(name)
    assert isinstance(sched, SchedulingPolicy) and sched.name == name


def test_the_product_serves_laser_and_the_plain_fallback_only():
    assert set(POLICIES) == {"laser", "fcfs"}
    assert {"priority", "edf", "partitioned"} <= set(EVERY_POLICY) - set(POLICIES)


def test_laser_brings_its_own_pause_hooks():
    sched = make_scheduler("laser", options={"pause_layers": 4})
    assert isinstance(sched, LayerPausing) and layer_pausing(sched) is sched


def test_a_policy_without_hooks_never_pauses():
    sched = make_scheduler("fcfs")
    pauser = layer_pausing(sched)
    assert pauser is NEVER_PAUSES and not isinstance(sched, LayerPausing)
    assert pauser.pause_due_at() == math.inf
    pauser.release()  # nothing held: nothing to do
    with pytest.raises(RuntimeError):
        pauser.hold(["a-0"])


def test_fcfs_plans_never_ask_for_a_pause():
    sched = make_scheduler("fcfs")
    for i in range(3):
        sched.add(make_request(f"r{i}", 12, arrival=float(i)), 0.0)
    for t in range(6):
        plan = step(sched, float(t))
        assert plan.pause_until is None and not plan.finish_paused


def test_laser_pauses_only_where_the_executor_can():
    for layers, pausable in ((0, False), (4, True)):
        sched = make_scheduler("laser", options={"pause_layers": layers})
        for i in range(2):
            sched.add(make_request(f"c{i}", 12, tier=Tier.COLD, deadline=1e6), 0.0)
        plan = sched.schedule(0.0)
        assert not plan.is_empty and (plan.pause_until is not None) is pausable
