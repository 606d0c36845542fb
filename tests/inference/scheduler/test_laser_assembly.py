"""The ``laser`` policy's parts on their own, from factories (no tensors)."""

from __future__ import annotations

import math

from inference.kv.block_manager import BlockManager
from inference.request import ContractTargets, Tier
from inference.scheduler import LinearCost
from inference.scheduler.laser import LaserParts, LaserPolicyConfig
from inference.scheduler.laser.keys import SchedClass, SortKey
from inference.scheduler.laser.parts import Aging, ColdPacing, Contract, Demotion, FillRules
from inference.scheduler.laser.pause import LayerPause
from tests.inference.factories import make_request, make_scheduler

POLICY = LaserPolicyConfig()


def one(rid: str, **kw):
    return make_request(rid, 8, **kw)[0]


def test_the_scheduler_builds_the_parts_it_is_given():
    sched = make_scheduler("laser")
    parts = LaserParts()
    for name in ("admission", "contract", "demotion", "aging", "cold", "warm", "reserve",
                 "triage"):
        assert type(getattr(sched, name)) is getattr(parts, name)
    assert type(sched.rules) is parts.fill and isinstance(sched.pause, LayerPause)


def test_contract_puts_excess_after_in_contract():
    seq = one("a")
    assert Contract().excess(seq) == 0
    seq.in_contract = False
    assert Contract().excess(seq) == 1


def test_demotion_follows_the_contract_and_the_pressure_window():
    part = Demotion(POLICY)
    assert part.demotable(one("a", targets=ContractTargets(demotable=True)))
    assert not part.demotable(one("b", targets=ContractTargets(demotable=False)))
    assert part.action(0.0, True, False) is None  # pressure must last the window
    assert part.action(POLICY.pressure_window_s + 0.1, True, False) == "demote"


def test_aging_bounds_warm_and_cold_never_hot():
    part = Aging(POLICY)
    assert part.bound(Tier.WARM) == POLICY.aging_warm_s
    assert part.bound(Tier.COLD) == POLICY.aging_cold_s
    assert part.bound(Tier.HOT) is None


def test_cold_pacing_orders_by_slack_and_promotes_below_the_threshold():
    part, seq = ColdPacing(POLICY), one("c", tier=Tier.COLD, deadline=100.0)
    assert part.when(seq, {}) == math.inf and part.when(seq, {seq.seq_id: 5.0}) == 5.0
    assert part.promotes(POLICY.promote_slack_s - 1) and not part.promotes(
        POLICY.promote_slack_s)


def test_fill_rules_caps():
    rules = FillRules(POLICY)
    assert rules.defers(POLICY.ttft_slack_frac / 2) and not rules.defers(1.0)
    assert rules.hot_caps(0.8, [(0.1, 0.02)]) == [0.8 * 0.1 - 0.02]
    warm = one("w", tier=Tier.WARM)
    keyed = [(SortKey(SchedClass.WARM, 0, 0, 0.0, warm.seq_id), warm)]
    assert len(rules.warm_floor(keyed, 0.8)) == 1
    assert rules.hot_cap_s([0.05], [0.01]) == 0.05  # hot ignores warm's floor
    assert rules.warm_cap(100, 10, 0.0) == 90 and rules.warm_cap(100, 90, 0.0) == int(
        POLICY.warm_share * 100)


def test_layer_pause_holds_and_releases_and_keeps_blocks_of_finished():
    kv = BlockManager(16, 4)
    pause = LayerPause(4, POLICY, LinearCost(0.01, per_token=0.001))
    a, b = one("a"), one("b")
    for seq in (a, b):
        kv.allocate_slots(seq, 8)
    running = pause.hold(["a-0"], [a, b])
    assert running == [b] and pause.held == [a] and pause.pausing
    assert pause.keeps_blocks(a) and not pause.keeps_blocks(b)
    assert kv.num_free_blocks == 12  # a's blocks wait for the release
    assert pause.release([b], kv) == [b] and kv.num_free_blocks == 14
    assert not LayerPause(0, POLICY, LinearCost(0.01)).pausing
